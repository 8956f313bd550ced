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
        )  # fmt: skip
    result.assert_outcomes(passed=3, failed=1, errors=2, skipped=1)
    result.stdout.fnmatch_lines([
        "PASSED conformance::good-call[[]non-stream[]]",
        "PASSED conformance::good-call[[]stream[]]",
        "SKIPPED *no expectation for profile hf*",
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
