"""The contract matrix (`conformance contract RUN_DIR...`) over recorded runs: three runs made against
loopback fake servers through the real engine and writers (fast tier), each server answering the same
case ids differently (whole vs fragmented tool call, a refusal, a preflight allowed or not), and the
HTML page in a real headless Chromium; plus the matrix of real legacy and hf runs (vllm tier)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.compare.contract_matrix import build_matrix
from conformance.record.run_dir import read_run_dir
from conformance.report.contract_matrix import html as matrix_html
from conformance.report.contract_matrix import markdown as matrix_markdown
from conformance.suite.cases import load_suite
from tests.chromium_cdp import CHROMIUM, Chromium, keep_artifact
from tests.engine_helpers import load_cases, modes_not_sent
from tests.fake_server import ALLOWED_ORIGIN, fake_server

# (profile, scenario of `weather`, origin of the preflight): what each fake server is made to do.
SERVERS = (("legacy", "ok-incremental", "http://other.example"), ("hf", "ok", "http://other.example"),
           ("other", "refuse", ALLOWED_ORIGIN))
CALL = """{message: {reasoning: "\\nplan\\n", tool_calls: [{name: get_weather, arguments: {city: Paris}}]}, finish_reason: tool_calls}"""
CASES = """
- id: weather
  description: One tool call, streamed whole or in fragments, or refused, depending on the server.
  features: [tool_call]
  request: {{messages: [{{role: user, content: {scenario}}}], tools: [get_weather]}}
  force: "x"
  expect:
    legacy: {call}
    hf: {call}
    other: {{error: {{status: 400, param: tool_choice}}}}
- id: sunny
  description: Plain content, the same on every server.
  features: [content]
  request: {{messages: [{{role: user, content: plain}}]}}
  force: "x"
  expect:
    legacy: &sunny {{message: {{content: It is sunny.}}, finish_reason: stop}}
    hf: *sunny
- id: preflight
  description: A browser preflight, allowed by one server only.
  features: [cors]
  endpoint: preflight
  request: {{path: /chat/completions, origin: "{origin}", method: POST, headers: [content-type]}}
  expect:
    hf: {{preflight: {{status: 400}}}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """One recorded run per fake server, each of its own case variant (same ids, other answers)."""
    root = tmp_path_factory.mktemp("matrix")
    features = (Path(__file__).parents[1] / "cases" / "features.txt").read_text()
    found = []
    for profile, scenario, origin in SERVERS:
        cases = root / f"cases-{profile}"
        load_cases(cases, CASES.format(scenario=scenario, origin=origin, call=CALL))
        (cases / "features.txt").write_text(features)
        with fake_server() as server:
            main(["run", "--base-url", server.base_url, "--model", "fake", "--profile", profile, "--cases", str(cases),
                  "--forcing", "trust", "--out", str(root / profile)])
        found.append(root / profile)
    return found


def _rows(matrix: dict) -> dict[tuple[str, str], dict]:
    return {(row["case_id"], row["mode"]): row for row in matrix["rows"]}


def test_the_matrix_has_a_row_per_behaviour_a_column_per_server_and_marks_what_differs(runs):
    matrix = build_matrix([read_run_dir(run) for run in runs])
    assert [c["label"] for c in matrix["columns"]] == ["legacy", "hf", "other"]
    rows = _rows(matrix)
    assert set(rows) == {("weather", "non-stream"), ("weather", "stream"), ("sunny", "non-stream"),
                         ("sunny", "stream"), ("preflight", "non-stream")}
    for mode in ("non-stream", "stream"):
        assert rows[("sunny", mode)]["differs"] is False  # the same answer everywhere
        assert all(cell["outcome"] == ("skip" if i == 2 else "pass") for i, cell in enumerate(rows[("sunny", mode)]["cells"]))
    stream = rows[("weather", "stream")]
    legacy, hf, other = stream["cells"]
    assert stream["differs"] and stream["reference_column"] == 0 and legacy["differences"] == []
    assert {(d["kind"], d["field"]) for d in hf["differences"]} >= {("stream_shape", "tool_call_streaming"),
                                                                     ("stream_shape", "tool_call_deltas")}
    assert "tool calls streamed whole (1 deltas)" in hf["answer"] and "incremental" in legacy["answer"]
    assert [(d["kind"], d["reference"], d["value"]["param"]) for d in other["differences"]] == [
        ("request_refused", {"status": 200}, "tool_choice")]
    assert other["answer"].startswith("HTTP 400 param tool_choice")
    # Non-streaming, hf and legacy agree; only the refusal differs.
    plain = rows[("weather", "non-stream")]["cells"]
    assert plain[1]["differences"] == [] and plain[2]["differences"][0]["kind"] == "request_refused"
    preflight = rows[("preflight", "non-stream")]["cells"]
    assert [cell["answer"].split(",")[0] for cell in preflight] == ["HTTP 400", "HTTP 400", "HTTP 200"]
    assert preflight[2]["differences"][0] == {"kind": "request_accepted", "field": "preflight.status",
                                              "reference": 400, "value": 200}
    assert preflight[0]["outcome"] == "skip" and preflight[1]["outcome"] == "pass"  # no legacy expectation


def test_the_markdown_groups_by_feature_and_names_each_difference(runs):
    text = matrix_markdown.render(build_matrix([read_run_dir(run) for run in runs]))
    assert text.startswith("# Contract matrix: `legacy`, `hf`, `other`")
    assert "5 behaviours (case x mode) recorded from 3 servers; 3 differ." in text
    assert [line for line in text.splitlines() if line.startswith("## ")] == ["## Servers", "## content", "## cors",
                                                                               "## tool\\_call"]
    row = next(line for line in text.splitlines() if line.startswith("| `weather` | stream |"))
    cells = row.split(" | ")[2:]
    assert not cells[0].startswith("**≠**") and "the reference of this row" in cells[0]
    assert cells[1].startswith("**≠** `") and "≠ stream shape differs `tool_call_streaming`" in cells[1]
    assert cells[2].startswith("**≠** `HTTP 400 param tool_choice")
    assert "| results | `4 pass, 1 skip` | `5 pass` |" in text


def test_contract_command_writes_both_views_and_a_gate_dir_stands_for_its_two_sides(runs, tmp_path, capsys):
    assert main(["contract", *map(str, runs), "--out", str(tmp_path / "m")]) == 0
    assert "5 behaviours of 3 servers (legacy, hf, other); 3 differ" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "m").iterdir()} == {"contract.json", "contract.md", "contract.html"}
    gate = tmp_path / "gate"
    for side, run in (("baseline", runs[0]), ("candidate", runs[1])):
        shutil.copytree(run, gate / side)
    assert main(["contract", str(gate), "--out", str(tmp_path / "g")]) == 0
    assert "(legacy, hf); 1 differ" in capsys.readouterr().out
    assert main(["contract", str(tmp_path / "nothing-here")]) == 2
    assert "transcripts.jsonl" in capsys.readouterr().err


def test_two_runs_of_one_profile_get_columns_named_after_their_directories(runs):
    twice = [read_run_dir(runs[1]), read_run_dir(runs[1])]
    twice[1].run_dir = "/x/hf-again"
    matrix = build_matrix(twice)
    assert [c["label"] for c in matrix["columns"]] == [f"hf ({runs[1].name})", "hf (hf-again)"]
    assert not any(row["differs"] for row in matrix["rows"])


def test_runs_of_several_formats_make_a_format_by_server_matrix(runs):
    default, other = read_run_dir(runs[1]), read_run_dir(runs[1])
    other.stamp = {**other.stamp, "response_format": "gemma4"}
    assert [c["label"] for c in build_matrix([default, other])["columns"]] == ["hf (qwen3-hermes)", "hf (gemma4)"]
    assert [c["label"] for c in build_matrix([default, read_run_dir(runs[0])])["columns"]] == ["hf", "legacy"]


def test_the_html_page_highlights_the_differing_cells_in_headless_chromium(runs, tmp_path):
    if not CHROMIUM:
        pytest.skip("chromium is not installed (scripts/bootstrap installs Debian's chromium where apt-get works)")
    matrix = build_matrix([read_run_dir(run) for run in runs])
    page = tmp_path / "contract.html"
    page.write_text(matrix_html.render(matrix), encoding="utf-8")
    differing = {(row["case_id"], row["mode"], i) for row in matrix["rows"] for i, cell in enumerate(row["cells"])
                 if cell["differences"]}
    browser = Chromium(tmp_path / "chromium-profile")
    try:
        browser.open(page.as_uri())
        assert browser.evaluate("document.body.dataset.ready") == "yes"
        cells = browser.evaluate(
            "Array.from(document.querySelectorAll('td.differs')).filter(function (td) {"
            " var r = td.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&"
            " getComputedStyle(td).backgroundColor !== getComputedStyle(td.parentElement).backgroundColor; })"
            ".map(function (td) { var tr = td.parentElement; return [tr.id, Array.prototype.indexOf.call(tr.children, td) - 2]; })")
        assert sorted(map(tuple, cells)) == sorted((f"row-{case}-{mode}", i) for case, mode, i in differing)
        keep_artifact(browser.screenshot(tmp_path / "contract-matrix.png", full_page=True))
        # The filter keeps the behaviours that differ; a row's fragment undoes it to show that row.
        browser.open(page.as_uri() + "?differs=1")
        shown = browser.evaluate("Array.from(document.querySelectorAll('tr.row')).filter(function (r) {"
                                 " return getComputedStyle(r).display !== 'none'; }).map(function (r) { return r.id; })")
        assert sorted(shown) == sorted(f"row-{r['case_id']}-{r['mode']}" for r in matrix["rows"] if r["differs"])
        assert browser.evaluate("document.getElementById('shown').textContent") == f"{len(shown)} of 5 behaviours shown"
        browser.open(page.as_uri() + "?differs=1#row-sunny-stream")
        assert browser.evaluate("document.getElementById('only-differs').checked") is False
        assert browser.evaluate("getComputedStyle(document.getElementById('row-sunny-stream')).display") != "none"
        # A filter nothing matches says so.
        assert browser.evaluate("document.getElementById('rows-none').hidden") is True
        browser.evaluate("var f = document.getElementById('feature'); f.value = 'content';"  # sunny: the same everywhere
                         " document.getElementById('only-differs').checked = true; f.dispatchEvent(new Event('change'))")
        assert not any(r["differs"] and "content" in r["features"] for r in matrix["rows"])
        assert browser.evaluate(_visible_text("rows-none")) == "No rows match this filter."
    finally:
        browser.close()
    # On a narrow, short window the filter bar wraps; a row opened by its anchor still sits below it.
    narrow = Chromium(tmp_path / "chromium-narrow", width=380, height=260)
    try:
        last = f"row-{matrix['rows'][-1]['case_id']}-{matrix['rows'][-1]['mode']}"
        narrow.open(page.as_uri() + "#" + last)
        top, bar_bottom, scrolled = narrow.evaluate(
            f"[document.getElementById('{last}').getBoundingClientRect().top,"
            " document.getElementById('filters').getBoundingClientRect().bottom, window.scrollY]")
        assert scrolled > 0 and top >= bar_bottom - 1, (top, bar_bottom)
    finally:
        narrow.close()


def _visible_text(element_id: str) -> str:
    return (f"(function () {{ var e = document.getElementById('{element_id}'); var r = e.getBoundingClientRect();"
            " return r.height > 0 && getComputedStyle(e).display !== 'none' ? e.textContent : null; })()")


def test_the_matrix_of_real_legacy_and_hf_runs_shows_their_known_differences(legacy_server, hf_server, hf_rust_server,
                                                                            transformers_serve_server, tmp_path):
    """vllm tier: the same shipped cases recorded from the four real servers, then put side by side."""
    servers = (legacy_server, hf_server, hf_rust_server, transformers_serve_server)
    for server in servers:
        main(["run", "--base-url", server.base_url, "--model", server.model, "--profile", server.profile.name,
              "--out", str(tmp_path / server.profile.name)])
    four = build_matrix([read_run_dir(tmp_path / server.profile.name) for server in servers])
    assert [column["stamp"]["profile"] for column in four["columns"]] == ["legacy", "hf", "hf-rust", "transformers-serve"]
    preflight = _rows(four)[("cors-preflight-chat-from-browser-origin", "non-stream")]["cells"]
    assert [cell["answer"].split(",")[0] for cell in preflight] == ["HTTP 400", "HTTP 400", "HTTP 200", "HTTP 405"]
    assert [bool(cell["differences"]) for cell in preflight] == [False, False, True, True]
    assert {cell["outcome"] for row in four["rows"] for cell in row["cells"]} <= {"pass", "skip"}  # declared skips
    assert main(["contract", str(tmp_path / "legacy"), str(tmp_path / "hf"), "--out", str(tmp_path / "m")]) == 0
    matrix = build_matrix([read_run_dir(tmp_path / name) for name in ("legacy", "hf")])
    rows = _rows(matrix)
    required = rows[("tool-choice-required", "non-stream")]["cells"][1]
    assert required["answer"].startswith("HTTP 400 param tool_choice")
    assert required["differences"][0]["kind"] == "request_refused"
    shape = {(d["kind"], d["field"]) for d in rows[("reasoning-then-one-call", "stream")]["cells"][1]["differences"]}
    assert ("stream_shape", "tool_call_streaming") in shape
    preflight = rows[("cors-preflight-chat-from-browser-origin", "non-stream")]
    assert not preflight["differs"] and all(c["answer"].startswith("HTTP 400") for c in preflight["cells"])
    not_sent = modes_not_sent("hf", ())  # both runs serve the full variant; turns the format cannot express
    assert not_sent == modes_not_sent("legacy", ())
    assert all(cell["outcome"] == ("skip" if (row["case_id"], row["mode"]) in not_sent else "pass")
               for row in matrix["rows"] for cell in row["cells"])
    references = ", ".join(next(c for c in load_suite(None) if c.id == "reasoning-then-one-call").references)
    text = (tmp_path / "m" / "contract.md").read_text()  # the command read them from the shipped case files
    assert f"| `reasoning-then-one-call`<br>{references} | stream | `" in text
    html = (tmp_path / "m" / "contract.html").read_text()
    assert html.count("<td class='differs'>") == sum(1 for row in matrix["rows"] if row["cells"][1]["differences"])
