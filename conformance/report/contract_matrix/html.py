"""contract.html: the contract matrix as one self-contained page (no network: the gate report's
Content-Security-Policy), one table per feature, one column per server, the cells that differ from
their row's reference highlighted with what differs; `#row-<case>-<mode>` ids, and a filter to the rows
that differ and to one feature (`?differs=1&feature=tool_call` presets it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.compare.contract_matrix import rows_by_feature
from conformance.report.contract_matrix import view
from conformance.report.gate.html import CSP, STYLE, c, h, segments
from conformance.report.gate.view import anchor

MATRIX_STYLE = """
body{max-width:none}
table.matrix{table-layout:fixed}
table.matrix td.differs{background:#fff1c2;border-left:4px solid #d4a72c}
table.matrix td.unobserved{color:#57606a;background:#f6f8fa}
table.matrix td.reference{background:#eef6ff}
table.matrix .note{display:block;font-size:.85em}
tr.row[data-differs=yes] td:first-child{border-left:4px solid #d4a72c}
"""

SCRIPT = """
(function () {
  var differs = document.getElementById('only-differs'), feature = document.getElementById('feature');
  function apply() {
    var shown = 0, total = 0;
    document.querySelectorAll('tr.row').forEach(function (row) {
      var ok = (!differs.checked || row.getAttribute('data-differs') === 'yes') &&
               (feature.value === 'all' || JSON.parse(row.getAttribute('data-features')).indexOf(feature.value) >= 0);
      row.classList.toggle('filtered', !ok);
      total += 1; shown += ok ? 1 : 0;
    });
    document.querySelectorAll('section.feature').forEach(function (s) {
      s.classList.toggle('filtered', !s.querySelector('tr.row:not(.filtered)'));
    });
    document.getElementById('rows-none').hidden = shown > 0;
    document.getElementById('shown').textContent = shown + ' of ' + total + ' behaviours shown';
  }
  function fitBar() {  // anchored rows scroll to just below the sticky filter bar (the gate report's style)
    document.documentElement.style.setProperty('--bar-height', document.getElementById('filters').offsetHeight + 'px');
  }
  function openFragment() {
    var el = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (!el) return;
    if (el.closest('.filtered')) { differs.checked = false; feature.value = 'all'; apply(); }
    document.querySelectorAll('.target').forEach(function (t) { t.classList.remove('target'); });
    el.classList.add('target');
    el.scrollIntoView({block: 'start'});
  }
  var params = new URLSearchParams(location.search);
  differs.checked = params.get('differs') === '1';
  if (Array.prototype.some.call(feature.options, function (o) { return o.value === params.get('feature'); })) feature.value = params.get('feature');
  differs.addEventListener('change', apply);
  feature.addEventListener('change', apply);
  window.addEventListener('hashchange', openFragment);
  window.addEventListener('resize', fitBar);
  apply();
  fitBar();
  openFragment();
  document.body.setAttribute('data-ready', 'yes');
})();
"""


def _cell(row: Mapping[str, Any], index: int, labels: list[str]) -> str:
    state = view.cell_state(row, index)
    notes = "".join(f"<span class='note'>{segments(note)}</span>" for note in view.cell_notes(row, index, labels))
    return f"<td class='{state}'>{c(view.answer(row['cells'][index]))}{notes}</td>"


def _table(rows: list[Mapping[str, Any]], labels: list[str], used: set[str]) -> str:
    width = 76 / max(1, len(labels))
    head = ("<tr><th style='width:16%'>case</th><th style='width:8%'>mode</th>"
            + "".join(f"<th style='width:{width:.1f}%'>{c(label)}</th>" for label in labels) + "</tr>")
    body = []
    for row in rows:
        row_id = anchor("row", row["case_id"], row["mode"])
        while row_id in used:
            row_id += "_"
        used.add(row_id)
        references = ", ".join(str(r) for r in row.get("references") or [])
        title = h(view.plain(row.get("description") or "", 400) + (f" ({references})" if references else ""))
        features = h(view.json_text([str(f) for f in row.get("features") or []]))
        body.append(f"<tr id='{row_id}' class='row' data-differs='{'yes' if row.get('differs') else 'no'}' "
                    f"data-features='{features}'><td class='id' title='{title}'>{c(row['case_id'])}</td>"
                    f"<td>{h(row['mode'])}</td>{''.join(_cell(row, i, labels) for i in range(len(labels)))}</tr>")
    return f"<table class='matrix'><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"


def render(matrix: Mapping[str, Any]) -> str:
    labels = view.labels(matrix)
    rows = matrix.get("rows") or []
    features = sorted({str(f) for row in rows for f in row.get("features") or []})
    servers = ("<table><thead><tr><th></th>" + "".join(f"<th>{c(label)}</th>" for label in labels) + "</tr></thead><tbody>"
               + "".join(f"<tr><td>{h(r[0])}</td>" + "".join(f"<td>{c(v)}</td>" for v in r[1:]) + "</tr>"
                         for r in view.stamp_rows(matrix)) + "</tbody></table>")
    used: set[str] = set()
    sections = "".join(f"<section class='feature' data-feature='{h(feature)}'><h3>{h(feature)}</h3>"
                       f"{_table(list(feature_rows), labels, used)}</section>"
                       for feature, feature_rows in rows_by_feature(matrix).items())
    options = "".join(f"<option value='{h(f)}'>{h(f)}</option>" for f in ["all", *features])
    title = f"Contract matrix: {', '.join(labels)}"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{h(title)}</title><style>{STYLE}{MATRIX_STYLE}</style></head><body>"
        f"<h1>{h(title)}</h1>"
        f"<p>{len(rows)} behaviours (case x mode) recorded from {len(labels)} servers; "
        f"<b id='differing'>{view.differing_rows(matrix)}</b> differ. Each cell says what that server did (refusal, "
        "parsed message, stream shape, finish_reason, CORS preflight answer). Highlighted cells differ from the "
        "row's reference (the first server that answered, tinted blue) in what a client sees, and say how; grey "
        "cells have no answer to compare. Outcomes (pass, fail, skip) follow each profile's expectations and are "
        "noted apart. Hover a case for its description.</p>"
        f"<h2 id='servers'>Servers</h2>{servers}"
        f"<div id='filters'><label><input type='checkbox' id='only-differs'> only behaviours that differ</label>"
        f"<label>Feature <select id='feature'>{options}</select></label><span id='shown'></span></div>"
        f"<h2 id='behaviours'>Behaviours by feature</h2>"
        f"<p id='rows-none' class='no-match' hidden>No rows match this filter.</p>{sections}"
        f"<hr><p class='note'>Made by hf-parser-conformance {h(view.plain(matrix.get('suite_version') or '?'))} from "
        f"{len(labels)} recorded runs ({h(view.plain(matrix.get('format') or '?'))}), "
        f"{h(view.plain(matrix.get('created_at') or ''))}.</p>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )
