"""Cases with a raw forced text judged by their format's parse (`reference: parse`): the reference is what the
format means by the text, each profile is judged against it with its documented rules, a server's known bug
passes only as a deviation declared on the format (and fails once undeclared), and a case file may not state
a profile's message for such a case, nor be one the parse cannot decide (a text it cannot parse, a request that
changes what the answer holds)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.formats.format import Deviation
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
from conformance.record.outcomes import FINDING
from conformance.record.transcript import ServerStamp, Transcript
from conformance.run.judge import judge
from conformance.suite.cases import check_suite, load_suite
from conformance.suite.format_cases import in_format

SHIPPED = [case for case in check_suite().cases if case.judged_by_parse]
HERMES = DEFAULT_FORMAT


def _in(case_id: str, form=HERMES):
    return next(case for case in in_format(SHIPPED, form) if case.id == case_id)


def _answer(case_id: str, profile: str, message: dict, form=HERMES, finish_reason: str | None = None) -> dict:
    finish_reason = finish_reason or ("tool_calls" if message.get("tool_calls") else "stop")
    response = {"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}]}
    transcript = Transcript(case_id, "non-stream", profile, "chat", ServerStamp("http://127.0.0.1:1", "m", profile),
                            {}, status=200, response=response)
    return {check.name: check for check in judge(_in(case_id, form), transcript)}


def _call(name: str, arguments: dict) -> dict:
    return {"id": "call-1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_every_shipped_case_judged_by_parse_parses_in_its_format_and_states_no_message_per_profile() -> None:
    assert len(SHIPPED) >= 30
    for case in in_format(SHIPPED, HERMES):
        assert case.reference is not None and case.reference.skip is None, case.id
        assert case.reference.by_reference
        for profile, expectation in case.expect.items():  # refusals, skips, and the format's declared deviations
            assert expectation.error or expectation.skip or expectation.deviation, (case.id, profile)


def test_the_reference_is_what_the_format_means_by_the_text() -> None:
    assert _in("content-only").reference.message.content == "Hello there."  # no think block: content
    cast = _in("string-values-cast-to-number").reference.message.tool_calls[0].arguments
    assert cast == {"zone": 2, "celsius": 21.5, "eco": False}  # the tool's schema types the strings
    inside = _in("tool-call-inside-reasoning").reference
    assert inside.message.tool_calls == () and "<tool_call>" in inside.message.reasoning
    assert inside.finish_reason == "stop"


def test_every_profile_is_judged_against_the_parse_with_its_documented_rules() -> None:
    exact = _answer("content-only", "hf", {"content": "Hello there."})
    assert exact["expected_message"].outcome == "pass"
    spaced = _answer("reasoning-then-content", "hf", {"reasoning": "\nplan\n", "content": "\n\nHello"})
    assert spaced["expected_message"].outcome == "pass" and "keeps_region_whitespace" in spaced["expected_message"].reason
    assert _answer("reasoning-then-content", "hf-rust", {"reasoning": "\nplan\n", "content": "\n\nHello"})[
        "expected_message"].outcome == "fail"  # vLLM's Rust frontend documents no such rule
    # a profile no case file names (SGLang) is judged against the same reference
    assert _answer("content-only", "sglang", {"content": "Hello there."})["expected_message"].outcome == "pass"


def test_a_known_bug_passes_only_as_a_declared_deviation_and_fails_once_undeclared() -> None:
    as_reasoning = {"reasoning": "Hello there.", "content": None}
    declared = _answer("content-only", "legacy", as_reasoning)
    assert declared["expected_message"].outcome == "pass"
    assert declared["known_deviation"].kind == FINDING and "qwen3 reasoning parser" in declared["known_deviation"].reason
    undeclared_format = replace(HERMES, deviations=())
    undeclared = _answer("content-only", "legacy", as_reasoning, undeclared_format)
    assert undeclared["expected_message"].outcome == "fail" and "known_deviation" not in undeclared
    # hf answering what legacy does is no deviation of hf's: it fails
    assert _answer("content-only", "hf", as_reasoning)["expected_message"].outcome == "fail"
    # the bug fixed: the declaration is stale
    fixed = _answer("content-only", "legacy", {"content": "Hello there."})["expected_message"]
    assert fixed.outcome == "fail" and "declaration stale" in fixed.reason


def test_a_deviation_can_change_the_finish_reason_in_the_modes_it_names() -> None:
    legacy = _in("tool-call-inside-reasoning").expect["legacy"]
    assert legacy.finish_reason == legacy.stream_finish_reason == "tool_calls"
    answer = {"reasoning": "\nmaybe ", "content": None, "tool_calls": [_call("get_weather", {"city": "A"})]}
    assert _answer("tool-call-inside-reasoning", "legacy", answer)["expected_message"].outcome == "pass"
    one_mode = _in("think-delimiters-in-argument").expect["legacy"]
    assert one_mode.message.tool_calls[0].arguments == {"city": "<think>x"}
    assert one_mode.stream_message.tool_calls[0].arguments == {"city": "<think>x</think>"}  # its stream keeps it


def test_a_request_rule_of_the_contract_makes_the_reference_what_the_request_asks() -> None:
    hidden = _in("include-reasoning-false-with-call").reference.message  # contract 3.9: the reasoning is removed
    assert hidden.reasoning is None and [call.name for call in hidden.tool_calls] == ["get_weather"]
    assert _answer("include-reasoning-false", "hf", {"content": "\n\nHi"})["expected_message"].outcome == "pass"
    shown = _answer("include-reasoning-false", "legacy", {"reasoning": "\nsecret\n", "content": "\n\nHi"})
    assert shown["expected_message"].outcome == "fail"  # a server ignoring the option
    assert _in("include-reasoning-false").expect["transformers-serve"].error.status == 422  # its own refusal


def test_with_tool_choice_none_or_no_tools_the_reference_leaves_the_calls_text_as_content() -> None:
    for case_id in ("tool-choice-none", "no-tools-call-text-is-content"):  # contract 3.11
        reference = _in(case_id).reference
        assert reference.message.tool_calls == () and reference.message.content == _in(case_id).force
        assert reference.finish_reason == "stop"
    raw = {"content": _in("tool-choice-none").force}
    assert _answer("tool-choice-none", "hf", raw)["expected_message"].outcome == "pass"
    assert _answer("tool-choice-none", "hf", raw)["marker_leak"].outcome == "pass"  # the model's text, not a leak
    parsed = {"tool_calls": [_call("get_weather", {"city": "A"})]}
    assert _answer("tool-choice-none", "hf", parsed)["expected_message"].outcome == "fail"
    rust = _answer("tool-choice-none", "hf-rust", parsed)  # its declared bug
    assert rust["expected_message"].outcome == "pass" and "tool_choice none" in rust["known_deviation"].reason


def test_a_deviation_of_the_finish_reason_alone_in_one_mode_is_reported_and_overrides_the_stream() -> None:
    cut = Deviation("legacy", "content-only", ("non-stream",), {"content": "Hello there."}, "a bug", "https://x",
                    finish_reason="length")
    form = replace(HERMES, deviations=(cut,))
    legacy = _in("content-only", form).expect["legacy"]
    assert (legacy.finish_reason, legacy.stream_finish_reason) == ("length", "stop")
    assert "finish_reason" in legacy.stream_overrides  # the stream is not held to the non-streaming finish
    checks = _answer("content-only", "legacy", {"content": "Hello there."}, form, finish_reason="length")
    assert checks["expected_message"].outcome == "pass" and "a bug" in checks["known_deviation"].reason


def test_a_run_serving_another_format_leaves_the_case_as_written() -> None:
    glm = next(case for case in in_format(SHIPPED, FORMATS["glm45"]) if case.id == "content-only")
    assert glm.reference is None  # the run skips it: written for qwen3-hermes (forcing_plan.other_format)
    assert {case.id for case in load_suite(form=FORMATS["glm45"]) if case.judged_by_parse} == {c.id for c in SHIPPED}


CASE = """\
cases:
  - id: parsed-case
    description: A raw forced text whose reference is the format's own parse of it.
    features: [content]
    request:
      messages: [{role: user, content: "Hi"}]
    reference: parse
    force: "{force}"
{expect}
"""


def _suite(tmp_path: Path, force: str, expect: str = "", tools: bool = False) -> Path:
    text = CASE.replace("{force}", force).replace("{expect}", expect)
    if tools:  # else no tool is offered, and a call's text is content (contract 3.11)
        text = text.replace('content: "Hi"}]\n', 'content: "Hi"}]\n      tools: [{type: function, function: {name: f, '
                            'parameters: {type: object}}}]\n')
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "one.yaml").write_text(text)
    return tmp_path / "cases"


def test_a_case_judged_by_parse_may_not_state_a_profiles_message(tmp_path: Path) -> None:
    expect = textwrap.indent("expect:\n  hf:\n    message: {content: Hi}\n    finish_reason: stop\n", "    ")
    [error] = check_suite(_suite(tmp_path, "Hi", expect)).errors
    assert "expect.hf.message" in str(error) and "deviation declared on the format" in str(error)


def test_a_forced_text_the_format_cannot_parse_is_a_case_file_error_never_a_silent_skip(tmp_path: Path, capsys) -> None:
    cases = _suite(tmp_path, '<tool_call>{\\"name\\": </tool_call>', tools=True)
    with pytest.raises(ValueError, match="one.yaml:2: case 'parsed-case': reference: parse: the qwen3-hermes format "
                                         "cannot parse the forced text"):
        load_suite(cases)
    code = main(["run", "--cases", str(cases), "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--profile", "hf",
                 "--out", str(tmp_path / "run")])
    assert code == 2 and "json parser could not parse region as JSON" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing sent, nothing recorded


@pytest.mark.parametrize(("option", "line"), [("tool_choice: required", "tool_choice"),
                                              ("tool_choice: {type: function, function: {name: f}}", "tool_choice")])
def test_a_request_that_changes_what_the_answer_holds_cannot_be_judged_by_the_parse(tmp_path, option, line) -> None:
    text = CASE.replace("{force}", "Hi").replace("{expect}", "").replace(
        '      messages: [{role: user, content: "Hi"}]', f'      messages: [{{role: user, content: "Hi"}}]\n      {option}')
    (tmp_path / "one.yaml").write_text(text)
    [error] = check_suite(tmp_path).errors
    assert f"request.{line}" in str(error) and "not the format's parse" in str(error)


def test_a_case_judged_by_the_parse_is_tagged_stream_exactly_when_a_deviation_shows_in_one_mode(tmp_path) -> None:
    (tmp_path / "one.yaml").write_text(CASE.replace("{force}", "Hi").replace("{expect}", "").replace(
        "features: [content]", "features: [content, stream]"))
    [error] = check_suite(tmp_path).errors  # no deviation of qwen3-hermes names this case
    assert "features" in str(error) and "names one mode only" in str(error)
    shipped = {case.id: case for case in SHIPPED}
    assert "stream" in shipped["think-delimiters-in-argument"].features  # its deviation: non-stream only
    assert "stream" not in shipped["content-only"].features


def test_a_leak_in_a_declared_bugs_answer_is_reported_as_that_bugs_finding_never_passed() -> None:
    whole = {"reasoning": None, "content": "<think>\nx\n</think>\n\nAnswer."}  # qwen3 with enable_thinking false
    declared = _answer("enable-thinking-false-model-still-thinks", "legacy", whole)
    leak = declared["marker_leak"]
    assert (leak.outcome, leak.kind) == ("fail", FINDING) and "'<think>' in content" in leak.reason
    assert "enable_thinking false" in leak.reason and declared["expected_message"].outcome == "pass"
    undeclared = _answer("enable-thinking-false-model-still-thinks", "legacy", whole, replace(HERMES, deviations=()))
    assert (undeclared["marker_leak"].outcome, undeclared["marker_leak"].kind) == ("fail", "contract")
    # a delimiter the format's own parse keeps (a stray closer stays content) is no leak
    stray = _answer("stray-think-close", "hf", {"content": "Plan quickly.</think>\n\nThe answer."})
    assert stray["marker_leak"].outcome == "pass" and stray["expected_message"].outcome == "pass"
