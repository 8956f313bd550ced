"""What both views of the contract matrix show (see `conformance.compare.contract_matrix`), worked out once: the column
headers and stamp rows, and each cell's notes (outcome, and what differs from the row's reference cell)
as segments, so each renderer escapes them its own way; and the writer of contract.md + contract.html."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conformance.report.gate.view import KIND_TITLES, Code, Segments, json_text, plain, unwrapped
from conformance.report.stamp import stamp_lines

CELL_CHARS = 240  # an answer summary in a cell


MAX_NOTES = 6  # differences named per cell; the rest are counted


# A matrix compares with the row's reference, not before and after: no "newly".
TITLES = {**KIND_TITLES, "request_refused": "refused where the reference answered",
          "request_accepted": "answered where the reference refused"}


def labels(matrix: Mapping[str, Any]) -> list[str]:
    return [plain(column.get("label") or f"run {i + 1}", 60) for i, column in enumerate(matrix.get("columns") or [])]


def stamp_rows(matrix: Mapping[str, Any]) -> list[list[str]]:
    """[label, value per column]: results counts, then the stamp fields some column knows."""
    columns = matrix.get("columns") or []
    rows = [["results", *(_counts(c.get("summary")) for c in columns)]]
    lines = [stamp_lines(c.get("stamp") or {}) for c in columns]
    for at, (label, _) in enumerate(lines[0] if lines else []):
        values = [column_lines[at][1] for column_lines in lines]
        if label not in ("report time", "suite version") and any(v != "unknown" for v in values):
            rows.append([label, *(plain(v, 300) for v in values)])
    return rows


def _counts(summary: Mapping[str, Any] | None) -> str:
    counts = (summary or {}).get("counts") or {}
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n) or "no results"


def differing_rows(matrix: Mapping[str, Any]) -> int:
    return sum(1 for row in matrix.get("rows") or [] if row.get("differs"))


def answer(cell: Mapping[str, Any]) -> str:
    return plain(cell.get("answer") or "", CELL_CHARS)


def cell_notes(row: Mapping[str, Any], index: int, column_labels: Sequence[str]) -> list[Segments]:
    """Lines under a cell's answer: the outcome when not a pass, then each difference from the reference."""
    cell = (row.get("cells") or [])[index]
    notes: list[Segments] = []
    if cell.get("outcome") not in (None, "pass"):
        reason = f": {plain(cell['reason'], 160)}" if cell.get("reason") else ""
        notes.append([f"{cell['outcome']}{reason}"])
    reference = row.get("reference_column")
    if index == reference and row.get("differs"):
        notes.append(["the reference of this row"])
    differences = cell.get("differences") or []
    for difference in differences[:MAX_NOTES]:
        title = TITLES.get(str(difference.get("kind")), str(difference.get("kind")))
        where = [" ", Code(plain(difference["field"], 80))] if difference.get("field") else []
        notes.append(["≠ ", title, *where, ": ", Code(json_text(unwrapped(difference.get("reference")), 80)),
                      f" under {column_labels[reference]} → " if reference is not None else " → ",
                      Code(json_text(unwrapped(difference.get("value")), 80))])
    if len(differences) > MAX_NOTES:
        notes.append([f"≠ and {len(differences) - MAX_NOTES} more differences"])
    return notes


def cell_state(row: Mapping[str, Any], index: int) -> str:
    """`differs`, `same`, `reference` (of a row that differs) or `unobserved` (no answer to compare)."""
    cell = (row.get("cells") or [])[index]
    if not cell.get("observed"):
        return "unobserved"
    if cell.get("differences"):
        return "differs"
    return "reference" if row.get("differs") and index == row.get("reference_column") else "same"
