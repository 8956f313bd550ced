"""A single self-contained HTML page: summary, then one collapsible drill-down per case x mode x
profile with its checks (expected vs actual), the request sent, the raw stream (with arrival
times) or the response, and the error body."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from conformance.checks import message_view, read_stream, response_message
from conformance.results import CaseResult, summarize
from conformance.report.stamp import stamp_lines
from conformance.transcript import Transcript

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
pre{background:#f6f8fa;padding:.5em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.pass{color:#1a7f37}.fail{color:#cf222e}.error{color:#8250df}.skip{color:#9a6700}
details{border-bottom:1px solid #eee;padding:.2em 0}summary{cursor:pointer}
"""


def _pre(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    return f"<pre>{escape(text)}</pre>"


def _checks_table(result: CaseResult) -> str:
    rows = "".join(
        f"<tr><td>{escape(c.name)}</td><td>{escape(c.kind)}</td><td class='{c.outcome}'>{c.outcome}</td>"
        f"<td>{escape(c.reason)}</td><td>{_pre(c.expected) if c.expected is not None else ''}</td>"
        f"<td>{_pre(c.actual) if c.actual is not None else ''}</td></tr>"
        for c in result.checks
    )
    header = "".join(f"<th>{name}</th>" for name in ("check", "kind", "outcome", "reason", "expected", "actual"))
    return f"<table><tr>{header}</tr>{rows}</table>"


def _transcript_section(transcript: Transcript | None) -> str:
    if transcript is None:
        return "<p>No transcript recorded.</p>"
    parts = [f"<h4>Request ({escape(transcript.endpoint)}, {escape(transcript.mode)})</h4>", _pre(transcript.request)]
    status = transcript.status if transcript.status is not None else "none"
    parts.append(f"<p>HTTP status: {status}; duration {transcript.duration:.3f} s</p>")
    if transcript.transport_error:
        parts.append(f"<p class='error'>Transport: {escape(transcript.transport_error)}</p>")
    if transcript.error_body is not None:
        parts += ["<h4>Error body</h4>", _pre(transcript.error_body)]
    message = read_stream(transcript).message if transcript.sse else response_message(transcript)
    if message is not None and transcript.status == 200:
        parts += ["<h4>Message as a client sees it (reassembled)</h4>", _pre(message_view(message))]
    if transcript.sse:
        lines = "\n".join(f"{line.t:9.3f}s  {line.data}" for line in transcript.sse)
        parts += [f"<h4>Raw stream ({len(transcript.sse)} data lines)</h4>", _pre(lines)]
    if transcript.response is not None:
        parts += ["<h4>Response</h4>", _pre(transcript.response)]
    return "".join(parts)


def render(
    results: Sequence[CaseResult],
    stamp: Mapping[str, Any],
    transcripts: Sequence[Transcript] = (),
) -> str:
    summary = summarize(results)
    by_key = {(t.case_id, t.mode, t.profile, t.repeat): t for t in transcripts}
    stamp_rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in stamp_lines(stamp))
    order = {"error": 0, "fail": 1, "skip": 2, "pass": 3}
    cases = []
    for result in sorted(results, key=lambda r: (order[r.outcome], r.profile, r.case_id, r.mode, r.repeat)):
        transcript = by_key.get((result.case_id, result.mode, result.profile, result.repeat))
        title = (f"<span class='{result.outcome}'>{result.outcome.upper()}</span> {escape(result.profile)} "
                 f"<b>{escape(result.name)}</b>{' #' + str(result.repeat) if result.repeat else ''} "
                 f"{escape(result.reason[:200])}")
        cases.append(
            f"<details id='{escape(result.profile)}-{escape(result.name)}-{result.repeat}'><summary>{title}</summary>"
            f"<p>{escape(result.description)}</p><p>features: {escape(', '.join(result.features))}</p>"
            f"{_checks_table(result)}{_transcript_section(transcript)}</details>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Conformance run</title>"
        f"<style>{STYLE}</style></head><body><h1>Conformance run</h1><table>{stamp_rows}</table>"
        f"<p><b>{escape(summary.line())}</b></p><h2>Cases</h2>{''.join(cases)}</body></html>\n"
    )
