"""report.md of a gate: the contract document for people who own clients, fit for
`$GITHUB_STEP_SUMMARY` (GitHub-flavoured Markdown, under GitHub's 1 MiB cap).

Every server string is shown as a code span (so `<tool_call>` stays text) and every other string is
escaped; tables and differences are capped so the whole stays under MAX_BYTES."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.report.gate import actions, view
from conformance.report.gate.view import Code, DifferenceGroup, Segments
from conformance.util.markdown_text import code_span, visible

MAX_BYTES = 1024 * 1024 - 32 * 1024  # GitHub refuses a step summary over 1 MiB
MAX_TABLE_ROWS = 200
# What can start markup mid-line in GFM (emphasis, code, links, HTML, entities, tables, strike, math).
# Text never starts a line here, so line-start markers (#, -, +, 1.) need no escape.
_MARKDOWN_PUNCT = re.compile(r"([\\`*_\[\]<>|~&$])")
ROW_MARKS = {"unchanged": "no", "acknowledged": "yes, acknowledged", "unacknowledged": "**yes, not acknowledged**"}


def text(value: str) -> str:
    """Plain text that Markdown and GitHub's HTML filter leave alone (punctuation backslash-escaped)."""
    return _MARKDOWN_PUNCT.sub(r"\\\1", visible(value))


def code(value: str, in_table: bool = False) -> str:
    """A code span holding `value` exactly, whatever backticks or markup it contains (`|` escaped in a
    table cell: GFM splits cells before reading code spans)."""
    span = code_span(visible(value)) if value else ""
    return span.replace("|", "\\|") if in_table else span


def segments(parts: Segments, in_table: bool = False) -> str:
    return "".join(code(p, in_table) if isinstance(p, Code) else text(p) for p in parts)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], more: str = "rows") -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows[:MAX_TABLE_ROWS]]
    if len(rows) > MAX_TABLE_ROWS:
        lines += ["", f"_{len(rows) - MAX_TABLE_ROWS} more {more} not shown; see report.html or gate.json._"]
    return lines


def _verdict(gate: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    icon, outcome, line = view.verdict(gate)
    exit_code = (gate.get("verdict") or {}).get("exit_code")
    refused = view.refusal(gate)
    if refused is not None:  # the server's own line first
        return [f"# {icon} {outcome}: the candidate {code(labels['candidate'])} refuses to start this checkpoint", "",
                f"**{text(refused.server)} said**: {code(refused.message)}", "",
                f"{segments(refused.meaning)} Gate exit code {code(str(exit_code))}."]
    return [
        f"# {icon} {outcome}: {text(line)}", "",
        f"**Switch gate**: {code(labels['baseline'])} (baseline, what clients get today) → "
        f"{code(labels['candidate'])} (candidate, what they get after the switch); gate exit code "
        f"{code(str(exit_code))}. {segments(view.expectations_sentence(gate))}", "",
        "For each case the suite sent the same request to both servers, streaming and not, and compared what a "
        "client receives. Every difference below says what a client must do about it. Unacknowledged "
        "differences fail the gate until they are fixed or acknowledged in the expectations file.",
    ]


def _head(gate: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    lines = _verdict(gate, labels)
    lines[-1] += " The same content with filters is in `report.html`; the full record is `gate.json`."
    return [
        *lines, "",
        "## Servers compared", "",
        *_table(["", f"baseline {code(labels['baseline'], True)}", f"candidate {code(labels['candidate'], True)}"],
                [[text(label), code(b, True), code(c, True)] for label, b, c in view.stamp_rows(gate)]),
    ]


def _to_do(groups: Sequence[DifferenceGroup], labels: Mapping[str, str]) -> list[str]:
    """The differences as a to-do list: one row per distinct advice, unacknowledged first."""
    lines = ["", "## What clients must change", ""]
    if not groups:
        return lines + ["No client-visible difference was found between the two servers."]
    items = actions.to_do(groups, labels)
    for acknowledged, title, note in actions.TO_DO_SECTIONS:
        chosen = [item for item in items if item.acknowledged == acknowledged]
        if chosen:
            lines += [f"### {actions.to_do_heading(title, chosen)}", "", note, ""]
            lines += _table(["difference", "where", "what changed", "client action"],
                            [_to_do_row(item, labels) for item in chosen], more="things to do") + [""]
    return lines


def _to_do_row(item: actions.ToDo, labels: Mapping[str, str]) -> list[str]:
    cases = item.where()
    where = ", ".join(f"{code(case_id, True)} ({text(modes)})" for case_id, modes, _ in cases[: actions.MAX_ROWS_LISTED])
    if len(cases) > actions.MAX_ROWS_LISTED:
        where += f" and {len(cases) - actions.MAX_ROWS_LISTED} more"
    group, member = item.entries[0]
    example = text(view.plain(member.get("summary") or group.title, 300))
    unforced = view.unforced_sides(member)
    if unforced:
        example += f" (unforced answer under {', '.join(code(labels[side], True) for side in unforced)})"
    if len(item.rows) > 1:
        example = f"e.g. {code(group.case_id, True)}: {example}"
    return [text(item.title), where, example, segments(item.action, True)]


def _answer_cell(behaviour: Mapping[str, Any], side: view.Side) -> str:
    modes = view.unforced_modes(behaviour, side)
    answer = code(view.plain(behaviour.get(side) or ""), True)
    return f"**unforced** ({text(modes)}) {answer}" if modes else answer


def _difference_details(group: DifferenceGroup, labels: Mapping[str, str]) -> list[str]:
    state = "acknowledged" if group.acknowledged else "**not acknowledged**"
    lines = [f"#### {code(group.case_id)} · {code(group.mode)} · {text(group.title)} ({state})", ""]
    for found in view.group_excerpts(group):
        if found["request"] is not None:
            lines.append(f"- **Request** (the fields that matter): {code(found['request'])}")
        for side in view.SIDES:
            if found[side] is not None:
                reason = view.unforced_reason(group.members[0], side)
                mark = f" (**unforced**: {text(reason)})" if reason else ""
                lines.append(f"- **{code(labels[side])} answered**{mark}: {code(found[side])}")
    for member in group.members:
        base, cand = view.difference_values(member)
        field, summary = view.what_differs(member)
        lines += [f"- **What differs**: {code(field) + ': ' if field else ''}{text(summary)}",
                  f"  - {code(labels['baseline'])} (baseline): {code(base)}",
                  f"  - {code(labels['candidate'])} (candidate): {code(cand)}",
                  f"  - **Client action**: {segments(actions.client_action(member, labels))}"]
        ack = view.acknowledgement(member)
        if ack:
            where = ", ".join(f"{key} {code(value)}" for key, value in ack.items() if key != "reason")
            lines.append(f"  - **Acknowledged**: {text(ack.get('reason', ''))}" + (f" ({where})" if where else ""))
    return lines + [""]


def _behaviours(gate: Mapping[str, Any], groups: Sequence[DifferenceGroup], labels: Mapping[str, str],
                budget: int) -> list[str]:
    """Per feature: the behaviour table, then each changed row's differences; when the budget runs out,
    tables alone, then nothing."""
    lines = ["", "## Behaviours by feature", "",
             "One row per case (both modes folded), under its first feature. Each changed row is followed by the "
             f"request, both servers' answers and the client action. An answer marked **unforced** is "
             f"{text(view.UNFORCED_MEANING)}.", ""]
    used, cut = 0, 0
    by_case = view.groups_by_case(groups)
    for feature, rows in view.behaviours_by_feature(gate).items():
        table = [f"### {text(feature)}", ""] + _table(
            ["case", f"{code(labels['baseline'], True)} (baseline)", f"{code(labels['candidate'], True)} (candidate)",
             "changed?"],
            [[code(str(b.get("case_id")), True), *(_answer_cell(b, side) for side in view.SIDES),
              ROW_MARKS[view.row_state(b, by_case.get(str(b.get("case_id")), []))]] for b in rows],
        ) + [""]
        details = []
        for behaviour in rows:
            case_groups = by_case.get(str(behaviour.get("case_id")), [])
            if not case_groups and view.row_state(behaviour, case_groups) == "unchanged":
                continue
            details += [f"**{code(str(behaviour.get('case_id')))}**: {text(view.plain(behaviour.get('description') or '', 400))}", ""]
            for group in case_groups:
                details += _difference_details(group, labels)
        for block in (table + details, table):
            size = len("\n".join(block).encode())
            if used + size <= budget:
                used += size
                lines += block
                cut += len(details) > 0 and block is table
                break
        else:
            cut += 1
    known = {str(b.get("case_id")) for b in gate.get("behaviours") or []}
    orphans = [g for g in groups if g.case_id not in known]
    if orphans:
        lines += ["### Differences of cases without a behaviour row", ""]
        for group in orphans:
            block = _difference_details(group, labels)
            used += len("\n".join(block).encode())
            if used > budget:
                cut += 1
                break
            lines += block
    if cut:
        lines += [f"_Some details ({cut} sections) are not shown to keep this summary under GitHub's 1 MiB limit; "
                  "see report.html or gate.json._", ""]
    return lines


def _stale(gate: Mapping[str, Any]) -> list[str]:
    stale = gate.get("stale") or []
    if not stale:
        return []
    return ["", f"## Stale expectations ({len(stale)})", "",
            "Acknowledged differences that no longer occur: the expectations file can drop them.", "",
            *_table(["selector", "kind", "reason", "source"],
                    [[code(view.json_text(s.get("selector"), 200), True), code(str(s.get("kind")), True),
                      text(view.plain(s.get("reason") or "", 300)), code(view.plain(s.get("source") or ""), True)]
                     for s in stale], more="stale expectations")]


def _timing(gate: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    sides = [f"{code(labels['baseline'], True)} (baseline)", f"{code(labels['candidate'], True)} (candidate)"]
    lines = ["", "## Timing (streaming)", "", segments(view.structure_sentence(gate)), ""]
    structure = view.tool_name_line_rows(gate)
    if structure:
        lines += ["Data lines, median / p90 / max over those streams:", ""]
        lines += _table(["", *sides], [[text(m), text(b), text(c)] for m, b, c in structure]) + [""]
    lines += [segments(view.timing_caveat(gate)), "", segments(view.timing_sentence(gate)), ""]
    rows = view.timing_rows(gate)
    if rows:
        lines += ["Seconds since the request started, median / p90 / max over the streamed case runs:", ""]
        lines += _table(["moment", *sides], [[text(m), text(b), text(c)] for m, b, c in rows])
    return lines + ["", "Chart of both distributions: [`timing.png`](timing.png) (next to this report)."]


def _cors(gate: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    lines = ["", "## Browser clients (CORS)", ""]
    cors = gate.get("cors")
    if cors:
        lines += [f"A browser sends a preflight {code('OPTIONS ' + view.plain(cors.get('path') or ''))} with "
                  f"{code('Origin: ' + view.plain(cors.get('origin') or ''))} before a cross-origin call. Answers:", ""]
        lines += _table(["", f"{code(labels['baseline'], True)} (baseline)", f"{code(labels['candidate'], True)} (candidate)"],
                        [[text(what), code(b, True), code(c, True)] for what, b, c in view.cors_rows(cors)])
        lines.append("")
    return lines + [f"- {segments(sentence)}" for sentence in view.cors_meaning(gate)]


def render(gate: Mapping[str, Any]) -> str:
    labels = view.labels(gate)
    groups = view.difference_groups(gate)
    refused = view.refusal(gate) is not None  # nothing was sent: no differences, timing or browser access to show
    before = _head(gate, labels) + ([] if refused else _to_do(groups, labels))
    after = [] if refused else _stale(gate) + _timing(gate, labels) + _cors(gate, labels)
    after += ["", "---", f"_Made by hf-parser-conformance {text(view.plain(gate.get('suite_version') or '?'))} "
              f"from `gate.json` ({text(view.plain(gate.get('format') or '?'))}), {text(view.plain(gate.get('created_at') or ''))}._"]
    budget = MAX_BYTES - len("\n".join(before + after).encode()) - 4096
    document = "\n".join(before + ([] if refused else _behaviours(gate, groups, labels, budget)) + after) + "\n"
    if len(document.encode()) > MAX_BYTES:  # only if the capped tables alone are that large
        document = document.encode()[: MAX_BYTES - 200].decode("utf-8", "ignore").rsplit("\n", 1)[0]
        document += "\n\n_Report truncated at GitHub's size limit; see report.html or gate.json._\n"
    return document


MAX_SUMMARY_ROWS = 50  # unacknowledged differences listed in the step summary; the rest are counted


def render_summary(gate: Mapping[str, Any]) -> str:
    """The job summary of a CI step (`summary.md`, for $GITHUB_STEP_SUMMARY): the verdict, what clients must
    change and every unacknowledged difference, then where the rest is; acknowledged detail, the servers'
    stamps, timing and browser access stay in report.html, report.md and gate.json (a passing gate's whole
    report ran to thousands of lines there)."""
    labels = view.labels(gate)
    if view.refusal(gate) is not None:
        return "\n".join(_verdict(gate, labels)) + "\n"
    groups = view.difference_groups(gate)
    open_groups = [group for group in groups if not group.acknowledged]
    lines = _verdict(gate, labels) + _to_do(groups, labels)
    lines += ["", f"## Unacknowledged differences ({len(open_groups)})", ""]
    if not open_groups:
        lines.append("None: every difference is acknowledged by the expectations file.")
    for group in open_groups[:MAX_SUMMARY_ROWS]:
        lines.append(f"- {code(group.case_id)} {text(group.mode)}, {text(group.title)}: {text(group.summary)}")
    if len(open_groups) > MAX_SUMMARY_ROWS:
        lines.append(f"- and {len(open_groups) - MAX_SUMMARY_ROWS} more: see `report.html` "
                     "(`report.html?outcome=unacknowledged`) or `report.md`")
    acknowledged = sum(len(group.members) for group in groups if group.acknowledged)
    lines += ["", "## Not in this summary", "",
              f"The {acknowledged} acknowledged difference(s) in detail (each one's request, both answers and the "
              "expectation that acknowledges it), the servers compared, the timing and browser access are in the "
              "gate's output directory, next to this summary:",
              "- `report.html`: set the **Outcome** filter to `acknowledged` (or open "
              "`report.html?outcome=acknowledged`); a row's **show** opens its differences;",
              "- `gate.json`: `differences`, each with its `acknowledged` entry (`null`: not acknowledged), "
              "`behaviours`, `timing`, `cors`;",
              "- `report.md`: the whole report as Markdown."]
    return "\n".join(lines) + "\n"
