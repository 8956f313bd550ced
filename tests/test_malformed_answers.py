"""Answers whose JSON has the wrong shape (a string where the API has an object, a number where it
has a string, ...) are the server's fault: judging reports them as a `response_shape` fail naming
the line and the field, never as an internal error of ours, and never as a pass."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.formats.markers import DEFAULT_MARKERS
from conformance.record.stamp import make_stamp
from conformance.record.transcript import Transcript
from conformance.report.run.write import write_reports
from conformance.run.checks.shape import shape_problems
from conformance.run.engine import judge_group
from tests.answer_strategies import chunk, completion, event, response, terminal
from tests.engine_helpers import STAMP, load_cases, stream_transcript

CASE = """
- id: call
  description: One call to get_weather after a short reasoning text, judged on every check.
  features: [tool_call]
  request:
    messages: [{role: user, content: Weather?}]
    tools: [get_weather]
  force: "<think>x</think><tool_call>{}</tool_call>"
  expect:
    hf:
      message:
        reasoning: x
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
"""


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    chat = load_cases(tmp_path_factory.mktemp("chat"), CASE)["call"]
    responses = load_cases(tmp_path_factory.mktemp("responses"), CASE.replace("features:", "endpoint: responses\n  features:")
                           .replace("finish_reason: tool_calls", "finish_reason: completed"))["call"]
    return {"chat": chat, "responses": responses}


def non_stream(endpoint: str, body: dict) -> Transcript:
    return Transcript("call", "non-stream", "hf", endpoint, STAMP, {}, status=200, response=body)


def assert_judged_without_internal_error(case, by_mode: dict[str, Transcript]) -> None:
    for result in judge_group(case, by_mode, DEFAULT_MARKERS):
        assert "internal error" not in result.reason, result.reason
        if any(check.name == "response_shape" for check in result.checks):
            assert result.outcome == "fail" and "does not have the API's shape" in result.reason


@settings(max_examples=300, deadline=None)
@given(st.lists(chunk, max_size=5), completion)
def test_chat_answers_of_any_shape_are_judged(cases, chunks, body) -> None:
    stream = stream_transcript(chunks)
    assert_judged_without_internal_error(cases["chat"], {"non-stream": non_stream("chat", body), "stream": stream})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(event, terminal), max_size=5), response)
def test_responses_answers_of_any_shape_are_judged(cases, events, body) -> None:
    stream = stream_transcript(events, done=False, endpoint="responses")
    by_mode = {"non-stream": non_stream("responses", body), "stream": stream}
    assert_judged_without_internal_error(cases["responses"], by_mode)


def test_a_wrong_shape_is_named_by_line_and_field(cases) -> None:
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"index": 0, "delta": "oops"}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": 7}}]}}]}]
    stream = stream_transcript(chunks)
    assert shape_problems(stream) == ['data line 2: choices[0].delta: "oops" is not of type object or null',
                                      "data line 3: choices[0].delta.tool_calls[0].function.name: 7 is not of "
                                      "type string or null"]
    [result] = judge_group(cases["chat"], {"stream": stream}, DEFAULT_MARKERS)
    assert (result.outcome, result.reason) == ("fail", "response_shape: the answer does not have the API's shape: "
                                               + "; ".join(shape_problems(stream)))
    body = {"choices": [{"index": 0, "message": ["not", "an", "object"], "finish_reason": "stop"}]}
    assert shape_problems(non_stream("chat", body)) == [
        'the response: choices[0].message: ["not", "an", "object"] is not of type object or null']


def test_the_reports_show_an_answer_of_the_wrong_shape(cases, tmp_path) -> None:
    stream = stream_transcript([{"choices": [{"index": 0, "delta": "oops"}]}])
    response = non_stream("chat", {"choices": [{"index": 0, "message": 7}]})
    by_mode = {"non-stream": response, "stream": stream}
    results = judge_group(cases["chat"], by_mode, DEFAULT_MARKERS)
    assert [r.outcome for r in results] == ["fail", "fail"]
    paths = write_reports(tmp_path, results, make_stamp(STAMP.__dict__), [response, stream])
    page = paths["html"].read_text("utf-8")
    assert "response_shape" in page and "&quot;oops&quot;" in page
