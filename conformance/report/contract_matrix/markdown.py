"""contract.md: the contract matrix as GitHub-flavoured Markdown, one table per feature with one column
per server; a cell that differs from its row's reference is marked ≠ with what differs. Server strings
are code spans; the whole stays under GitHub's 1 MiB (cut at a whole line, saying so)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.compare.contract_matrix import rows_by_feature
from conformance.report.contract_matrix import view
from conformance.report.gate.markdown import MAX_BYTES, code, segments, text

STATE_MARKS = {"differs": "**≠** ", "reference": "", "same": "", "unobserved": "_not observed:_ "}


def _cell(row: Mapping[str, Any], index: int, labels: list[str]) -> str:
    cell = row["cells"][index]
    lines = [STATE_MARKS[view.cell_state(row, index)] + code(view.answer(cell), True)]
    lines += [segments(note, True) for note in view.cell_notes(row, index, labels)]
    return "<br>".join(lines)


def _case(row: Mapping[str, Any]) -> str:
    """The case id, and its contract references when the case files give them."""
    references = ", ".join(str(r) for r in row.get("references") or [])
    return code(str(row["case_id"]), True) + (f"<br>{text(references)}" if references else "")


def render(matrix: Mapping[str, Any]) -> str:
    labels = view.labels(matrix)
    rows = matrix.get("rows") or []
    header = "| " + " | ".join(["case", "mode", *(code(label, True) for label in labels)]) + " |"
    rule = "|" + "---|" * (2 + len(labels))
    lines = [
        f"# Contract matrix: {', '.join(code(label) for label in labels)}", "",
        f"{len(rows)} behaviours (case x mode) recorded from {len(labels)} servers; {view.differing_rows(matrix)} "
        "differ. Each cell says what that server did (refusal, parsed message, stream shape, finish_reason, CORS "
        "preflight answer). A cell marked **≠** differs from the row's reference (the first server that answered) "
        "in what a client sees, and says how; outcomes (pass, fail, skip) follow each profile's expectations and "
        "are noted apart. The same with highlighting and a filter is in `contract.html`.", "",
        "## Servers", "",
        "| " + " | ".join(["", *(code(label, True) for label in labels)]) + " |", "|" + "---|" * (1 + len(labels)),
        *("| " + " | ".join([text(row[0]), *(code(value, True) for value in row[1:])]) + " |"
          for row in view.stamp_rows(matrix)),
    ]
    for feature, feature_rows in rows_by_feature(matrix).items():
        lines += ["", f"## {text(feature)}", "", header, rule]
        lines += ["| " + " | ".join([_case(row), text(str(row["mode"])),
                                     *(_cell(row, i, labels) for i in range(len(labels)))]) + " |"
                  for row in feature_rows]
    lines += ["", "---", f"_Made by hf-parser-conformance {text(str(matrix.get('suite_version') or '?'))} from "
              f"{len(labels)} recorded runs ({text(str(matrix.get('format') or '?'))}), "
              f"{text(str(matrix.get('created_at') or ''))}._"]
    document = "\n".join(lines) + "\n"
    if len(document.encode()) > MAX_BYTES:
        document = document.encode()[: MAX_BYTES - 200].decode("utf-8", "ignore").rsplit("\n", 1)[0]
        document += "\n\n_Cut at GitHub's size limit; see contract.html._\n"
    return document
