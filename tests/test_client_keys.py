"""What clients key on: a renamed or moved field fails the case (fast tier, hand-made answers).
Each answer below differs from a passing one (tests/fake_server.py) in one key only."""

from __future__ import annotations

import pytest

from conformance.record.results import make_result
from conformance.run.judge import judge
from tests.engine_helpers import load_cases, response_transcript, stream_transcript
from tests.fake_server import REASONING, chunk, good_response, good_stream, whole_call

CASE = """
- id: one-call
  description: Reasoning then one tool call, whole, exactly as the fake server answers it.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "x"
  expect:
    hf: &one-call
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
    legacy: *one-call
    my-server: *one-call
"""


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return load_cases(tmp_path_factory.mktemp("cases"), CASE)["one-call"]


def judged(case, transcript):
    checks = {check.name: check for check in judge(case, transcript)}
    return make_result(case, transcript, list(checks.values())), checks


def non_stream(message_changes=None, profile="hf"):
    """The fake server's good answer with some message keys set (None: removed)."""
    transcript = response_transcript({}, "tool_calls", profile=profile)
    transcript.response = good_response()
    message = transcript.response["choices"][0]["message"]
    for key, value in (message_changes or {}).items():
        if value is None:
            message.pop(key, None)
        else:
            message[key] = value
    return transcript


def test_the_passing_answers_pass(case):
    for transcript in (non_stream(), stream_transcript(good_stream())):
        result, checks = judged(case, transcript)
        assert result.outcome == "pass", result.reason
        assert checks["expected_reasoning_field"].expected == "reasoning"


@pytest.mark.parametrize("profile", ["hf", "legacy"])
def test_reasoning_under_another_name_fails_with_both_names(case, profile):
    renamed = non_stream({"reasoning": None, "reasoning_content": REASONING}, profile=profile)
    result, checks = judged(case, renamed)
    assert checks["expected_message"].outcome == "pass"  # the text is right: only the name is wrong
    assert result.outcome == "fail"
    assert checks["expected_reasoning_field"].reason == ("reasoning arrived in `reasoning_content`, but clients of "
                                                         "this profile read `reasoning`")


def test_reasoning_deltas_under_another_name_fail(case):
    chunks = good_stream()
    chunks[1] = chunk({"reasoning_content": REASONING})
    result, checks = judged(case, stream_transcript(chunks))
    assert result.outcome == "fail" and checks["expected_reasoning_field"].outcome == "fail"


def test_a_profile_without_a_record_pins_no_field_name(case):
    result, checks = judged(case, non_stream({"reasoning": None, "reasoning_content": REASONING}, profile="my-server"))
    assert "expected_reasoning_field" not in checks and result.outcome == "pass"


@pytest.mark.parametrize("role", [None, "user", "tool"])
def test_a_non_streaming_message_without_the_assistant_role_fails(case, role):
    result, checks = judged(case, non_stream({"role": role}))
    assert result.outcome == "fail"
    assert checks["message_role"].reason == f"the message's role is {role!r}, expected 'assistant'"


@pytest.mark.parametrize("key", ["id", "name"])
def test_a_later_tool_call_delta_repeating_its_id_or_name_fails(case, key):
    head = {**whole_call(), "function": {"name": "get_weather", "arguments": '{"city": '}}
    tail = {"index": 0, "function": {"arguments": '"Paris"}'}}
    if key == "id":
        tail["id"] = head["id"]
    else:
        tail["function"]["name"] = "get_weather"
    chunks = good_stream()
    chunks[2:3] = [chunk({"tool_calls": [head]}), chunk({"tool_calls": [tail]})]
    result, checks = judged(case, stream_transcript(chunks))
    assert result.outcome == "fail"
    assert checks["tool_call_delta_keys"].reason == (f"delta 2 of call index 0 carries {key} again (clients that "
                                                     "accumulate deltas join it onto the first)")


def test_a_chunk_choice_without_its_index_fails(case):
    chunks = good_stream()
    del chunks[1]["choices"][0]["index"]
    result, checks = judged(case, stream_transcript(chunks))
    assert result.outcome == "fail"
    assert checks["chunk_choices"].reason == "chunk 2: a choice without an integer `index`"


def test_content_after_the_finish_reason_fails(case):
    chunks = good_stream()
    chunks[2]["choices"][0]["finish_reason"] = "tool_calls"  # the call's chunk finishes...
    chunks[-1] = chunk({"content": "more"})  # ...and content follows
    result, checks = judged(case, stream_transcript(chunks))
    assert checks["chunk_choices"].outcome == "fail"
    assert "chunk 4 carries content after the finish_reason of chunk 3" in checks["chunk_choices"].reason
