"""report.html of a gate: the Markdown report's content as one self-contained page (the chart embedded
as base64, no network: a Content-Security-Policy forbids any fetch), with a filter by outcome and
feature, and ids on every behaviour row (`#case-<id>`) and difference (`#diff-<case>-<mode>-<kind>`):
opening the page at such a fragment expands that row and scrolls to it. `?outcome=...&feature=...`
presets the filter."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from html import escape
from typing import Any

from conformance.report.gate import actions, view
from conformance.report.gate.view import Code, DifferenceGroup, Segments

STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;padding:0 2em 4em;max-width:1250px;color:#1f2328;line-height:1.45}
h1{margin:.8em 0 .2em}h1.pass{color:#1a7f37}h1.fail{color:#cf222e}h1.error{color:#8250df}
h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;width:100%}
td,th{border:1px solid #d0d7de;padding:.3em .5em;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f6f8fa}
code{font-family:ui-monospace,monospace;font-size:.86em;background:#f6f8fa;padding:0 .2em;border-radius:3px;
     white-space:pre-wrap;overflow-wrap:anywhere}
.note{color:#57606a}
.state-unacknowledged{color:#cf222e;font-weight:600}.state-acknowledged{color:#9a6700}.state-unchanged{color:#57606a}
tr.case[data-state=unacknowledged] td:first-child{border-left:4px solid #cf222e}
tr.case[data-state=acknowledged] td:first-child{border-left:4px solid #d4a72c}
button.toggle{border:1px solid #d0d7de;background:#fff;border-radius:4px;cursor:pointer;font-size:.8em;margin-right:.3em}
tr.detail>td{background:#fbfbfc;padding:.6em 1em}
.diff{border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em;margin:.5em 0;background:#fff}
.diff h4{margin:.2em 0}.diff dl{margin:.3em 0;display:grid;grid-template-columns:max-content 1fr;gap:.2em .8em}
.diff dt{font-weight:600}.diff dd{margin:0}.diff dl.member{border-top:1px dashed #d0d7de;padding-top:.3em}
h1{font-size:1.6em}
.target{outline:3px solid #0969da;outline-offset:2px}
.filtered{display:none!important}
#filters{position:sticky;top:0;background:#fff;border-bottom:1px solid #d0d7de;padding:.5em 0;z-index:1}
#filters label{margin-right:1em}#shown{color:#57606a}
img.chart{max-width:100%;border:1px solid #d0d7de}
td.id code{white-space:normal;overflow-wrap:normal}
table.behaviours,table.todo{table-layout:fixed}
[id]{scroll-margin-top:calc(var(--bar-height,4em) + .5em)}
span.where:not(.filtered)~span.where:not(.filtered)::before{content:", "}
.no-match{color:#57606a;font-style:italic}
.unforced{color:#fff;background:#9a6700;border-radius:6px;padding:0 .3em;font-size:.85em}
.badge{color:#fff;border-radius:6px;padding:0 .3em;margin-right:.2em}
.badge.pass{background:#1a7f37}.badge.fail{background:#cf222e}.badge.error{background:#8250df}
"""

SCRIPT = """
(function () {
  var outcome = document.getElementById('outcome'), feature = document.getElementById('feature');
  function matches(el) {
    var state = el.getAttribute('data-state'), features = JSON.parse(el.getAttribute('data-features'));
    var o = outcome.value, f = feature.value;
    var okOutcome = o === 'all' || o === state || (o === 'changed' && state !== 'unchanged');
    return okOutcome && (f === 'all' || features.indexOf(f) >= 0);
  }
  function apply() {
    var shown = 0, total = 0;
    document.querySelectorAll('[data-state]').forEach(function (el) {
      var ok = matches(el);
      el.classList.toggle('filtered', !ok);
      if (el.classList.contains('case')) {
        total += 1; shown += ok ? 1 : 0;
        var detail = el.nextElementSibling;
        if (detail && detail.classList.contains('detail')) detail.classList.toggle('filtered', !ok);
      }
    });
    document.querySelectorAll('section.feature').forEach(function (s) {
      s.classList.toggle('filtered', !s.querySelector('tr.case:not(.filtered)'));
    });
    // A to-do row is shown with the cases of it that match; a row, or its "more", with none is hidden.
    document.querySelectorAll('table.todo tbody tr, table.todo details.more').forEach(function (el) {
      el.classList.toggle('filtered', !el.querySelector('span.where:not(.filtered)'));
    });
    document.querySelectorAll('section.todo').forEach(function (s) {
      s.classList.toggle('filtered', !s.querySelector('table.todo tbody tr:not(.filtered)'));
    });
    var todoNone = document.getElementById('todo-none');
    if (todoNone) todoNone.hidden = !!document.querySelector('section.todo:not(.filtered)');
    document.getElementById('rows-none').hidden = shown > 0;
    document.getElementById('shown').textContent = shown + ' of ' + total + ' behaviour rows shown';
  }
  function fitBar() {  // anchored rows scroll to just below the sticky filter bar, however high it wraps
    var bar = document.getElementById('filters');
    document.documentElement.style.setProperty('--bar-height', bar.offsetHeight + 'px');
  }
  function expand(row, open) {
    var detail = row.nextElementSibling, button = row.querySelector('button.toggle');
    if (!detail || !detail.classList.contains('detail')) return;
    detail.hidden = !open;
    row.classList.toggle('open', open);
    if (button) { button.setAttribute('aria-expanded', String(open)); button.textContent = open ? '\\u25be hide' : '\\u25b8 show'; }
  }
  function openFragment() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    if (!el) return;
    var row = el.classList.contains('case') ? el : null;
    var detail = el.closest('tr.detail');
    if (!row && detail) row = detail.previousElementSibling;
    if ((row && row.classList.contains('filtered')) || el.closest('.filtered')) {
      outcome.value = 'all'; feature.value = 'all'; apply();
    }
    if (row) expand(row, true);
    document.querySelectorAll('.target').forEach(function (t) { t.classList.remove('target'); });
    el.classList.add('target');
    el.scrollIntoView({block: 'start'});
  }
  document.querySelectorAll('button.toggle').forEach(function (button) {
    button.addEventListener('click', function () {
      var row = button.closest('tr');
      expand(row, row.nextElementSibling.hidden);
    });
  });
  var params = new URLSearchParams(location.search);
  [[outcome, params.get('outcome')], [feature, params.get('feature')]].forEach(function (pair) {
    if (pair[1] && Array.prototype.some.call(pair[0].options, function (o) { return o.value === pair[1]; })) pair[0].value = pair[1];
  });
  outcome.addEventListener('change', apply);
  feature.addEventListener('change', apply);
  window.addEventListener('hashchange', openFragment);
  window.addEventListener('resize', fitBar);
  apply();
  fitBar();
  openFragment();
  document.body.setAttribute('data-ready', 'yes');
})();
"""

# report.html has no GitHub cap, but a browser must still open it: past this many (case, mode, kind)
# rows of one kind a difference is shown by its summary under a case that has a row, and a case none of
# whose differences is shown in full gets no row (it is counted and named; gate.json keeps everything).
MAX_IN_FULL_PER_KIND = 150  # every (case, mode) of a 75-case set: the shipped cases are never cut
BRIEF_SUMMARY_CHARS = 200
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
ROW_MARKS = {"unchanged": "no", "acknowledged": "yes, acknowledged", "unacknowledged": "yes, not acknowledged"}


def h(value: Any) -> str:
    """Text for HTML content or a quoted attribute: control characters shown, markup escaped."""
    return escape(view.printable(str(value)), quote=True)


def c(value: Any) -> str:
    return f"<code>{h(value)}</code>" if str(value) else ""


def segments(parts: Segments) -> str:
    return "".join(c(p) if isinstance(p, Code) else h(p) for p in parts)


def _attrs(state: str, features: Sequence[str]) -> str:
    return f"data-state='{state}' data-features='{h(json.dumps([str(f) for f in features]))}'"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    head = "".join(f"<th>{cell}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table class='{css}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _side_header(labels: Mapping[str, str], side: str) -> str:
    return f"{c(labels[side])} ({side})"


def _head(gate: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    _, outcome, line = view.verdict(gate)
    exit_code = (gate.get("verdict") or {}).get("exit_code")
    stamp = _table(["", _side_header(labels, "baseline"), _side_header(labels, "candidate")],
                   [[h(label), c(b), c(cand)] for label, b, cand in view.stamp_rows(gate)])
    refused = view.refusal(gate)
    if refused is not None:  # the server's own line first
        return (f"<h1 id='verdict' class='fail'><span class='badge fail'>{h(outcome)}</span> the candidate "
                f"{c(labels['candidate'])} refuses to start this checkpoint</h1>"
                f"<p><b>{h(refused.server)} said</b>: {c(refused.message)}</p>"
                f"<p>{segments(refused.meaning)} Gate exit code {c(exit_code)}.</p>"
                f"<h2 id='servers'>Servers compared</h2>{stamp}")
    return (
        f"<h1 id='verdict' class='{h(outcome.lower())}'><span class='badge {h(outcome.lower())}'>{h(outcome)}</span> "
        f"{h(line)}</h1>"
        f"<p><b>Switch gate</b>: {c(labels['baseline'])} (baseline, what clients get today) → "
        f"{c(labels['candidate'])} (candidate, what they get after the switch); gate exit code {c(exit_code)}. "
        f"{segments(view.expectations_sentence(gate))}</p>"
        "<p>For each case the suite sent the same request to both servers, streaming and not, and compared what a "
        "client receives. Every difference below says what a client must do about it. Unacknowledged differences "
        "fail the gate until they are fixed or acknowledged in the expectations file. Click a changed row for the "
        "request and both answers; the full record is <code>gate.json</code>.</p>"
        f"<h2 id='servers'>Servers compared</h2>{stamp}"
    )


def _filters(gate: Mapping[str, Any]) -> str:
    outcomes = "".join(f"<option value='{o}'>{o}</option>"
                       for o in ("all", "changed", "unchanged", "unacknowledged", "acknowledged"))
    features = "".join(f"<option value='{h(f)}'>{h(f)}</option>" for f in ["all", *view.all_features(gate)])
    return (f"<div id='filters'><label>Outcome <select id='outcome'>{outcomes}</select></label>"
            f"<label>Feature <select id='feature'>{features}</select></label><span id='shown'></span></div>")


def _to_do(groups: Sequence[DifferenceGroup], labels: Mapping[str, str], left_out: Collection[str]) -> str:
    parts = ["<h2 id='to-do'>What clients must change</h2>"]
    if not groups:
        return parts[0] + "<p>No client-visible difference was found between the two servers.</p>"
    items = actions.to_do(groups, labels)
    for acknowledged, title, note in actions.TO_DO_SECTIONS:
        chosen = [item for item in items if item.acknowledged == acknowledged]
        if not chosen:
            continue
        state = "acknowledged" if acknowledged else "unacknowledged"
        rows = "".join(
            f"<tr><td>{h(item.title)}</td><td>{_where(item, state, left_out)}</td>"
            f"<td>{_example(item, labels)}</td><td>{segments(item.action)}</td></tr>"
            for item in chosen
        )
        parts.append(
            "<section class='todo'>"
            f"<h3 class='state-{state}'>{h(actions.to_do_heading(title, chosen))}</h3><p class='note'>{note}</p>"
            "<table class='todo'><thead><tr><th style='width:12%'>difference</th><th style='width:26%'>where</th>"
            f"<th style='width:24%'>what changed</th><th>client action</th></tr></thead><tbody>{rows}</tbody></table>"
            "</section>"
        )
    parts.append("<p id='todo-none' class='no-match' hidden>No rows match this filter.</p>")
    return "".join(parts)


def _where(item: actions.ToDo, state: str, left_out: Collection[str]) -> str:
    """The cases of a to-do item, each with its features, so that the page's filter shows only those that match."""
    features: dict[str, dict[str, None]] = {}
    for row in item.rows:
        features.setdefault(row.case_id, {}).update(dict.fromkeys(row.features))

    def link(case_id: str, modes: str, anchor: str) -> str:
        target = c(case_id) if case_id in left_out else f"<a href='#{anchor}'>{c(case_id)}</a>"  # no row to link to
        return f"<span class='where' {_attrs(state, list(features[case_id]))}>{target} ({h(modes)})</span>"

    cases = item.where()
    links = "".join(link(*case) for case in cases[: actions.MAX_ROWS_LISTED])
    hidden = cases[actions.MAX_ROWS_LISTED:]
    if hidden:
        rest = "".join(link(*case) for case in hidden)
        links += f" <details class='more'><summary>and {len(hidden)} more</summary>{rest}</details>"
    return links


def _example(item: actions.ToDo, labels: Mapping[str, str]) -> str:
    group, member = item.entries[0]
    example = h(view.plain(member.get("summary") or group.title, 300))
    unforced = view.unforced_sides(member)
    if unforced:
        example += f" (<span class='unforced'>unforced</span> answer under {', '.join(c(labels[s]) for s in unforced)})"
    return f"e.g. {c(group.case_id)}: {example}" if len(item.rows) > 1 else example


def _difference(group: DifferenceGroup, labels: Mapping[str, str], in_full: bool = True) -> str:
    state = "acknowledged" if group.acknowledged else "unacknowledged"
    if not in_full:
        ids = ", ".join(c(m["id"]) for m in group.members if m.get("id"))
        return (f"<div class='diff brief' id='{group.anchor}'><h4>{c(group.mode)} · {h(group.title)} "
                f"<span class='state-{state}'>({'acknowledged' if group.acknowledged else 'not acknowledged'})</span></h4>"
                f"<p>{h(view.shorten(group.summary, BRIEF_SUMMARY_CHARS))}</p>"
                + (f"<p class='note'>In full in <code>gate.json</code>: {ids}</p>" if ids else "") + "</div>")
    shared = []
    for found in view.group_excerpts(group):
        if found["request"] is not None:
            shared.append(("Request", c(found["request"])))
        for side in view.SIDES:
            if found[side] is not None:
                reason = view.unforced_reason(group.members[0], side)
                mark = (f" <span class='unforced' title='{h(view.UNFORCED_MEANING)}'>unforced</span>"
                        if reason else "")
                note = f"<br><span class='note'>{h(reason)}</span>" if reason else ""
                shared.append((f"{c(labels[side])} answered{mark}", c(found[side]) + note))
    items = [_definitions(shared)] if shared else []
    for member in group.members:
        base, cand = view.difference_values(member)
        field, summary = view.what_differs(member)
        rows = [("What differs", (c(field) + ": " if field else "") + h(summary)),
                (f"{c(labels['baseline'])} value", c(base)), (f"{c(labels['candidate'])} value", c(cand)),
                ("Client action", segments(actions.client_action(member, labels)))]
        ack = view.acknowledgement(member)
        if ack:
            where = ", ".join(f"{key} {c(value)}" for key, value in ack.items() if key != "reason")
            rows.append(("Acknowledged", h(ack.get("reason", "")) + (f" ({where})" if where else "")))
        items.append(_definitions(rows, "member"))
    return (f"<div class='diff' id='{group.anchor}'><h4>{c(group.mode)} · {h(group.title)} "
            f"<span class='state-{state}'>({'acknowledged' if group.acknowledged else 'not acknowledged'})</span> "
            f"<a href='#{group.anchor}' class='note'>link</a></h4>{''.join(items)}</div>")


def _definitions(rows: Sequence[tuple[str, str]], css: str = "") -> str:
    return f"<dl class='{css}'>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _behaviours(gate: Mapping[str, Any], groups: Sequence[DifferenceGroup], labels: Mapping[str, str],
                full: Collection[str], left_out: Collection[str]) -> str:
    parts = ["<h2 id='behaviours'>Behaviours by feature</h2><p class='note'>One row per case (both modes folded), "
             "under its first feature; <b>show</b> opens a changed row's requests, answers and client actions. "
             f"An answer marked <span class='unforced'>unforced</span> is {h(view.UNFORCED_MEANING)}.</p>"]
    parts.append("<p id='rows-none' class='no-match' hidden>No rows match this filter.</p>")
    if len(full) < len(groups):
        parts.append(_size_cap(groups, full, left_out))
    used_ids: set[str] = set()
    by_case = view.groups_by_case(groups)
    for feature, rows in view.behaviours_by_feature(gate).items():
        body = []
        for behaviour in rows:
            case_id = str(behaviour.get("case_id"))
            if case_id in left_out:
                continue
            row_id = view.anchor("case", case_id)
            while row_id in used_ids:
                row_id += "_"
            used_ids.add(row_id)
            case_groups = by_case.get(case_id, [])
            state = view.row_state(behaviour, case_groups)
            toggle = "<button class='toggle' aria-expanded='false'>▸ show</button>" if case_groups else ""
            body.append(
                f"<tr id='{row_id}' class='case' {_attrs(state, behaviour.get('features') or [])}>"
                f"<td class='id'>{toggle}{c(case_id)}</td>"
                + "".join(f"<td>{_answer_cell(behaviour, side)}</td>" for side in view.SIDES) +
                f"<td class='state-{state}'>{ROW_MARKS[state]}</td></tr>"
            )
            if case_groups:
                description = h(view.plain(behaviour.get("description") or "", 400))
                body.append(f"<tr class='detail' hidden><td colspan='4'><p>{description}</p>"
                            f"{''.join(_difference(g, labels, g.anchor in full) for g in case_groups)}</td></tr>")
        header = ("<tr><th style='width:24%'>case</th>"
                  f"<th style='width:32%'>{_side_header(labels, 'baseline')}</th>"
                  f"<th style='width:32%'>{_side_header(labels, 'candidate')}</th>"
                  "<th style='width:12%'>changed?</th></tr>")
        if not body:
            continue
        parts.append(f"<section class='feature' data-feature='{h(feature)}'><h3>{h(feature)}</h3>"
                     f"<table class='behaviours'><thead>{header}</thead><tbody>{''.join(body)}</tbody></table></section>")
    known = {str(b.get("case_id")) for b in gate.get("behaviours") or []}
    orphans = [g for g in groups if g.case_id not in known and g.case_id not in left_out]
    if orphans:
        parts.append("<h3>Differences of cases without a behaviour row</h3>"
                     + "".join(f"<p>{c(g.case_id)}</p>{_difference(g, labels, g.anchor in full)}" for g in orphans))
    return "".join(parts)


def _answer_cell(behaviour: Mapping[str, Any], side: view.Side) -> str:
    modes = view.unforced_modes(behaviour, side)
    answer = c(view.plain(behaviour.get(side) or ""))
    if not modes:
        return answer
    return f"<span class='unforced' title='{h(view.UNFORCED_MEANING)}'>unforced ({h(modes)})</span> {answer}"


def _size_cap(groups: Sequence[DifferenceGroup], full: Collection[str], left_out: Collection[str]) -> str:
    """What the page leaves out past MAX_IN_FULL_PER_KIND rows of a kind, counted, pointing to gate.json."""
    brief = Counter(g.kind for g in groups if g.anchor not in full)
    counts = ", ".join(f"{n} × {view.KIND_TITLES.get(kind, kind)}" for kind, n in sorted(brief.items()))
    cases = ", ".join(c(case_id) for case_id in left_out)
    return (f"<div id='size-cap' class='note'><p>To keep this page light, only the first {MAX_IN_FULL_PER_KIND} "
            "differences of each kind (unacknowledged first) are shown in full; the other "
            f"{sum(brief.values())} (case, mode, kind) rows ({h(counts)}) are shown by their summary under their "
            "case, or, for the cases below, only counted here. Every value and excerpt is in "
            "<code>gate.json</code> (<code>differences</code>), and <code>report.md</code> has the to-do list.</p>"
            + (f"<details><summary>{len(left_out)} cases without a row on this page</summary>{cases}</details>"
               if left_out else "") + "</div>")


def _stale(gate: Mapping[str, Any]) -> str:
    stale = gate.get("stale") or []
    if not stale:
        return ""
    rows = [[c(view.json_text(s.get("selector"), 200)), c(s.get("kind")), h(view.plain(s.get("reason") or "", 300)),
             c(view.plain(s.get("source") or ""))] for s in stale]
    return (f"<h2 id='stale'>Stale expectations ({len(stale)})</h2><p>Acknowledged differences that no longer occur: "
            f"the expectations file can drop them.</p>{_table(['selector', 'kind', 'reason', 'source'], rows)}")


def _timing(gate: Mapping[str, Any], labels: Mapping[str, str], chart_png: bytes | None) -> str:
    sides = ["", _side_header(labels, "baseline"), _side_header(labels, "candidate")]
    parts = [f"<h2 id='timing'>Timing (streaming)</h2><p id='timing-structure'>{segments(view.structure_sentence(gate))}</p>"]
    structure = view.tool_name_line_rows(gate)
    if structure:
        parts.append("<p class='note'>Data lines, median / p90 / max over those streams.</p>")
        parts.append(_table(sides, [[h(m), h(b), h(cand)] for m, b, cand in structure]))
    parts.append(f"<p id='timing-caveat'>{segments(view.timing_caveat(gate))}</p>"
                 f"<p>{segments(view.timing_sentence(gate))}</p>")
    rows = view.timing_rows(gate)
    if rows:
        parts.append("<p class='note'>Seconds since the request started, median / p90 / max over the streamed case runs.</p>")
        parts.append(_table(["moment", *sides[1:]], [[h(m), h(b), h(cand)] for m, b, cand in rows]))
    if chart_png:
        data = base64.b64encode(chart_png).decode("ascii")
        parts.append(f"<img id='timing-chart' class='chart' alt='Timing of both servers per streaming moment, and the "
                     f"delay of the first tool name' src='data:image/png;base64,{data}'>")
    return "".join(parts)


def _cors(gate: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    parts = ["<h2 id='cors'>Browser clients (CORS)</h2>"]
    cors = gate.get("cors")
    if cors:
        parts.append(f"<p>A browser sends a preflight {c('OPTIONS ' + view.plain(cors.get('path') or ''))} with "
                     f"{c('Origin: ' + view.plain(cors.get('origin') or ''))} before a cross-origin call. Answers:</p>")
        parts.append(_table(["", _side_header(labels, "baseline"), _side_header(labels, "candidate")],
                            [[h(what), c(b), c(cand)] for what, b, cand in view.cors_rows(cors)]))
    parts.append("<ul>" + "".join(f"<li>{segments(s)}</li>" for s in view.cors_meaning(gate)) + "</ul>")
    return "".join(parts)


def _body(gate: Mapping[str, Any], groups: Sequence[DifferenceGroup], labels: Mapping[str, str], full: set[str],
          left_out: Collection[str], chart_png: bytes | None) -> str:
    """Everything under the servers' stamps: what a gate whose candidate started found."""
    return (f"{_filters(gate)}{_to_do(groups, labels, left_out)}{_behaviours(gate, groups, labels, full, left_out)}"
            f"{_stale(gate)}{_timing(gate, labels, chart_png)}{_cors(gate, labels)}")


def render(gate: Mapping[str, Any], chart_png: bytes | None = None) -> str:
    """The page; `chart_png` (timing.png's bytes) is embedded when given."""
    labels = view.labels(gate)
    groups = view.difference_groups(gate)
    full = view.shown_in_full(groups, MAX_IN_FULL_PER_KIND)
    left_out = dict.fromkeys(case_id for case_id, case_groups in view.groups_by_case(groups).items()
                             if not any(g.anchor in full for g in case_groups))  # ordered, O(1) lookups
    _, outcome, line = view.verdict(gate)
    footer = (f"<hr><p class='note'>Made by hf-parser-conformance {h(view.plain(gate.get('suite_version') or '?'))} from "
              f"<code>gate.json</code> ({h(view.plain(gate.get('format') or '?'))}), {h(view.plain(gate.get('created_at') or ''))}.</p>")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{h(outcome)}: {h(line)} ({h(labels['baseline'])} → {h(labels['candidate'])})</title>"
        f"<style>{STYLE}</style></head><body>"
        f"{_head(gate, labels)}{'' if view.refusal(gate) else _body(gate, groups, labels, full, left_out, chart_png)}{footer}"
        f"<script>{SCRIPT}</script></body></html>\n"
    )
