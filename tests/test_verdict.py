"""A run's verdict (fast tier, loopback fake server): an HTTP error about the setup is an `error`
with the server's own words, never a skip; skips have named kinds; a run passes only when
everything selected was judged and passed or skipped for an allowed kind."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conformance.cli import main
from conformance.commands.run import problem_lines
from conformance.record.outcomes import Check
from conformance.record.results import CaseResult, read_results, summarize
from conformance.record.stamp import make_stamp
from conformance.report.run import markdown
from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.servers.profiles import PROFILES
from tests.engine_helpers import STAMP, load_cases
from tests.fake_server import fake_server

GOOD = """
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls"""
GOOD_RESPONSES = GOOD.replace("finish_reason: tool_calls", "finish_reason: completed")
CASES = f"""
- id: forced-ok
  description: A forced output with reasoning and one call, answered exactly as expected.
  features: [tool_call]
  request:
    messages: [{{role: user, content: ok}}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:{GOOD}
- id: unforced-ok
  description: An unforced request the server answers with reasoning and one call, as expected.
  features: [tool_call]
  request:
    messages: [{{role: user, content: ok}}]
    tools: [get_weather]
  expect:
    hf:{GOOD}
- id: expects-refusal
  description: The server must refuse this tool choice with HTTP 400 naming the parameter.
  features: [tool_call]
  request:
    messages: [{{role: user, content: refuse}}]
    tools: [get_weather]
  expect:
    hf:
      error: {{status: 400, param: tool_choice}}
- id: declared-skip
  description: The hf profile knowingly cannot run this case, so it declares a skip for it.
  features: [tool_call]
  request:
    messages: [{{role: user, content: ok}}]
  force: "x"
  expect:
    hf:
      skip: hf cannot run this case on the fake server
    legacy:{GOOD}
- id: legacy-only
  description: Only legacy has an expectation, so under hf the expectation check is skipped.
  features: [tool_call]
  modes: [non-stream]
  request:
    messages: [{{role: user, content: ok}}]
    tools: [get_weather]
  expect:
    legacy:{GOOD}
- id: responses-call
  description: The same call through the Responses API, which the fake server does not have.
  features: [responses_api]
  endpoint: responses
  request:
    messages: [{{role: user, content: ok}}]
    tools: [get_weather]
  expect:
    hf:{GOOD_RESPONSES}
"""


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cases")
    load_cases(directory, CASES)
    return directory


@pytest.fixture(scope="module")
def cases(cases_dir):
    from conformance.suite.cases import load_suite

    return {case.id: case for case in load_suite(cases_dir)}


def cli(server_url: str, cases_dir, out, *extra: str, model: str = "fake", profile: str = "hf") -> int:
    return main(["run", "--base-url", server_url, "--model", model, "--profile", profile, "--cases", str(cases_dir),
                 "--out", str(out), "--timeout", "5", *extra])


# -- HTTP errors about the setup are errors, with the server's own words ---------------------------


def test_a_wrong_api_key_is_an_error_for_every_case_probe_included(cases_dir, tmp_path, capsys):
    with fake_server(api_key="the-right-key") as server:
        code = cli(server.base_url, cases_dir, tmp_path, "--api-key", "a-wrong-key", "--case", "forced-ok",
                   "--case", "unforced-ok")
    assert code == 2
    results = {(r.case_id, r.mode): r for r in read_results(tmp_path / "results.jsonl")}
    assert {r.outcome for r in results.values()} == {"error"}
    probe = "not sent: the forcing probe cannot tell whether the server forces outputs: HTTP 401: Unauthorized"
    assert results[("forced-ok", "stream")].reason == f"transport: {probe}"
    assert results[("unforced-ok", "stream")].reason == "transport: HTTP 401: Unauthorized"
    assert len(server.requests) == 3  # the probe and the two unforced requests; forced ones are not sent
    assert "nothing was judged" not in capsys.readouterr().out  # errors come first: they say what is wrong


def test_an_unknown_model_is_an_error_with_the_servers_message_even_where_a_refusal_is_expected(cases_dir, tmp_path):
    with fake_server(models=frozenset({"fake"})) as server:
        code = cli(server.base_url, cases_dir, tmp_path, "--case", "forced-ok", "--case", "expects-refusal",
                   model="typo")
    assert code == 2
    results = {(r.case_id, r.mode): r for r in read_results(tmp_path / "results.jsonl")}
    assert {r.outcome for r in results.values()} == {"error"}  # a 404 where a 400 is expected is no verdict
    assert results[("expects-refusal", "non-stream")].reason == "transport: HTTP 404: The model `typo` does not exist."
    assert results[("forced-ok", "stream")].reason.endswith("HTTP 404: The model `typo` does not exist.")


@pytest.mark.parametrize("status", [401, 403, 404, 405, 408, 409, 413, 429])
def test_an_unpredicted_4xx_other_than_400_and_422_is_an_error(tmp_path, status):
    cases = list(load_cases(tmp_path, f"""
- id: answered-{status}
  description: The server answers HTTP {status}, which says nothing about the parsers.
  features: [content]
  request:
    messages: [{{role: user, content: http-{status}}}]
  expect:
    hf: {{message: {{content: "a"}}, finish_reason: stop}}
""").values())
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="hf"), tmp_path / "out")
    assert [(r.outcome, r.reason) for r in output.results] == [("error", f"transport: HTTP {status}: fake {status}")] * 2
    assert output.summary.exit_code == 2


@pytest.mark.parametrize("status", [400, 422])
def test_an_unpredicted_400_or_422_is_a_conformance_failure(tmp_path, status):
    cases = list(load_cases(tmp_path, f"""
- id: refused-{status}
  description: The server refuses with HTTP {status} a request the contract says it accepts.
  features: [content]
  request:
    messages: [{{role: user, content: http-{status}}}]
  expect:
    hf: {{message: {{content: "a"}}, finish_reason: stop}}
""").values())
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="hf"), tmp_path / "out")
    assert {r.outcome for r in output.results} == {"fail"}
    assert all(f"http_status: refused with HTTP {status}: fake {status}" in r.reason for r in output.results)
    assert output.summary.exit_code == 1


class _SlowProbe(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(3)


def test_a_probe_that_times_out_cannot_tell_and_is_an_error(cases, tmp_path):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _SlowProbe)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        target = Target(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", model="m", profile="hf", timeout=1)
        output = run([cases["forced-ok"]], target, tmp_path)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert [(r.outcome, r.reason) for r in output.results] == [
        ("error", "transport: not sent: the forcing probe cannot tell whether the server forces outputs: "
                  "timeout: no answer within 1s")] * 2


# -- skips: named kinds, and the run passes only when each one is allowed --------------------------


def test_a_server_that_cannot_force_skips_with_a_kind_and_nothing_judged_is_exit_2(cases_dir, tmp_path, capsys):
    with fake_server() as server:  # answers the probe without token ids: it cannot force
        assert cli(server.base_url, cases_dir, tmp_path / "a", "--case", "forced-ok") == 2
        out = capsys.readouterr().out
        assert "error: nothing was judged: 2 cannot_force (server " in out
        allowed = ["--allow-skip", "cannot_force"]
        assert cli(server.base_url, cases_dir, tmp_path / "b", "--case", "forced-ok", *allowed) == 2  # still nothing
        assert cli(server.base_url, cases_dir, tmp_path / "c", "--case", "forced-ok", "--case", "unforced-ok") == 2
        assert "2 result(s) not judged, skipped for a kind that is not allowed" in capsys.readouterr().out
        assert cli(server.base_url, cases_dir, tmp_path / "d", "--case", "forced-ok", "--case", "unforced-ok",
                   *allowed) == 0
    [record] = [json.loads(line) for line in (tmp_path / "d" / "results.jsonl").read_text().splitlines()[1:]
                if json.loads(line)["case_id"] == "forced-ok" and json.loads(line)["mode"] == "stream"]
    assert (record["outcome"], record["skip_kind"], record["skip_allowed"]) == ("skip", "cannot_force", True)
    heading = (tmp_path / "c" / "report.md").read_text().splitlines()[0]
    assert heading.startswith("# 💥 Conformance run: error (exit 2): 2 result(s) not judged")
    assert (tmp_path / "d" / "report.md").read_text().startswith("# ✅ Conformance run: pass (exit 0)\n")


def test_forcing_off_implies_its_own_skips_are_allowed(cases_dir, tmp_path):
    with fake_server() as server:
        code = cli(server.base_url, cases_dir, tmp_path, "--case", "forced-ok", "--case", "unforced-ok",
                   "--forcing", "off")
    assert code == 0
    kinds = {(r.case_id, r.skip_kind, r.skip_allowed) for r in read_results(tmp_path / "results.jsonl")}
    assert kinds == {("forced-ok", "forcing_off", True), ("unforced-ok", None, False)}


def test_a_declared_skip_is_not_sent_and_allowed(cases_dir, tmp_path):
    with fake_server() as server:
        code = cli(server.base_url, cases_dir, tmp_path, "--case", "declared-skip", "--case", "unforced-ok",
                   "--forcing", "trust")
    assert code == 0
    assert all(body["messages"][0]["content"] == "ok" and "tools" in body for body in server.requests)
    assert len(server.requests) == 2  # unforced-ok only
    declared = [r for r in read_results(tmp_path / "results.jsonl") if r.case_id == "declared-skip"]
    assert [(r.outcome, r.skip_kind, r.skip_allowed, r.reason) for r in declared] == [
        ("skip", "declared", True, "declared: hf cannot run this case on the fake server")] * 2


def test_a_missing_expectation_is_a_named_skip_that_must_be_allowed(cases_dir, tmp_path):
    with fake_server() as server:
        both = ["--case", "legacy-only", "--case", "unforced-ok"]
        assert cli(server.base_url, cases_dir, tmp_path / "a", *both) == 2
        assert cli(server.base_url, cases_dir, tmp_path / "b", *both, "--allow-skip", "no_expectation") == 0
    [skipped] = [r for r in read_results(tmp_path / "a" / "results.jsonl") if r.case_id == "legacy-only"]
    assert (skipped.skip_kind, skipped.skip_allowed) == ("no_expectation", False)


def test_no_responses_api_is_a_skip_but_an_unknown_model_there_is_an_error(cases_dir, tmp_path):
    with fake_server(models=frozenset({"fake"})) as server:
        cli(server.base_url, cases_dir, tmp_path / "a", "--case", "responses-call")
        cli(server.base_url, cases_dir, tmp_path / "b", "--case", "responses-call", model="typo")
    [skip] = {(r.outcome, r.skip_kind, r.reason) for r in read_results(tmp_path / "a" / "results.jsonl")}
    assert skip == ("skip", "no_responses_api", "the server has no Responses API: HTTP 404: Not Found")
    assert {r.reason for r in read_results(tmp_path / "b" / "results.jsonl")} == {
        "transport: HTTP 404: The model `typo` does not exist."}


def test_a_missing_responses_api_that_the_expectation_names_is_judged_not_skipped(tmp_path):
    cases_dir = tmp_path / "cases"  # a profile known to have no Responses API says so: 404 is its answer
    load_cases(cases_dir, CASES.replace("    hf:{GOOD_RESPONSES}".format(GOOD_RESPONSES=GOOD_RESPONSES),
                                        "    hf:\n      error: {status: 404}"))
    with fake_server(models=frozenset({"fake"})) as server:
        assert cli(server.base_url, cases_dir, tmp_path / "out", "--case", "responses-call") == 0
    assert {(r.outcome, r.skip_kind) for r in read_results(tmp_path / "out" / "results.jsonl")} == {("pass", None)}


def test_an_unknown_profile_is_a_usage_error_before_anything_is_sent(cases_dir, tmp_path, capsys):
    with fake_server() as server:
        assert cli(server.base_url, cases_dir, tmp_path, profile="hff") == 2
    assert server.requests == []
    assert f"unknown profile 'hff': no profile record and no case expectation names it (known: {', '.join(sorted(PROFILES))})" in (
        capsys.readouterr().err)


def test_a_profile_only_a_case_knows_is_accepted(tmp_path):
    cases_dir = tmp_path / "cases"
    load_cases(cases_dir, CASES.replace("legacy:", "my-server:"))
    with fake_server() as server:
        assert cli(server.base_url, cases_dir, tmp_path / "out", "--case", "legacy-only", profile="my-server") == 0
    assert {(r.profile, r.outcome) for r in read_results(tmp_path / "out" / "results.jsonl")} == {("my-server", "pass")}


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf"])
def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(cases_dir, tmp_path, capsys, timeout):
    assert main(["run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--profile", "hf",
                 "--cases", str(cases_dir), "--out", str(tmp_path), "--timeout", timeout]) == 2
    assert "--timeout must be a positive number of seconds" in capsys.readouterr().err
    assert not (tmp_path / "results.jsonl").exists()


# -- what the user sees -------------------------------------------------------------------------------


def test_a_run_ends_with_one_line_per_failure_and_error(tmp_path, capsys):
    cases_dir = tmp_path / "cases"
    load_cases(cases_dir, """
- id: no-done
  description: The stream never sends its final done line, a framing failure.
  features: [content]
  modes: [stream]
  request:
    messages: [{role: user, content: no-done}]
  force: "x"
  expect:
    hf: {message: {reasoning: "\\nplan\\n", tool_calls: [{name: get_weather, arguments: {city: Paris}}]}, finish_reason: tool_calls}
- id: broken
  description: The server answers HTTP 500 to this request, an error of the run.
  features: [content]
  modes: [non-stream]
  request:
    messages: [{role: user, content: http-500}]
  force: "x"
  expect:
    hf: {message: {content: a}, finish_reason: stop}
""")
    with fake_server() as server:
        assert cli(server.base_url, cases_dir, tmp_path / "out", "--forcing", "trust") == 2
    out = capsys.readouterr().out.splitlines()
    start = out.index("failures and errors:")
    assert sorted(out[start + 1:start + 3]) == [
        "ERROR broken non-stream transport: HTTP 500: boom",
        "FAIL  no-done stream stream_framing: no data: [DONE]",
    ]


def test_problem_lines_are_one_line_each_and_capped():
    failed = Check("stream_framing", "fail", reason="line one\nline two " + "x" * 300)
    results = [CaseResult(f"c{i}", "stream", "hf", "fail", "r", checks=[failed]) for i in range(60)]
    lines = problem_lines(results)
    assert lines[0] == "failures and errors:" and lines[-1] == "... and 10 more (see report.md)"
    assert all("\n" not in line and len(line) <= 160 for line in lines)
    assert lines[1].startswith("FAIL  c0 stream stream_framing: line one line two xxx")


def test_the_markdown_heading_says_what_the_exit_code_says():
    passed = CaseResult("a", "stream", "hf", "pass")
    skipped = CaseResult("b", "stream", "hf", "skip", "no token ids", skip_kind="cannot_force")
    complete, interrupted = make_stamp(STAMP.__dict__), make_stamp(STAMP.__dict__, completion="interrupted after 1 of 4 results")
    heading = lambda results, stamp: markdown.render(results, stamp).splitlines()[0]  # noqa: E731
    assert heading([passed], complete) == "# ✅ Conformance run: pass (exit 0)"
    # interrupted, the run exits with its signal's code (130, 143), which the heading cannot know
    assert heading([passed], interrupted) == "# 💥 Conformance run: error: interrupted after 1 of 4 results"
    assert heading([skipped], complete) == ("# 💥 Conformance run: error (exit 2): nothing was judged: "
                                            "1 cannot_force (no token ids)")
    assert heading([], complete) == "# 💥 Conformance run: error (exit 2): nothing was judged: no results"
    assert summarize([passed, skipped]).exit_code == 2


# -- credentials ------------------------------------------------------------------------------------

ECHO = """
- id: echo-auth
  description: A careless server echoes the Authorization header into its refusal message.
  features: [content]
  request:
    messages: [{role: user, content: echo-auth}]
  expect:
    hf: {message: {content: a}, finish_reason: stop}
"""


def _everything_written(out, captured) -> str:
    files = [path.read_text("utf-8", "replace") for path in out.rglob("*") if path.is_file()]
    return "\n".join([*files, captured.out, captured.err])


def test_openai_api_key_is_used_when_no_key_is_given_and_never_written(tmp_path, capsys, monkeypatch, cases_dir):
    key = "sk-env-key-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    load_cases(cases_dir, ECHO, name="echo.yaml")
    try:
        with fake_server(api_key=key) as server:
            code = cli(server.base_url, cases_dir, tmp_path / "out", "--case", "unforced-ok", "--case", "echo-auth",
                       "--case", "forced-ok", "--forcing", "trust")
    finally:
        (cases_dir / "echo.yaml").unlink()
    assert code == 1  # unforced-ok and forced-ok pass with the key; echo-auth's refusal fails
    assert set(server.authorizations) == {f"Bearer {key}"}
    [echoed] = {r.reason for r in read_results(tmp_path / "out" / "results.jsonl") if r.case_id == "echo-auth"}
    assert "bad key Bearer ***" in echoed
    written = _everything_written(tmp_path / "out", capsys.readouterr())
    assert "echo-auth" in written and key not in written


def test_credentials_in_the_base_url_are_sent_but_never_written(cases_dir, tmp_path, capsys):
    with fake_server() as server:
        url = server.base_url.replace("http://", "http://user:hunter2secret@")
        code = cli(url, cases_dir, tmp_path / "out", "--case", "unforced-ok", "--case", "forced-ok",
                   "--allow-skip", "cannot_force")
    assert code == 0
    assert len(server.authorizations) == 3 and {a.split()[0] for a in server.authorizations} == {"Basic"}
    written = _everything_written(tmp_path / "out", capsys.readouterr())
    assert "http://***@127.0.0.1" in written and "hunter2secret" not in written


def test_recheck_gives_the_same_verdict_with_the_same_allowances(cases_dir, tmp_path, capsys):
    with fake_server() as server:
        assert cli(server.base_url, cases_dir, tmp_path / "run", "--case", "forced-ok", "--case", "unforced-ok",
                   "--allow-skip", "cannot_force") == 0
    recording = str(tmp_path / "run" / "transcripts.jsonl")
    common = ["recheck", recording, "--cases", str(cases_dir)]
    assert main([*common, "--out", str(tmp_path / "a")]) == 2  # the allowance is the user's, per run
    assert main([*common, "--out", str(tmp_path / "b"), "--allow-skip", "cannot_force"]) == 0
    assert [r.skip_kind for r in read_results(tmp_path / "b" / "results.jsonl") if r.outcome == "skip"] == [
        "cannot_force"] * 2


def test_a_target_never_shows_its_key():
    target = Target(base_url="http://u:pw-secret@127.0.0.1:1/v1", model="m", profile="hf", api_key="sk-hidden-1")
    assert "sk-hidden-1" not in repr(target) and target.shown_url == "http://***@127.0.0.1:1/v1"
    assert target.redact({"error": ["sk-hidden-1 and pw-secret"]}) == {"error": ["*** and ***"]}


def test_tokenizer_endpoints_refusing_leave_the_forced_output_unverified_not_the_run_broken(tmp_path):
    cases = list(load_cases(tmp_path, f"""
- id: verified
  description: A forced answer with token ids, which the server's tokenizer endpoints then refuse to decode.
  features: [tool_call]
  modes: [non-stream]
  request:
    messages: [{{role: user, content: token-ids}}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:{GOOD}
""").values())
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="hf", can_force=True), tmp_path / "o")
    [result] = output.results
    assert result.outcome == "pass", result.reason
    [forced] = [c for c in result.checks if c.name == "forced_output"]
    assert forced.outcome == "skip" and "not verified" in forced.reason
