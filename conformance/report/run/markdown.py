"""Markdown report, fit for `$GITHUB_STEP_SUMMARY` (GitHub caps it at 1 MiB; this stays far below by
capping row counts, cell lengths and, last, the whole text at a line, saying what was cut).

Values (a check's expected and actual) are JSON in code spans, so GitHub shows them verbatim: quotes,
backslashes, backticks, `<tool_call>`, pipes and newlines (as JSON's `\\n`) included. Other cells are
text with Markdown's special characters escaped."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.record.outcomes import ERROR, FAIL, PASS
from conformance.record.results import (
    OUTCOMES,
    CaseResult,
    Summary,
    failed_findings,
    finding_counts,
    summaries_by_profile,
    summarize,
)
from conformance.report.run.notes import rendered_note
from conformance.report.stamp import stamp_lines
from conformance.util import exit_codes
from conformance.util.markdown_text import code_span, plain, visible

MAX_ROWS = 150
MAX_CELL = 300
MAX_BYTES = 256 * 1024
ICONS = {"pass": "✅", "fail": "❌", "skip": "⏭️", "error": "💥"}


class Value:
    """A cell that holds a value: written as JSON in a code span."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _cut_text(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _cell(value: Any) -> str:
    """One table cell. A `Value` is JSON in a code span (cut at MAX_CELL, the cut marked outside the
    span); anything else is text, shown literally: invisible characters as escapes, Markdown's special
    characters backslash-escaped and `<`, `>`, `&` as entities (GitHub would otherwise swallow a
    `<tool_call>` as an HTML tag). Pipes are escaped in both (GitHub's tables unescape them in spans)."""
    if isinstance(value, Value):
        if value.value is None:
            return ""
        text = visible(json.dumps(value.value, ensure_ascii=False, default=str))
        cell = code_span(text) if len(text) <= MAX_CELL else code_span(text[: MAX_CELL - 1]) + "…"
    else:
        cell = plain(_cut_text(visible(str(value))))
    return cell.replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"\n_{len(rows) - MAX_ROWS} more rows not shown; see results.jsonl._")
    return lines


def _heading(summary: Summary, completion: str) -> str:
    """The verdict the exit code gives: pass (0), fail (1), or error (2) with why; an unfinished run is an error
    with no code named (the signal that stopped it chose the code: 130 or 143)."""
    if completion != "complete":
        return f"# {ICONS[ERROR]} Conformance run: {ERROR}: {_cell(completion)}"
    verdict, reason = summary.verdict, summary.verdict_reason
    code = {PASS: exit_codes.OK, FAIL: exit_codes.FAILED}.get(verdict, exit_codes.ERROR)
    return f"# {ICONS[verdict]} Conformance run: {verdict} (exit {code})" + (f": {_cell(reason)}" if reason else "")


def render(results: Sequence[CaseResult], stamp: Mapping[str, Any]) -> str:
    summary = summarize(results)
    lines = [_heading(summary, stamp.get("completion") or "complete"), ""]
    lines += _table(["", ""], stamp_lines(stamp)) + ["", f"**{summary.line()}**", ""]

    rows = [[profile, *(s.counts[o] for o in OUTCOMES), s.model_misses]
            for profile, s in summaries_by_profile(results).items()]
    lines += ["## Outcomes by profile", ""] + _table(["profile", *OUTCOMES, "model miss"], rows)

    bad = [r for r in results if r.outcome in ("fail", "error")]
    if bad:
        lines += ["", "## Failures and errors", ""]
        lines += _table(
            ["", "case", "profile", "check", "expected", "actual", "reason"],
            [
                [ICONS[r.outcome], r.name, r.profile, c.name, Value(c.expected), Value(c.actual), c.reason]
                if c is not None else [ICONS[r.outcome], r.name, r.profile, "", "", "", r.reason]
                for r in bad
                for c in (r.failed_checks() or [None])  # a result without a failed check still gets its row
            ],
        )  # fmt: skip

    written = {r.case_id: note for r in results if (note := rendered_note(r)) is not None}
    if written:
        lines += ["", "## Turns not written by the chat template", ""]
        lines += _table(["case", "note"], sorted(written.items()))

    lines += ["", "## Findings (client-visible facts, not failures)", ""]
    findings = finding_counts(results)
    lines += _table(["profile", "finding", "value", "results"], [[*key, n] for key, n in sorted(findings.items())])
    notable = failed_findings(results)
    if notable:
        lines += ["", "### Where findings fail", ""]
        lines += _table(["case", "profile", "finding", "reason"], [[r.name, r.profile, c.name, c.reason] for r, c in notable])

    skipped = [r for r in results if r.outcome == "skip"]
    if skipped:
        lines += ["", "## Skipped", ""] + _table(["case", "profile", "reason"], [[r.name, r.profile, r.reason] for r in skipped])
    return _within_budget(lines)


def _within_budget(lines: list[str]) -> str:
    """The report, cut after the last whole line that fits in MAX_BYTES, with a note saying what was cut."""
    kept, size = [], 0
    for number, line in enumerate(lines):
        size += len(line.encode()) + 1
        if size > MAX_BYTES - 512:  # room for the note
            sections = [line for line in lines[number:] if line.startswith("## ")]
            more = f", including the sections {', '.join(s[3:] for s in sections)}" if sections else ""
            kept += ["", f"_Report cut at {MAX_BYTES // 1024} KiB: the last {len(lines) - number} lines are not shown"
                     f"{more}; every result is in results.jsonl._"]
            break
        kept.append(line)
    return "\n".join(kept) + "\n"
