"""The driver and engine against a loopback server that plays broken streams (fast tier).

Each broken shape must become `error` or `fail` with a clear reason, and the run must go on.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from conformance.cli import main
from conformance.record.recording import read_header, read_transcripts
from conformance.record.results import read_results
from conformance.run.driver import Target, request_body
from conformance.run.engine import recheck, run
from conformance.servers.launch import free_port
from tests.engine_helpers import load_cases
from tests.fake_server import fake_server

SCENARIOS = ("ok", "ok-incremental", "truncated", "garbage", "missing-index", "error-midway", "http-500",
             "stall", "refuse", "no-done")
CASE_TEMPLATE = """
- id: {scenario}
  description: The fake server plays the {scenario} scenario for this request, streaming or not.
  features: [reasoning, tool_call]
  request:
    messages: [{{role: user, content: {scenario}}}]
    tools: [get_weather]
  force: "forced <think> text"
  expect:
    hf:
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
      finish_reason: tool_calls
      tool_call_streaming: whole
"""
# (scenario, mode) -> (outcome, substring of the reason); everything else passes.
EXPECTED = {
    ("ok-incremental", "stream"): ("fail", "tool calls streamed incremental, expected whole"),
    ("truncated", "stream"): ("error", "invalid SSE: data line 2 is not JSON"),
    ("garbage", "stream"): ("error", "invalid SSE: data line 2 is not JSON"),
    ("garbage", "non-stream"): ("error", "the response is not a JSON object"),
    ("missing-index", "stream"): ("fail", "tool-call delta without an integer `index`"),
    ("error-midway", "stream"): ("error", "error inside the stream: engine died"),
    ("http-500", "stream"): ("error", "HTTP 500: boom"),
    ("http-500", "non-stream"): ("error", "HTTP 500: boom"),
    ("stall", "stream"): ("error", "timeout: no complete response within 1.5s"),
    ("refuse", "stream"): ("fail", "refused with HTTP 400: response_template parsing cannot guarantee"),
    ("refuse", "non-stream"): ("fail", "refused with HTTP 400: response_template parsing cannot guarantee"),
    ("no-done", "stream"): ("fail", "no data: [DONE]"),
}


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cases")
    load_cases(directory, "".join(CASE_TEMPLATE.format(scenario=s) for s in SCENARIOS))
    return directory


@pytest.fixture(scope="module")
def cases(cases_dir):
    from conformance.suite.cases import load_suite

    return load_suite(cases_dir)


@pytest.fixture(scope="module")
def fake_run(cases, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    with fake_server(stall_seconds=4) as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", timeout=1.5, can_force=True)
        started = time.monotonic()
        output = run(cases, target, out, concurrency=8)
        elapsed = time.monotonic() - started
    return output, out, server.requests, elapsed


def test_each_broken_stream_becomes_error_or_fail_with_a_clear_reason(fake_run):
    output, _, _, _ = fake_run
    got = {(r.case_id, r.mode): r for r in output.results}
    assert len(got) == 2 * len(SCENARIOS)  # the run went on past every broken answer
    for key, result in sorted(got.items()):
        outcome, reason = EXPECTED.get(key, ("pass", ""))
        assert result.outcome == outcome, (key, result.reason)
        assert reason in result.reason, (key, result.reason)
    assert output.summary.counts == {"pass": 8, "fail": 5, "skip": 0, "error": 7}
    assert output.summary.exit_outcome == "error"


def test_a_stall_does_not_hold_up_the_other_requests(fake_run):
    *_, elapsed = fake_run
    assert elapsed < 4  # the stalled stream was cut at the 1.5 s timeout, the rest ran alongside


def test_transcripts_and_results_are_written_and_record_the_exact_request(fake_run, cases):
    output, out, requests, _ = fake_run
    transcripts = read_transcripts(out / "transcripts.jsonl")
    assert len(transcripts) == len(read_results(out / "results.jsonl")) == 2 * len(SCENARIOS)
    ok_stream = next(t for t in transcripts if t.case_id == "ok" and t.mode == "stream")
    received = next(r for r in requests if r["messages"][0]["content"] == "ok" and r["stream"])
    assert ok_stream.request == received  # what we recorded is what the server got
    assert received["structured_outputs"] == {"regex": "forced <think> text"}
    assert ok_stream.sse[-1].data == "[DONE]"
    assert [line.t for line in ok_stream.sse] == sorted(line.t for line in ok_stream.sse)
    assert ok_stream.server.version == "fake-1.0"  # fetched from GET /version
    stalled = next(t for t in transcripts if t.case_id == "stall" and t.mode == "stream")
    assert len(stalled.sse) == 1  # the role chunk arrived before the stall and is kept


def test_recheck_rejudges_the_recording_identically(fake_run, cases):
    output, out, _, _ = fake_run
    again = recheck(read_transcripts(out / "transcripts.jsonl"), cases)
    key = lambda r: (r.case_id, r.mode)  # noqa: E731
    assert sorted((key(r), r.outcome, r.reason) for r in again) == sorted(
        (key(r), r.outcome, r.reason) for r in output.results
    )


def test_recheck_refuses_to_judge_a_recording_of_a_changed_case(fake_run, cases):
    _, out, _, _ = fake_run
    changed = [replace(case, force="something else") if case.id == "ok" else case for case in cases]
    changed += [replace(cases[0], id="brand-new")]
    dropped = [case for case in changed if case.id != "refuse"]
    results = {(r.case_id, r.mode): r for r in recheck(read_transcripts(out / "transcripts.jsonl"), dropped)}
    assert len(results) == 2 * len(SCENARIOS)
    assert results[("ok", "stream")].outcome == "error"
    assert results[("ok", "stream")].reason == (
        "case 'ok' changed since it was recorded: the request differs in the forced output"
    )
    assert results[("refuse", "non-stream")].reason == "case 'refuse' is not in the case set"
    assert results[("missing-index", "non-stream")].outcome == "pass"  # unchanged cases are judged as before


def test_connection_refused_is_an_error_for_every_request(cases, tmp_path):
    port = free_port()  # nothing listens there
    target = Target(base_url=f"http://127.0.0.1:{port}/v1", model="fake", profile="hf", timeout=5)
    output = run(cases[:2], target, tmp_path)
    assert {r.outcome for r in output.results} == {"error"}
    assert all("connection failed" in r.reason for r in output.results)


def test_a_server_that_cannot_force_gets_skips_not_requests(cases, tmp_path):
    with fake_server() as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", can_force=False,
                        cannot_force_reason="told so")
        output = run(cases[:1], target, tmp_path)
    assert server.requests == []
    expected = ("skip", f"server {server.base_url} cannot force outputs: told so")
    assert [(r.outcome, r.reason) for r in output.results] == [expected] * 2


def test_one_probe_finds_out_that_a_server_cannot_force_and_forced_cases_are_skipped(cases, tmp_path):
    with fake_server() as server:  # answers, but returns no token ids: forcing cannot be verified
        output = run(cases[:2], Target(base_url=server.base_url, model="fake", profile="hf"), tmp_path)
    assert len(server.requests) == 1 and server.requests[0]["structured_outputs"]["regex"]  # the probe only
    assert {r.outcome for r in output.results} == {"skip"}
    assert all("returned no token_ids" in r.reason for r in output.results), output.results[0].reason


def test_responses_requests_send_messages_as_input_and_the_rest_as_given(tmp_path):
    (case,) = load_cases(tmp_path, """
- id: responses-named
  description: A named tool choice sent to the Responses API is refused under hf with HTTP 400.
  features: [responses_api, tool_choice_named]
  endpoint: responses
  request:
    messages: [{role: user, content: hi}]
    tools: [get_weather]
    tool_choice: {type: function, name: get_weather}
    max_output_tokens: 8
  force: "x"
  expect:
    hf:
      error: {status: 400, param: tool_choice}
""").values()
    body = request_body(case, "stream", "m", {"structured_outputs": {"regex": "x"}})
    assert body == {
        "model": "m", "input": [{"role": "user", "content": "hi"}], "stream": True, "max_output_tokens": 8,
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather forecast for a city.",
                   "parameters": case.request["tools"][0]["parameters"]}],
        "tool_choice": {"type": "function", "name": "get_weather"}, "structured_outputs": {"regex": "x"},
    }  # fmt: skip


def test_cli_run_against_a_server_exits_by_the_worst_outcome(cases_dir, tmp_path, capsys):
    with fake_server() as server:
        common = ["run", "--base-url", server.base_url, "--model", "fake", "--profile", "hf", "--cases",
                  str(cases_dir), "--timeout", "5", "--forcing", "trust"]
        assert main([*common, "--case", "ok", "--out", str(tmp_path / "ok")]) == 0
        assert main([*common, "--case", "ok", "--case", "no-done", "--out", str(tmp_path / "fail")]) == 1
        assert main([*common, "--case", "http-500", "--out", str(tmp_path / "error")]) == 2
    out = capsys.readouterr().out
    assert "2 results: 2 pass, 0 fail, 0 skip, 0 error" in out
    for name in ("transcripts.jsonl", "results.jsonl", "report.md", "junit.xml", "report.html", "run.json"):
        assert (tmp_path / "fail" / name).is_file()
    assert json.loads((tmp_path / "fail" / "run.json").read_text())["summary"]["counts"]["fail"] == 1


def test_cli_run_usage_errors(cases_dir, capsys):
    assert main(["run", "--base-url", "http://127.0.0.1:9/v1", "--cases", str(cases_dir)]) == 2
    assert "--base-url needs --model and --profile" in capsys.readouterr().err
    args = ["run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--profile", "hf"]
    assert main([*args, "--cases", str(cases_dir), "--case", "nope"]) == 2
    assert "unknown case id(s): nope" in capsys.readouterr().err
    assert main([*args, "--cases", str(cases_dir), "--feature", "nope"]) == 2
    assert "unknown feature tag(s): nope" in capsys.readouterr().err
    assert main(["run", "--launch", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err


def test_natural_mode_counts_model_misses_apart_and_reports_pass_at_k(tmp_path):
    cases = list(load_cases(tmp_path, """
- id: asks-weather
  description: Asked for the weather, a capable model calls the weather tool by itself.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "<tool_call>{}</tool_call>"
  natural: {expect_tool: get_weather}
  expect:
    hf: {message: {content: "never compared in natural mode"}, finish_reason: stop}
- id: ignores-tools
  description: A model that answers in prose instead of calling the tool is a model miss, not a failure.
  features: [tool_call]
  request:
    messages: [{role: user, content: plain}]
    tools: [get_weather]
  natural: {expect_tool: get_weather}
  expect:
    hf: {message: {content: "never compared in natural mode"}, finish_reason: stop}
""").values())
    with fake_server() as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", can_force=True)
        output = run(cases, target, tmp_path / "out", natural=True, repeat=2)
    assert all("structured_outputs" not in body for body in server.requests)  # nothing forced
    assert len(server.requests) == 8
    by_case = {(r.case_id, r.outcome, r.model_miss) for r in output.results}
    assert by_case == {("asks-weather", "pass", False), ("ignores-tools", "skip", True)}
    summary = output.summary
    assert (summary.counts["fail"], summary.model_misses) == (0, 4)
    assert summary.pass_at_k == {"k": 2, "cases": 4, "passed": 2}
    assert summary.exit_code == 0


def test_an_unforced_case_is_sent_as_is_and_judged_on_its_expectation(tmp_path):
    cases = list(load_cases(tmp_path, """
- id: unforced
  description: A reply the server decides by itself is judged on the expected message all the same.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok-incremental}]
    tools: [get_weather]
  expect:
    hf:
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
      tool_call_streaming: whole
""").values())
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="hf", can_force=True), tmp_path / "out")
    assert all("structured_outputs" not in body for body in server.requests)
    got = {r.mode: (r.outcome, r.forced, r.natural) for r in output.results}
    assert got == {"non-stream": ("pass", False, False), "stream": ("fail", False, False)}  # whole expected


PREFLIGHT_CASES = """
- id: refused-origin
  description: A preflight from an origin the server does not list is refused without the allow header.
  features: [cors]
  endpoint: preflight
  request: {path: /responses, origin: "http://localhost:3000", method: POST, headers: [authorization, content-type]}
  expect:
    hf: {preflight: {status: 400, body: Disallowed CORS origin, headers: {access-control-allow-origin: null}}}
- id: allowed-origin
  description: A preflight from a listed origin gets 200, which this case wrongly expects to be refused.
  features: [cors]
  endpoint: preflight
  request: {origin: "http://allowed.example", method: POST}
  expect:
    hf: {preflight: {status: 400, headers: {access-control-allow-origin: null, access-control-max-age: "600"}}}
"""


def test_a_preflight_is_sent_as_a_browser_sends_it_and_judged_on_status_headers_and_body(tmp_path):
    cases = list(load_cases(tmp_path, PREFLIGHT_CASES).values())
    with fake_server() as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", api_key="secret")
        output = run(cases, target, tmp_path / "out")
    assert server.requests == []  # no model request, and no forcing probe
    sent = dict(server.preflights)
    assert set(sent) == {"/v1/responses", "/v1/chat/completions"}
    browser = sent["/v1/responses"]
    assert (browser["origin"], browser["access-control-request-method"]) == ("http://localhost:3000", "POST")
    assert browser["access-control-request-headers"] == "authorization, content-type"
    assert "authorization" not in browser  # a browser's preflight carries no credentials
    assert "access-control-request-headers" not in sent["/v1/chat/completions"]
    got = {r.case_id: (r.mode, r.outcome, r.reason) for r in output.results}
    assert got["refused-origin"] == ("non-stream", "pass", "")
    assert got["allowed-origin"] == ("non-stream", "fail",
                                     "expected_preflight: status 200 != 400; header access-control-allow-origin: "
                                     "'http://allowed.example', expected none")
    rechecked = recheck(read_transcripts(tmp_path / "out" / "transcripts.jsonl"), cases)
    assert [r.to_dict() for r in rechecked] == [r.to_dict() for r in output.results]


def test_line_separators_inside_json_strings_do_not_split_an_event(tmp_path):
    """SSE lines end at CRLF, LF or CR only; U+0085, U+2028 and U+2029 in content are characters."""
    from tests.fake_server import SEPARATED

    cases = list(load_cases(tmp_path, f"""
- id: separators
  description: Content holding characters that str.splitlines treats as line breaks arrives whole.
  features: [content]
  request:
    messages: [{{role: user, content: separators}}]
  expect:
    hf:
      message: {{content: {json.dumps(SEPARATED)}}}
      finish_reason: stop
""").values())
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="hf", can_force=True), tmp_path / "o")
    assert {r.mode: (r.outcome, r.reason) for r in output.results} == {"non-stream": ("pass", ""), "stream": ("pass", "")}
    [stream] = [t for t in read_transcripts(tmp_path / "o" / "transcripts.jsonl") if t.mode == "stream"]
    assert [line.data for line in stream.sse][-1] == "[DONE]" and len(stream.sse) == 4


def test_a_probe_answered_with_html_cannot_tell_so_forced_cases_are_errors_not_sent(cases, tmp_path):
    posts = []

    class NotJson(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            posts.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>a proxy page</html>")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), NotJson)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        target = Target(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", model="m", profile="hf", timeout=5)
        output = run(cases[:1], target, tmp_path)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert posts == ["/v1/chat/completions"]  # the probe only: forcing is not assumed
    reason = ("transport: not sent: the forcing probe cannot tell whether the server forces outputs: the answer to "
              "/v1/chat/completions is not JSON: '<html>a proxy page</html>'")
    assert {r.mode: (r.outcome, r.reason) for r in output.results} == {"non-stream": ("error", reason),
                                                                        "stream": ("error", reason)}
    assert output.summary.exit_code == 2


def test_a_full_disk_stops_the_run_at_once_and_keeps_what_was_written(cases, tmp_path):
    (tmp_path / "results.jsonl").symlink_to("/dev/full")  # every flush of a result fails with ENOSPC
    chosen = [case for case in cases if case.id in ("ok", "stall")]
    with fake_server(stall_seconds=4) as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", timeout=10, can_force=True)
        started = time.monotonic()
        with pytest.raises(OSError, match="No space left"):
            run(chosen, target, tmp_path)
        assert time.monotonic() - started < 3  # nothing waited for: the results header already failed
    assert read_header(tmp_path / "transcripts.jsonl", "transcripts")["case_ids"] == ["ok", "stall"]
    assert read_transcripts(tmp_path / "transcripts.jsonl") == []


def test_an_answer_is_recorded_as_soon_as_it_came_back_not_when_its_case_is_done(cases, tmp_path):
    """The non-stream answer of `stall` is on disk while its stream still hangs: a run that is killed
    then keeps it (and `recheck` can read it)."""
    import threading

    chosen = [case for case in cases if case.id == "stall"]
    with fake_server(stall_seconds=4) as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", timeout=6, can_force=True)
        running = threading.Thread(target=run, args=(chosen, target, tmp_path), daemon=True)
        running.start()
        deadline, recorded = time.monotonic() + 3, []
        while running.is_alive() and time.monotonic() < deadline and not recorded:
            time.sleep(0.05)
            if (tmp_path / "transcripts.jsonl").is_file():
                recorded = read_transcripts(tmp_path / "transcripts.jsonl")
        assert running.is_alive(), "the stalled stream ended the run before the check"
        assert [(t.case_id, t.mode, t.status) for t in recorded] == [("stall", "non-stream", 200)]
        running.join(15)


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_still_reports_what_it_had_judged(cases_dir, tmp_path, stop):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    with fake_server(stall_seconds=60) as server:
        process = subprocess.Popen(
            [sys.executable, "-m", "conformance", "run", "--base-url", server.base_url, "--model", "fake",
             "--profile", "hf", "--cases", str(cases_dir), "--forcing", "trust", "--case", "ok",
             "--case", "stall", "--out", str(out), "--timeout", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until `ok` is judged and `stall` hangs
            results = out / "results.jsonl"
            if results.is_file() and len(results.read_text().splitlines()) == 3:  # the header and 2 results
                break
            time.sleep(0.1)
        process.send_signal(getattr(signal, stop))
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == {"SIGINT": 130, "SIGTERM": 143}[stop], stderr
    assert "interrupted after 2 of 4 results" in stderr
    report = (out / "report.md").read_text()
    assert "interrupted after 2 of 4 results" in report and "2 results: 2 pass" in report
    assert (out / "report.html").is_file() and (out / "junit.xml").is_file()


def test_a_long_line_in_many_reads_is_searched_for_line_breaks_once(monkeypatch):
    """Linear in the bytes read: each read is searched once and the line's pieces joined when it ends.
    (Searching the line so far again at every read was quadratic: 28 s for a 32 MB line.)"""
    from conformance.run import driver

    searched: list[int] = []
    breaks = driver._LINE_BREAK

    class CountingBreaks:
        def split(self, data: bytes) -> list[bytes]:
            searched.append(len(data))
            return breaks.split(data)

    monkeypatch.setattr(driver, "_LINE_BREAK", CountingBreaks())
    raw = b"data: " + b"x" * 1_000_000 + b"\n\nshort\n"
    pieces = [raw[i:i + 1000] for i in range(0, len(raw), 1000)]

    async def arrive():
        for piece in pieces:
            yield piece

    async def collect():
        return [line async for line in driver._sse_lines(arrive())]

    assert asyncio.run(collect()) == ["data: " + "x" * 1_000_000, "", "short"]
    assert len(searched) == len(pieces) and sum(searched) == len(raw)  # every byte searched once


@example(lines=["a", "b"], breaks=["\r\n"], cuts=[2])  # the LF of a CRLF in the next read
@example(lines=["a\x85b\u2028c"], breaks=["\n"], cuts=[2])  # inside a character's UTF-8 bytes
@given(lines=st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)))),
       breaks=st.lists(st.sampled_from(["\r\n", "\n", "\r"]), min_size=1), cuts=st.lists(st.integers(0, 400)))
def test_event_stream_lines_end_at_crlf_lf_or_cr_however_the_bytes_arrive(lines, breaks, cuts):
    from conformance.run.driver import _sse_lines

    ends = [breaks[i % len(breaks)] for i in range(len(lines))]
    # a CR, then an empty line ended by LF, is one CRLF to any reader: not two lines to expect
    assume(not any(end == "\r" and lines[i + 1] == "" and ends[i + 1] == "\n" for i, end in enumerate(ends[:-1])))
    raw = "".join(line + end for line, end in zip(lines, ends)).encode()
    edges = sorted({0, len(raw), *(cut for cut in cuts if cut < len(raw))})
    pieces = [raw[a:b] for a, b in zip(edges, edges[1:])]

    async def arrive():
        for piece in pieces:
            yield piece

    async def collect():
        return [line async for line in _sse_lines(arrive())]

    assert asyncio.run(collect()) == lines
