"""The pytest plugin (registered through the pytest11 entry point) against the loopback fake server."""

from __future__ import annotations

import pytest

from tests.engine_helpers import load_cases
from tests.fake_server import fake_server

pytest_plugins = ["pytester"]

CASES = """
- id: good-call
  description: One tool call that arrives whole after reasoning, exactly as expected.
  features: [reasoning, tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
- id: fragments
  description: The call streams its arguments in fragments although the case expects it whole.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok-incremental}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
      tool_call_streaming: whole
- id: server-error
  description: The server answers 500, which is an error of the run and never a pass.
  features: [content]
  request:
    messages: [{role: user, content: http-500}]
  force: "x"
  expect:
    hf: {message: {content: "a"}, finish_reason: stop}
- id: legacy-only
  description: Only legacy has an expectation here, so under hf the case is skipped after its contract checks.
  features: [content]
  modes: [non-stream]
  request:
    messages: [{role: user, content: ok}]
  force: "x"
  expect:
    legacy: {message: {content: "a"}, finish_reason: stop}
"""


@pytest.fixture
def cases_dir(tmp_path):
    load_cases(tmp_path / "cases", CASES)
    return tmp_path / "cases"


def test_cases_become_items_with_readable_ids_and_outcomes(pytester, cases_dir):
    with fake_server() as server:
        result = pytester.runpytest(
            "--conformance-base-url", server.base_url, "--conformance-model", "fake",
            "--conformance-profile", "hf", f"--conformance-cases={cases_dir}", "--conformance-forcing=trust",
            f"--conformance-out={pytester.path / 'out'}", "-rA", "-p", "no:cacheprovider",
            "--conformance-allow-skip=no_expectation",
        )  # fmt: skip
    result.assert_outcomes(passed=3, failed=1, errors=2, skipped=1)
    result.stdout.fnmatch_lines([
        "PASSED conformance::good-call[[]non-stream[]]",
        "PASSED conformance::good-call[[]stream[]]",
        "SKIPPED *no_expectation: no expectation for profile hf*",
        "ERROR conformance::server-error[[]stream[]]*",
        "FAILED conformance::fragments[[]stream[]]*",
    ])  # fmt: skip
    result.stdout.fnmatch_lines(["*expected_tool_call_streaming: tool calls streamed incremental, expected whole*"])
    result.stdout.fnmatch_lines(["*server-error[[]stream[]] could not be judged: transport: HTTP 500: boom*"])
    assert len(server.requests) == 7  # every case x mode sent once, for all items together
    assert (pytester.path / "out" / "report.md").is_file()


def test_feature_markers_select_cases(pytester, cases_dir):
    with fake_server() as server:
        result = pytester.runpytest(
            "--conformance-base-url", server.base_url, "--conformance-model", "fake",
            "--conformance-profile", "hf", f"--conformance-cases={cases_dir}", "-m", "reasoning",
            "--conformance-forcing=trust",
            "--strict-markers", "-p", "no:cacheprovider",
        )  # fmt: skip
    result.assert_outcomes(passed=2)
    assert len(server.requests) == 2  # deselected cases are not sent


def test_the_api_key_is_sent_and_a_run_that_dies_fails_every_item_once(pytester, cases_dir):
    blocker = pytester.path / "out"
    blocker.write_text("a file where the output directory should go")
    with fake_server() as server:
        result = pytester.runpytest(
            "--conformance-base-url", server.base_url, "--conformance-model", "fake", "--conformance-profile", "hf",
            f"--conformance-cases={cases_dir}", "--conformance-api-key=sekrit", f"--conformance-out={blocker}",
            "-p", "no:cacheprovider",
        )  # fmt: skip
    result.assert_outcomes(errors=7)
    result.stdout.fnmatch_lines(["*the conformance run failed: *Error: *out*"])
    assert server.authorizations == ["Bearer sekrit"]  # the forcing probe; the run died before the cases
    assert "Traceback" not in result.stdout.str().split("the conformance run failed", 1)[1]


def test_inactive_without_options(pytester):
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "conformance::" not in result.stdout.str()


def test_incomplete_options_are_a_usage_error(pytester):
    result = pytester.runpytest("--conformance-base-url", "http://127.0.0.1:9/v1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--conformance-base-url needs --conformance-model and --conformance-profile*"])
    result = pytester.runpytest("--conformance-base-url=http://127.0.0.1:9/v1", "--conformance-model=m",
                                "--conformance-profile=hf", f"--conformance-checkpoint={pytester.path / 'nope'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--conformance-checkpoint: *nope/tokenizer_config.json: cannot read*"])


def run_plugin(pytester, server, cases_dir, *extra, subprocess=False):
    args = ["--conformance-base-url", server.base_url, "--conformance-model", "fake", "--conformance-profile", "hf",
            f"--conformance-cases={cases_dir}", "--conformance-forcing=trust", "-p", "no:cacheprovider", *extra]
    return (pytester.runpytest_subprocess if subprocess else pytester.runpytest)(*args)


def test_a_skip_of_a_kind_not_allowed_is_an_error_and_nothing_judged_is_not_green(pytester, cases_dir):
    with fake_server() as server:
        result = run_plugin(pytester, server, cases_dir, "conformance::legacy-only")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*legacy-only[[]non-stream[]] was not judged: skipped (no_expectation), a kind "
                                     "this run does not allow (--conformance-allow-skip no_expectation)*"])
        allowed = run_plugin(pytester, server, cases_dir, "conformance::legacy-only",
                             "--conformance-allow-skip=no_expectation")
    allowed.assert_outcomes(skipped=1)
    assert allowed.ret == pytest.ExitCode.TESTS_FAILED  # "1 skipped" is no verdict
    allowed.stdout.fnmatch_lines(["conformance: nothing was judged: 1 conformance items, none passed or failed "
                                  "(first: no_expectation: no expectation for profile hf)"])


def test_each_item_reports_its_own_duration(pytester, tmp_path):
    load_cases(tmp_path / "slow", CASES + """
- id: slow-stream
  description: The stream stalls for a second in the middle, so its item takes that second.
  features: [tool_call]
  request:
    messages: [{role: user, content: stall}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
""")
    with fake_server(stall_seconds=1.0) as server:
        result = run_plugin(pytester, server, tmp_path / "slow", "--junitxml=junit.xml", "-m", "not content")
    result.assert_outcomes(passed=5, failed=1)
    import xml.etree.ElementTree as ET

    times = {case.get("name"): float(case.get("time")) for case in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    assert times["slow-stream[stream]"] >= 1.0
    assert all(seconds < 0.5 for name, seconds in times.items() if name != "slow-stream[stream]"), times


def test_collect_only_lists_the_items_and_sends_nothing(pytester, cases_dir):
    with fake_server() as server:
        result = run_plugin(pytester, server, cases_dir, "--collect-only", "-q")
        verbose = run_plugin(pytester, server, cases_dir, "--collect-only")
    assert server.requests == []
    result.stdout.fnmatch_lines(["conformance::good-call[[]non-stream[]]", "conformance::good-call[[]stream[]]",
                                 "*7 tests collected*"])
    verbose.stdout.fnmatch_lines(["collected 7 items", "*<ConformanceItem good-call[[]stream[]]>*"])


def test_one_item_is_selected_by_its_node_id(pytester, cases_dir):
    with fake_server() as server:
        result = run_plugin(pytester, server, cases_dir, "conformance::good-call[stream]", "-rA")
        assert len(server.requests) == 2  # the stream is judged against the non-streaming answer
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["PASSED conformance::good-call[[]stream[]]"])
        unknown = run_plugin(pytester, server, cases_dir, "conformance::nope")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*no conformance item nope (ids look like conformance::CASE-ID[[]stream[]])*"])


def test_under_xdist_the_workers_split_the_requests_and_the_reports_cover_all(pytester, cases_dir):
    with fake_server() as server:
        result = run_plugin(pytester, server, cases_dir, "-n", "2", f"--conformance-out={pytester.path / 'out'}",
                            "--conformance-allow-skip=no_expectation", subprocess=True)
    result.assert_outcomes(passed=3, failed=1, errors=2, skipped=1)
    assert len(server.requests) == 7  # every case x mode once, whatever the number of workers
    from conformance.record.results import read_results

    results = read_results(pytester.path / "out" / "results.jsonl")
    both = [(c, m) for c in ("good-call", "fragments", "server-error") for m in ("non-stream", "stream")]
    assert sorted((r.case_id, r.mode) for r in results) == sorted([*both, ("legacy-only", "non-stream")])
    from conformance.record.recording import read_header

    for file in ("results", "transcripts"):  # one header for the whole run, every worker's cases
        assert read_header(pytester.path / "out" / f"{file}.jsonl", file)["case_ids"] == sorted(
            {"good-call", "fragments", "server-error", "legacy-only"})
    assert (pytester.path / "out" / "report.md").is_file()


def test_openai_api_key_is_used_and_never_written(pytester, cases_dir, monkeypatch):
    key = "sk-plugin-env-key-42"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with fake_server(api_key=key) as server:
        result = run_plugin(pytester, server, cases_dir, f"--conformance-out={pytester.path / 'out'}", "-rA",
                            "-m", "reasoning")
    result.assert_outcomes(passed=2)
    assert set(server.authorizations) == {f"Bearer {key}"}
    written = [p.read_text() for p in (pytester.path / "out").iterdir()] + [result.stdout.str(), result.stderr.str()]
    assert key not in "\n".join(written)


def test_an_unknown_profile_or_timeout_is_a_usage_error(pytester, cases_dir):
    result = pytester.runpytest("--conformance-base-url=http://127.0.0.1:9/v1", "--conformance-model=m",
                                "--conformance-profile=hff", f"--conformance-cases={cases_dir}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown profile 'hff': no profile record and no case expectation names it*"])
    result = pytester.runpytest("--conformance-base-url=http://127.0.0.1:9/v1", "--conformance-model=m",
                                "--conformance-profile=hf", f"--conformance-cases={cases_dir}", "--conformance-timeout=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--conformance-timeout must be a positive number of seconds, not 0*"])


def test_a_wrong_model_makes_every_item_an_error_not_a_skip(pytester, cases_dir):
    with fake_server(models=frozenset({"fake"})) as server:
        result = pytester.runpytest(
            "--conformance-base-url", server.base_url, "--conformance-model", "typo", "--conformance-profile", "hf",
            f"--conformance-cases={cases_dir}", "-p", "no:cacheprovider",
        )  # fmt: skip
    result.assert_outcomes(errors=7)
    result.stdout.fnmatch_lines(["*good-call[[]stream[]] could not be judged: *HTTP 404: The model `typo` does not exist.*"])
