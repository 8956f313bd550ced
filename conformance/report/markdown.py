"""Markdown report, fit for `$GITHUB_STEP_SUMMARY` (GitHub caps it at 1 MiB; this stays far below by
capping row counts and cell lengths)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from conformance import exit_codes
from conformance.checks import ERROR, FAIL, PASS
from conformance.results import (
    OUTCOMES,
    CaseResult,
    Summary,
    failed_findings,
    finding_counts,
    summaries_by_profile,
    summarize,
)
from conformance.report.stamp import stamp_lines

MAX_ROWS = 150
MAX_CELL = 300
MAX_BYTES = 256 * 1024
ICONS = {"pass": "✅", "fail": "❌", "skip": "⏭️", "error": "💥"}


def _cell(value: Any) -> str:
    """One table cell: JSON for structured values, newlines shown as \\n, cut at MAX_CELL, and `<`, `>`,
    `&`, `|` escaped (GitHub would otherwise swallow a `<tool_call>` as an HTML tag)."""
    text = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (dict, list)) else str(value)
    text = text.replace("\n", "\\n")
    if len(text) > MAX_CELL:
        text = text[: MAX_CELL - 1] + "…"
    return escape(text, quote=False).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"\n_{len(rows) - MAX_ROWS} more rows not shown; see results.jsonl._")
    return lines


def _heading(summary: Summary, completion: str) -> str:
    """The verdict the exit code gives: pass (0), fail (1), or error (2) with why; an unfinished run is an error."""
    verdict, reason = summary.verdict, summary.verdict_reason
    if completion != "complete":
        verdict, reason = ERROR, completion
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
                [ICONS[r.outcome], r.name, r.profile, c.name, c.expected if c.expected is not None else "",
                 c.actual if c.actual is not None else "", c.reason]
                if c is not None else [ICONS[r.outcome], r.name, r.profile, "", "", "", r.reason]
                for r in bad
                for c in (r.failed_checks() or [None])  # a result without a failed check still gets its row
            ],
        )  # fmt: skip

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
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_BYTES:
        text = text.encode()[: MAX_BYTES - 200].decode("utf-8", "ignore") + "\n\n_Report truncated; see results.jsonl._\n"
    return text
