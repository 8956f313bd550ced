"""parse_json is json.loads: the same value (types, key order, the float's sign and NaN included) or the
same exception with the same message, over generated JSON texts, numbers, and texts broken on purpose
(all within the depth bound; tests/test_json_bounds.py holds the deeper ones)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conformance.util.json_codec import MAX_JSON_DEPTH, json_text, parse_json


def same(a: Any, b: Any) -> bool:
    """Equal to the type: ints stay ints, -0.0 keeps its sign, NaN equals NaN, dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def outcome(read: Any, text: str) -> tuple[str, Any]:
    try:
        return "value", read(text)
    except Exception as exc:  # noqa: BLE001  the exception is the outcome compared
        return type(exc).__name__, str(exc)


def assert_like_json(text: str) -> None:
    expected, got = outcome(json.loads, text), outcome(parse_json, text)
    assert expected[0] == got[0], (text[:200], expected, got)
    if expected[0] == "value":
        assert same(expected[1], got[1]), (text[:200], expected, got)
    else:
        assert expected[1] == got[1]


scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**200, max_value=2**200)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                                            max_size=4), max_leaves=20)
# JSON's number grammar, with long runs of digits and large exponents (int64 and float edges)
numbers = st.from_regex(r"\A-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,4})?\Z")


@settings(max_examples=400)
@given(values, st.booleans())
def test_values_written_by_json_read_back_alike(value: Any, ascii_only: bool) -> None:
    assert_like_json(json.dumps(value, ensure_ascii=ascii_only))


@settings(max_examples=400)
@given(numbers)
@example("18446744073709551616")  # past uint64: msgspec and json both keep it an int
@example("-9223372036854775809")
@example("1e400")  # past a float: msgspec refuses, json reads inf
@example("2.4703282292062327e-324")
@example("1" * 5000)  # past Python's digit limit: json's ValueError
def test_numbers_alike(text: str) -> None:
    assert_like_json(text)


@settings(max_examples=400)
@given(values, st.data())
def test_broken_texts_fail_alike(value: Any, data: st.DataObject) -> None:
    """A valid text with a cut, an inserted character or a replaced one: json's error and message."""
    text = json.dumps(value, ensure_ascii=data.draw(st.booleans()))
    at = data.draw(st.integers(0, len(text)))
    change = data.draw(st.sampled_from(["cut", "insert", "replace"]))
    pieces = list('{}[],:"\\ \t\n0e-+.nNItfu') + ["\ud800", "\x00", "\u2028"]
    piece = data.draw(st.sampled_from(pieces) | st.text(max_size=2))
    if change == "cut":
        text = text[:at]
    elif change == "insert":
        text = text[:at] + piece + text[at:]
    else:
        text = text[:at] + piece + text[at + 1:]
    assert_like_json(text)


@pytest.mark.parametrize("text", [
    'NaN', '[Infinity, -Infinity]', '"\\ud800"', '"\\udc00x"', '"\ud800"', '{"a": 1, "a": 2, "b": 3}',
    '{"b": 1, "a": 2, "b": 3}', ' {"a": 1} ', '"a\tb"', '\ufeff{}', '{"a": 1}x', '',
    '[' * MAX_JSON_DEPTH + ']' * MAX_JSON_DEPTH, '{"choices": [{"delta": {"content": "\u2028"}}]}',
])
def test_edges_alike(text: str) -> None:
    assert_like_json(text)


@given(values)
def test_json_text_is_json_dumps(value: Any) -> None:
    assert json_text(value) == json.dumps(value, ensure_ascii=False)
