"""A single self-contained HTML page: the stamp, outcome counts, the findings across the run, then
one collapsible drill-down per case x mode x profile (worst first) with its checks (expected vs
actual), the forced output, the request sent, the message a client sees, the raw stream (with
arrival times) or the response, and the error body.

JSON values are written compact (`json_text`: every number and escape as json writes it) and laid out
by the page's own script when it loads (`LAYOUT`: indented by two, a list of plain values on one line),
from the text's own tokens. Laying them out here was half of the page's CPU; without the script they
stay readable on one line."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from conformance.record.case_model import is_stream
from conformance.record.results import (
    OUTCOMES,
    CaseResult,
    failed_findings,
    finding_counts,
    summaries_by_profile,
    summarize,
)
from conformance.record.transcript import Transcript
from conformance.record.wire import Message, read_stream, response_message
from conformance.report.run.notes import WRITTEN_FROM_TEMPLATE, rendered_note
from conformance.report.stamp import stamp_lines
from conformance.util.json_codec import json_text
from conformance.util.markdown_text import visible

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0}
th{white-space:nowrap}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
pre,.raw td{font-family:ui-monospace,monospace;font-size:.85em}
pre{background:#f6f8fa;padding:.5em;margin:.2em 0;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.checks{width:100%;table-layout:fixed}.checks td{overflow-wrap:anywhere}
.raw{width:100%}.raw td{white-space:pre-wrap;word-break:break-all;background:#f6f8fa}.raw td.t{white-space:nowrap}
.pass{color:#1a7f37}.fail{color:#cf222e}.error{color:#8250df}.skip{color:#9a6700}
.note{color:#57606a}
details{border-bottom:1px solid #eee;padding:.2em 0}summary{cursor:pointer}
"""
# Lays out every `pre.json` in place: the compact text rewritten as json.dumps(indent=2) lays the value
# out, except that a list of plain values (token ids, enums) stays on one line. It reads the text's own
# tokens, never JSON.parse: numbers past 2**53, -0.0, NaN and key order stay as recorded.
LAYOUT = r"""
(function () {
  function layout(text) {
    var i = 0;
    function skip() { while (text[i] === ' ') i++; }
    function string() {
      var start = i++;
      while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
      if (i >= text.length) throw new Error('unterminated string');
      return text.slice(start, ++i);
    }
    function node() {
      skip();
      var open = text[i], items = [];
      if (open === '{' || open === '[') {
        var close = open === '{' ? '}' : ']';
        i++; skip();
        if (text[i] === close) { i++; return {open: open, items: items}; }
        while (i < text.length) {
          skip();
          if (open === '{') { var key = string(); skip(); i++; items.push([key, node()]); }
          else items.push(node());
          skip();
          if (text[i++] === close) return {open: open, items: items};
        }
        throw new Error('unclosed ' + open);
      }
      if (open === '"') return {text: string()};
      var start = i;
      while (i < text.length && ',]} '.indexOf(text[i]) < 0) i++;
      if (i === start) throw new Error('no value at ' + i);
      return {text: text.slice(start, i)};
    }
    function print(n, depth) {
      if (!n.open) return n.text;
      var pad = '  '.repeat(depth + 1), end = '\n' + '  '.repeat(depth);
      if (n.open === '{') {
        if (!n.items.length) return '{}';
        return '{\n' + n.items.map(function (kv) { return pad + kv[0] + ': ' + print(kv[1], depth + 1); }).join(',\n') + end + '}';
      }
      if (n.items.every(function (item) { return !item.open; }))
        return '[' + n.items.map(function (item) { return item.text; }).join(', ') + ']';
      return '[\n' + n.items.map(function (item) { return pad + print(item, depth + 1); }).join(',\n') + end + ']';
    }
    var laid = print(node(), 0);
    skip();
    if (i !== text.length) throw new Error('not one JSON value');
    return laid;
  }
  document.querySelectorAll('pre.json').forEach(function (pre) {
    try { pre.textContent = layout(pre.textContent); } catch (e) { /* left compact */ }
  });
  document.body.dataset.ready = 'yes';
})();
"""
SEVERITY = {"error": 0, "fail": 1, "skip": 2, "pass": 3}


# What an HTML parser cannot carry in text: it drops NUL and turns CR (and CR LF) into LF.
_UNPARSABLE = re.compile("[\x00\r]")


def _pre(value: Any) -> str:
    """A text as it is, but for what HTML cannot carry, written as its escape (a NUL a server sent would
    vanish, a CR turn into a line break); any other value as its JSON text, which LAYOUT lays out."""
    if isinstance(value, str):
        return f"<pre>{escape(_UNPARSABLE.sub(lambda m: visible(m.group()), value))}</pre>"
    return f"<pre class='json'>{escape(json_text(value))}</pre>"


def _anchor(result: CaseResult) -> str:
    return escape(f"{result.profile}-{result.name}-{result.repeat}")


def _client_view(message: Message) -> dict[str, Any]:
    """The message as a client receives it: arguments as the exact string delivered."""
    return {
        "reasoning": message.reasoning,
        "reasoning arrived in": sorted(message.reasoning_keys) or None,
        "content": message.content,
        "tool_calls": [{"id": c.id, "type": c.type, "name": c.name, "arguments": c.arguments}
                       for c in message.tool_calls],
        "finish_reason": message.finish_reason,
    }


_CHECKS_HEADER = "<table class='checks'><tr>" + "".join(
    f"<th style='width:{width}%'>{name}</th>"  # percent
    for name, width in {"check": 18, "kind": 10, "outcome": 6, "reason": 22, "expected": 22, "actual": 22}.items()
) + "</tr>"


def _checks_table(result: CaseResult, parts: list[str]) -> None:
    def cell(value: Any) -> str:
        return _pre(value) if value is not None else ""

    parts.append(_CHECKS_HEADER)
    parts += [
        f"<tr><td>{escape(c.name)}</td><td>{escape(c.kind)}</td><td class='{c.outcome}'>{c.outcome}</td>"
        f"<td>{escape(c.reason)}</td><td>{cell(c.expected)}</td><td>{cell(c.actual)}</td></tr>"
        for c in result.checks
    ]
    parts.append("</table>")


def _raw_stream(transcript: Transcript, parts: list[str]) -> None:
    parts.append(f"<h4>Raw stream ({len(transcript.sse)} <code>data:</code> lines, arrival time since the request)</h4>"
                 "<table class='raw'>")
    parts += [f"<tr><td class='t'>{line.t:.3f}s</td><td>{escape(line.data)}</td></tr>" for line in transcript.sse]
    parts.append("</table>")


def _transcript_section(transcript: Transcript | None, parts: list[str]) -> None:
    if transcript is None:
        parts.append("<p>No transcript recorded.</p>")
        return
    if transcript.skip_reason:
        parts.append(f"<p>Not sent: {escape(transcript.skip_reason)}</p>")
        return
    forced = transcript.forced_text if transcript.forced else None
    if forced is not None:
        parts += ["<h4>Forced output (the raw text the model was made to generate)</h4>", _pre(forced)]
    parts += [f"<h4>Request ({escape(transcript.endpoint)}, {escape(transcript.mode)})</h4>", _pre(transcript.request)]
    status = transcript.status if transcript.status is not None else "none"
    parts.append(f"<p>HTTP status: {status}; duration {transcript.duration:.3f} s</p>")
    if transcript.transport_error:
        parts.append(f"<p class='error'>Transport: {escape(transcript.transport_error)}</p>")
    if transcript.error_body is not None:
        parts += ["<h4>Error body</h4>", _pre(transcript.error_body)]
    try:
        message = read_stream(transcript).message if is_stream(transcript.mode) else response_message(transcript)
    except (AttributeError, TypeError, ValueError, LookupError):  # the shape is wrong: the checks say where
        message = None
    if message is not None and transcript.status == 200:
        how = "reassembled from the stream" if is_stream(transcript.mode) else "the response's message"
        parts += [f"<h4>Message as a client sees it ({how})</h4>", _pre(_client_view(message))]
    if transcript.sse:
        _raw_stream(transcript, parts)
    if transcript.response is not None:
        parts += ["<h4>Response</h4>", _pre(transcript.response)]


def _outcomes_table(results: Sequence[CaseResult]) -> str:
    header = "".join(f"<th class='{o}'>{o}</th>" for o in OUTCOMES)
    rows = []
    for profile, summary in summaries_by_profile(results).items():
        cells = "".join(f"<td>{summary.counts[o]}</td>" for o in OUTCOMES)
        rows.append(f"<tr><td>{escape(profile)}</td>{cells}<td>{summary.model_misses}</td></tr>")
    return f"<table><tr><th>profile</th>{header}<th>model miss</th></tr>{''.join(rows)}</table>"


def _findings_section(results: Sequence[CaseResult]) -> str:
    counts = finding_counts(results)
    if not counts:
        return ""
    rows = "".join(f"<tr><td>{escape(profile)}</td><td>{escape(name)}</td><td>{escape(value)}</td><td>{n}</td></tr>"
                   for (profile, name, value), n in sorted(counts.items()))
    parts = ["<h2>Findings</h2><p class='note'>Client-visible facts and argument-schema checks; they never fail a "
             "case.</p>", f"<table><tr><th>profile</th><th>finding</th><th>value</th><th>results</th></tr>{rows}</table>"]
    failed = failed_findings(results)
    if failed:
        items = "".join(f"<li><a href='#{_anchor(r)}'>{escape(r.profile)} {escape(r.name)}</a> "
                        f"<b>{escape(c.name)}</b>: {escape(c.reason)}</li>" for r, c in failed)
        parts.append(f"<h3>Where findings come out <span class='fail'>fail</span></h3><ul>{items}</ul>")
    return "".join(parts)


def _case_details(result: CaseResult, transcript: Transcript | None, parts: list[str]) -> None:
    """Append the case's drill-down to `parts` (the page is joined once: each level of joining its
    pieces copied the whole page again)."""
    note = result.reason if result.outcome != "pass" else result.description
    written = rendered_note(result)
    parts.append(
        f"<details id='{_anchor(result)}'><summary><span class='{result.outcome}'>{result.outcome.upper()}</span> "
        f"{escape(result.profile)} <b>{escape(result.name)}</b>{' #' + str(result.repeat) if result.repeat else ''} "
        f"<span class='{'note' if result.outcome == 'pass' else result.outcome}'>{escape(note[:200])}</span>"
        f"{f' <span class=note>({WRITTEN_FROM_TEMPLATE})</span>' if written else ''}</summary>"
        f"<p>{escape(result.description)}</p><p class='note'>features: {escape(', '.join(result.features))}</p>"
        f"{f'<p class=note>{escape(written)}</p>' if written else ''}"
    )
    _checks_table(result, parts)
    _transcript_section(transcript, parts)
    parts.append("</details>")


def render(
    results: Sequence[CaseResult],
    stamp: Mapping[str, Any],
    transcripts: Sequence[Transcript] = (),
) -> str:
    summary = summarize(results)
    by_key = {(t.case_id, t.mode, t.profile, t.repeat): t for t in transcripts}
    stamp_rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in stamp_lines(stamp))
    ordered = sorted(results, key=lambda r: (SEVERITY[r.outcome], r.profile, r.case_id, r.mode, r.repeat))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Conformance run</title>"
        f"<style>{STYLE}</style></head><body><h1>Conformance run</h1><table>{stamp_rows}</table>"
        f"<p><b>{escape(summary.line())}</b></p>{_outcomes_table(results)}{_findings_section(results)}"
        "<h2>Cases</h2><p class='note'>Worst first; click a case for its checks, request, stream and response.</p>"
    ]
    for r in ordered:
        _case_details(r, by_key.get((r.case_id, r.mode, r.profile, r.repeat)), parts)
    parts.append(f"<script>{LAYOUT}</script></body></html>\n")
    return "".join(parts)
