"""An assistant turn written from a response_template's own delimiters, where a chat template cannot write
it (it drops reasoning from history, has no tool-call rendering, raises): each region the turn fills, in the
order reasoning, content, tool calls, between its field's literal `open` and `close` (a pattern standing for
one literal behind optional whitespace counts as that literal), tool calls as the `json` content parser reads
them back through the field's `transform`. Whoever uses the text checks that the template parses it back to
the turn: this module only writes; `Unwritable` says why it cannot."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from conformance.formats.markers import pattern_literal

REASONING_FIELDS = ("thinking", "reasoning_content", "reasoning")
PLACEHOLDER_OPEN, PLACEHOLDER_CLOSE = "{", "}"


class Unwritable(ValueError):
    """Why the response_template's delimiters cannot write the turn."""


def written_by_template(response_template: Mapping[str, Any], message: Mapping[str, Any]) -> str:
    """The raw text of the assistant `message` (`reasoning`, `content`, `tool_calls` as the OpenAI API holds
    them, arguments as JSON values) in the format `response_template` describes."""
    fields = response_template.get("fields") or {}
    parts = []
    if message.get("reasoning"):
        name = next((name for name in REASONING_FIELDS if isinstance(fields.get(name), Mapping)), None)
        if name is None:
            raise Unwritable("it has no reasoning field")
        parts.append(_region(name, fields[name], message["reasoning"], closed=True))
    if message.get("content"):
        if not isinstance(fields.get("content"), Mapping):
            raise Unwritable("it has no content field")
        parts.append(_region("content", fields["content"], message["content"], closed=False))
    if calls := message.get("tool_calls"):
        parts += _calls(fields.get("tool_calls"), calls)
    return "".join(parts)


def _calls(spec: Any, calls: list[Mapping[str, Any]]) -> list[str]:
    if not isinstance(spec, Mapping):
        raise Unwritable("it has no tool_calls field")
    if spec.get("content") != "json":
        raise Unwritable(f"its tool calls are read by the {spec.get('content') or 'text'!r} content parser; "
                         "the fallback writes json calls only")
    bodies = [_inverse(spec.get("transform"), call) for call in calls]
    if spec.get("repeats"):
        return [_region("tool_calls", spec, json.dumps(body, ensure_ascii=False), closed=True) for body in bodies]
    if spec.get("transform_each"):
        return [_region("tool_calls", spec, json.dumps(bodies, ensure_ascii=False), closed=True)]
    if len(bodies) != 1:
        raise Unwritable("its tool_calls field holds one call (neither repeats nor transform_each)")
    return [_region("tool_calls", spec, json.dumps(bodies[0], ensure_ascii=False), closed=True)]


def _region(name: str, spec: Mapping[str, Any], text: str, closed: bool) -> str:
    """`text` between the field's open and (when `closed`) close delimiters."""
    return _literal(name, spec, "open") + text + (_literal(name, spec, "close") if closed else "")


def _literal(name: str, spec: Mapping[str, Any], side: str) -> str:
    value = spec.get(side)
    if isinstance(value, list):
        value = next((item for item in value if isinstance(item, str)), None)
    if isinstance(value, str):
        return value
    pattern = spec.get(f"{side}_pattern")
    if pattern is None:
        return ""
    literal = pattern_literal(pattern)
    if literal is None:
        raise Unwritable(f"its {name} field's {side}_pattern {pattern!r} stands for no one literal")
    return literal


def _inverse(transform: Any, call: Mapping[str, Any]) -> Any:
    """What the json parser must read for `transform` to make `call` of it: the value each `{name}` of the
    transform stands for, bound from the call at the same place (`{content}`: the whole parsed value)."""
    if transform is None:
        return call
    bound: dict[str, Any] = {}

    def bind(shape: Any, value: Any, where: str) -> None:
        if isinstance(shape, str) and shape.startswith(PLACEHOLDER_OPEN) and shape.endswith(PLACEHOLDER_CLOSE):
            bound[shape[1:-1]] = value
        elif isinstance(shape, Mapping):
            if not isinstance(value, Mapping):
                raise Unwritable(f"its transform's {where or 'top'} is an object; the call holds {value!r}")
            for key, inner in shape.items():
                bind(inner, value.get(key), f"{where}.{key}".lstrip("."))

    bind(transform, call, "")
    if "content" in bound:
        return bound["content"]
    return bound
