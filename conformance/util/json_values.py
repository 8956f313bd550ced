"""Equality of JSON values as JSON means it, where Python's `==` does not: `true` is not `1` and `false`
is not `0` (Python's bool is an int). Every comparison of a value a server sent uses `json_equal`.

* a boolean equals only the same boolean; `null` only `null`; a string only the same string;
* numbers compare by value, whatever Python type holds them: `1` equals `1.0` (JSON has one number type);
  NaN (json reads the non-standard `NaN`) equals NaN, so an answer equals itself;
* objects: the same keys (in any order), each value json_equal; arrays: the same length, each item
  json_equal in order (a tuple is an array).

Iterative, so a value nested as deep as the JSON reader allows is compared without recursion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_ARRAYS = (list, tuple)


def json_equal(one: Any, other: Any) -> bool:
    """Whether two JSON values are the same value (module docstring)."""
    pending = [(one, other)]
    while pending:
        one, other = pending.pop()
        if isinstance(one, Mapping) and isinstance(other, Mapping):
            if one.keys() != other.keys():
                return False
            pending += ((one[key], other[key]) for key in one)
        elif isinstance(one, _ARRAYS) and isinstance(other, _ARRAYS):
            if len(one) != len(other):
                return False
            pending += zip(one, other)
        elif not _same_scalar(one, other):
            return False
    return True


def _same_scalar(one: Any, other: Any) -> bool:
    if isinstance(one, bool) or isinstance(other, bool):
        return one is other
    if _is_number(one) and _is_number(other):
        return one == other or (isinstance(one, float) and isinstance(other, float)
                                and math.isnan(one) and math.isnan(other))
    return one == other


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
