"""JSON values compare as JSON (issue 30): `true` is not `1` nor `false` `0` (Python's `==` says they
are), numbers compare by value, object keys in any order, arrays in order; the judge, the stream-vs-
non-stream check and the gate's diff all compare so."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conformance.compare.diff import Pair, diff_pair
from conformance.formats.markers import DEFAULT_MARKERS
from conformance.run.engine import judge_group
from conformance.util.json_values import json_equal
from tests.engine_helpers import load_cases, response_transcript, stream_transcript

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=4), max_leaves=20)
# few distinct values, so that two drawn at random are often equal
small = st.recursive(st.none() | st.booleans() | st.integers(0, 1) | st.sampled_from(["", "a"]),
                     lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("ab"), inner,
                                                                                  max_size=2), max_leaves=4)


def bool_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """The path (keys and indices) of every boolean inside `value`."""
    if isinstance(value, bool):
        return [path]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [found for key, item in items for found in bool_paths(item, (*path, key))]


def replaced(value: Any, path: tuple, new: Any) -> Any:
    """A copy of `value` with the item at `path` replaced by `new`."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {key: replaced(item, rest, new) if key == head else item for key, item in value.items()}
    return [replaced(item, rest, new) if index == head else item for index, item in enumerate(value)]


@given(values)
def test_a_value_equals_itself_and_its_json_round_trip(value: Any) -> None:
    assert json_equal(value, value)
    assert json_equal(value, json.loads(json.dumps(value)))
    assert json_equal(json.loads(json.dumps(value)), value)


@given(values, st.data())
def test_a_boolean_never_equals_the_number_of_its_truth_value(value: Any, data: st.DataObject) -> None:
    paths = bool_paths(value)
    assume(paths)
    path = data.draw(st.sampled_from(paths))
    truth = value
    for key in path:
        truth = truth[key]
    for number in (int(truth), float(truth)):
        changed = replaced(value, path, number)
        assert changed == value  # what Python's == says
        assert not json_equal(value, changed) and not json_equal(changed, value)


@given(small, small)
def test_without_floats_equal_is_the_same_json_text_up_to_key_order(one: Any, other: Any) -> None:
    same_text = json.dumps(one, sort_keys=True) == json.dumps(other, sort_keys=True)
    assert json_equal(one, other) is same_text


def test_numbers_compare_by_value_keys_in_any_order_arrays_in_order() -> None:
    assert json_equal(1, 1.0) and json_equal({"a": [1, 2.5], "b": None}, {"b": None, "a": [1.0, 2.5]})
    assert not json_equal([1, 2], [2, 1]) and not json_equal({"a": 1}, {"a": 1, "b": 1})
    assert not json_equal(None, 0) and not json_equal("1", 1) and not json_equal([], {})
    assert json_equal(float("nan"), float("nan"))  # an answer that says NaN equals itself
    deep_true, deep_one = [True], [1]
    for _ in range(100_000):  # far deeper than the interpreter's recursion limit
        deep_true, deep_one = [deep_true], [deep_one]
    assert json_equal(deep_true, deep_true) and not json_equal(deep_true, deep_one)


CASES = """
- id: {id}
  description: The model is asked for the weather in Fahrenheit; the flag must come back {value}.
  features: [tool_call]
  request:
    messages: [{{role: user, content: ok}}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        tool_calls: [{{name: get_weather, arguments: {{city: Paris, fahrenheit: {value}}}}}]
      finish_reason: tool_calls
"""


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return load_cases(tmp_path_factory.mktemp("cases"), CASES.format(id="wants-true", value="true")
                      + CASES.format(id="wants-one", value="1"))


def call_message(arguments: str) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"id": "call-0", "type": "function",
                                             "function": {"name": "get_weather", "arguments": arguments}}]}


def stream_of(arguments: str) -> list[dict[str, Any]]:
    call = {"index": 0, "id": "call-0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]


@pytest.mark.parametrize(("case_id", "sent"), [("wants-true", "1"), ("wants-one", "true")])
def test_an_expected_boolean_and_a_number_of_its_truth_value_differ(cases, case_id, sent) -> None:
    answer = response_transcript(call_message(f'{{"city": "Paris", "fahrenheit": {sent}}}'), "tool_calls")
    [result] = judge_group(cases[case_id], {"non-stream": answer}, DEFAULT_MARKERS)
    assert result.outcome == "fail"
    assert result.reason == "expected_message: differs from the expected message in tool_calls"


def test_a_stream_that_says_true_where_the_non_stream_says_1_differs(cases) -> None:
    by_mode = {"non-stream": response_transcript(call_message('{"city": "Paris", "fahrenheit": 1}'), "tool_calls"),
               "stream": stream_transcript(stream_of('{"city": "Paris", "fahrenheit": true}'))}
    non_stream, stream = judge_group(cases["wants-true"], by_mode, DEFAULT_MARKERS)
    assert non_stream.outcome == "fail"  # 1 where the case expects true
    compared = next(check for check in stream.checks if check.name == "stream_equals_non_stream")
    assert compared.outcome == "fail" and "tool_calls" in compared.reason


@pytest.mark.parametrize("mode", ["non-stream", "stream"])
def test_the_gate_shows_true_against_1_as_a_difference(mode) -> None:
    def answer(value: str) -> Any:
        arguments = f'{{"city": "Paris", "fahrenheit": {value}}}'
        if mode == "stream":
            return stream_transcript(stream_of(arguments))
        return response_transcript(call_message(arguments), "tool_calls")

    pair = Pair("c", mode, {"baseline": answer("true"), "candidate": answer("1")})
    differences = [(d.kind, d.field, d.baseline, d.candidate) for d in diff_pair(pair)]
    assert differences == [("message", "tool_calls[0].arguments", {"json": {"city": "Paris", "fahrenheit": True}},
                            {"json": {"city": "Paris", "fahrenheit": 1}})]
    same = Pair("c", mode, {"baseline": answer("1"), "candidate": answer("1.0")})
    assert diff_pair(same) == []  # one JSON number
