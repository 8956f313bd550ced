"""Hypothesis strategies for the round trip: tool definitions and the assistant messages that call them.

A drawn `Turn` is a list of OpenAI-style tools and one assistant message: reasoning or none, content
or none, 0-4 tool calls whose names come from the tools and whose arguments are drawn from the tool's
JSON Schema (typed properties) or are arbitrary JSON (a tool without properties): unicode, escapes,
deep nesting, empty objects and arrays, numbers at the edges, and strings that contain the
template's own delimiters. Text (reasoning, content) never contains a delimiter: a delimiter-based
format cannot carry its own delimiters in free text, which the format documents, so that is not
asked of it; argument strings can (JSON could escape them).

The raw text is streamed in chunks of two kinds: character cuts (anywhere, inside a delimiter too) and
token cuts (at the checkpoint's own token boundaries, what a server streams). Each drawn cut is recorded
as a hypothesis event, `<kind> cut: <how>`, which the round trip counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hypothesis import event
from hypothesis import strategies as st

from conformance.audit.roundtrip.cuts import CHARACTER_CUTS, TOKEN_CUTS, TokenSpan, cut_before

MAX_TOOL_CALLS = 4
EDGE_INTEGERS = (0, -1, 1, 2**31 - 1, -(2**31), 2**53, 2**53 + 1, 2**63 - 1, -(2**63), 2**64, 10**30, -(10**30))
EDGE_FLOATS = (0.0, -0.0, 0.1, 1e-7, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.5, 1e16, 123456789.123)
ESCAPES = ('"', "\\", "\n", "\r", "\t", "\x00", "\x1f", "\u2028", "\u2029", "/", "\\u0041", "'", "\ufeff", "😀", "é", "中文")
# Tool names: what OpenAI accepts (^[a-zA-Z0-9_-]{1,64}$), starting with a letter; property names.
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
TOOL_NAMES = st.builds(str.__add__, st.sampled_from(_LETTERS), st.text(_LETTERS + "0123456789_-", max_size=11))
PROPERTY_NAMES = st.builds(str.__add__, st.sampled_from(_LETTERS[:26] + "_"), st.text(_LETTERS[:26] + "0123456789_", max_size=7))
PROPERTY_TYPES = ("string", "integer", "number", "boolean", "array", "object", "enum")


@dataclass(frozen=True)
class Turn:
    tools: list[dict[str, Any]]
    message: dict[str, Any]  # {"role": "assistant", "reasoning"?, "content"?, "tool_calls"?}


@lru_cache(maxsize=64)
def free_text(delimiters: tuple[str, ...], reserved: str = "") -> st.SearchStrategy[str]:
    """Text for reasoning and content: any unicode (escapes and surrogate-free), with markup-like
    characters made likely, never containing a delimiter or a reserved character."""
    alphabet = st.characters(blacklist_categories=("Cs",), blacklist_characters=reserved)
    pieces = st.one_of(st.text(alphabet, max_size=12), st.sampled_from(("<", ">", "{", "}", "\n", " ", "</", "|", '"')))
    text = st.lists(pieces, max_size=6).map("".join)
    return text.filter(lambda value: not any(delimiter in value for delimiter in delimiters))


@lru_cache(maxsize=64)
def argument_strings(delimiters: tuple[str, ...], reserved: str = "") -> st.SearchStrategy[str]:
    """Strings for argument values: any unicode, JSON escapes, and the template's delimiters inside."""
    alphabet = st.characters(blacklist_categories=("Cs",), blacklist_characters=reserved)
    specials = st.sampled_from(tuple(delimiters) + ESCAPES) if delimiters else st.sampled_from(ESCAPES)
    pieces = st.one_of(st.text(alphabet, max_size=8), specials)
    return st.lists(pieces, max_size=4).map("".join)


def json_numbers() -> st.SearchStrategy[int | float]:
    return st.one_of(
        st.integers(-(10**30), 10**30), st.sampled_from(EDGE_INTEGERS),
        st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(EDGE_FLOATS),
    )


def json_values(strings: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """Arbitrary JSON: scalars, nested arrays and objects (empty ones included), and deep nesting."""
    scalars = st.one_of(st.none(), st.booleans(), json_numbers(), strings)
    nested = st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(strings, children, max_size=3)),
        max_leaves=8,
    )
    return st.one_of(nested, deep_nesting(scalars))


def deep_nesting(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A leaf wrapped 20-60 levels deep in arrays and single-key objects."""

    def wrap(parts: tuple[Any, list[bool]]) -> Any:
        value, kinds = parts
        for as_object in kinds:
            value = {"k": value} if as_object else [value]
        return value

    return st.tuples(leaves, st.lists(st.booleans(), min_size=20, max_size=60)).map(wrap)


def _property_schema(kind: str) -> dict[str, Any]:
    if kind == "enum":
        return {"type": "string", "enum": ["a", "b c", "<x>"]}
    if kind == "array":
        return {"type": "array", "items": {"type": "string"}}
    return {"type": kind}


@lru_cache(maxsize=64)
def _property_values(strings: st.SearchStrategy[str]) -> dict[str, st.SearchStrategy[Any]]:
    return {
        "string": strings,
        "integer": st.one_of(st.integers(-(10**30), 10**30), st.sampled_from(EDGE_INTEGERS)),
        "number": json_numbers(),
        "boolean": st.booleans(),
        "array": st.lists(strings, max_size=3),
        "object": st.dictionaries(strings, json_values(strings), max_size=3),
        "enum": st.sampled_from(["a", "b c", "<x>"]),
    }


@st.composite
def tool_definition(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A function tool: typed properties (arguments drawn from them), or none (arbitrary arguments)."""
    keys = draw(st.lists(PROPERTY_NAMES, max_size=4, unique=True))
    kinds = [draw(st.sampled_from(PROPERTY_TYPES)) for _ in keys]
    parameters: dict[str, Any] = {"type": "object", "properties": {k: _property_schema(t) for k, t in zip(keys, kinds)}}
    if keys:
        parameters["required"] = keys[: draw(st.integers(0, len(keys)))]
    return {"type": "function", "function": {"name": name, "description": "a generated tool", "parameters": parameters}}


@st.composite
def tool_arguments(draw: st.DrawFn, tool: dict[str, Any], strings: st.SearchStrategy[str]) -> dict[str, Any]:
    parameters = tool["function"]["parameters"]
    properties = parameters.get("properties") or {}
    values = _property_values(strings)
    if not properties:
        return draw(values["object"])
    required = set(parameters.get("required", []))
    arguments = {}
    for key, schema in properties.items():
        if key in required or draw(st.booleans()):
            arguments[key] = draw(values["enum" if "enum" in schema else schema["type"]])
    return arguments


@st.composite
def turns(draw: st.DrawFn, delimiters: tuple[str, ...], *, reasoning: bool = True, content: bool = True,
          tool_calls: bool = True, reserved: str = "") -> Turn:
    """A Turn whose message uses only the parts the response template declares (the flags)."""
    text = free_text(delimiters, reserved)
    strings = argument_strings(delimiters, reserved)
    names = draw(st.lists(TOOL_NAMES, min_size=1, max_size=3, unique=True))
    tools = [draw(tool_definition(name)) for name in names]
    message: dict[str, Any] = {"role": "assistant"}
    if reasoning and (value := draw(st.none() | text)) is not None:
        message["reasoning"] = value
    if content and (value := draw(st.none() | text)) is not None:
        message["content"] = value
    if tool_calls:
        calls = []
        for _ in range(draw(st.integers(0, MAX_TOOL_CALLS))):
            tool = draw(st.sampled_from(tools))
            arguments = draw(tool_arguments(tool, strings))
            calls.append({"type": "function", "function": {"name": tool["function"]["name"], "arguments": arguments}})
        if calls:
            message["tool_calls"] = calls
    return Turn(tools=tools, message=message)


@st.composite
def chunkings(draw: st.DrawFn, text: str, delimiters: tuple[str, ...]) -> list[str]:
    """`text` cut at characters: one character each, random sizes, or cut inside every delimiter."""
    how = draw(st.sampled_from(CHARACTER_CUTS))
    event("character cut", how)
    if how == "one character":
        return list(text)
    if how == "random sizes":
        cuts, position = [], 0
        while position < len(text):
            position += draw(st.integers(1, 16))
            cuts.append(position)
    else:
        cuts = sorted({start + len(d) // 2 for d in delimiters if len(d) > 1 for start in _occurrences(text, d)})
    bounds = [0, *[cut for cut in cuts if 0 < cut < len(text)], len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@st.composite
def token_chunkings(draw: st.DrawFn, text: str, spans: Sequence[TokenSpan]) -> list[str]:
    """`text` (whose tokens are `spans`) cut at token boundaries only: whole, before and after each added
    token (each its own chunk), one token each, or random groups of 1-8 tokens."""
    how = draw(st.sampled_from(TOKEN_CUTS))
    event("token cut", how)
    if how == "whole":
        starts: list[int] = []
    elif how == "at added tokens":
        starts = [index + after for index, span in enumerate(spans) if span.added for after in (0, 1)]
    elif how == "one token":
        starts = list(range(len(spans)))
    else:
        starts, index = [], 0
        while index < len(spans):
            index += draw(st.integers(1, 8))
            starts.append(index)
    return cut_before(text, spans, starts)


def _occurrences(text: str, needle: str) -> list[int]:
    found, start = [], text.find(needle)
    while start != -1:
        found.append(start)
        start = text.find(needle, start + 1)
    return found
