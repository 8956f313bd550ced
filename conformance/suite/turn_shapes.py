"""Shapes: named changes to a turn's rendered text, each defined on the format's own regions (its reasoning
and tool-call regions, found by the delimiters its response_template names), so that one case runs in every
format: the model stopped inside a region, wrote a region twice, wrote text after its calls, a call inside
its reasoning. `conformance.suite.format_cases` applies a case's `shape` to the rendered turn and takes the
format's own parse of the shaped text as the reference; a format whose text lacks the region a shape needs
cannot express the case (`Inexpressible`, a skip that says why).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from conformance.formats.format import Format
from conformance.formats.template_turn import REASONING_FIELDS

# the text a shape writes where the turn had none: a second reasoning block's, the text after the calls
SECOND_THOUGHT = "A second thought."
AFTER_CALLS = "Done."


class Inexpressible(Exception):
    """Why a format cannot express a turn case."""


def _field(form: Format, names: tuple[str, ...]) -> dict[str, Any]:
    fields = form.response_template.get("fields") or {}
    return next((fields[name] for name in names if isinstance(fields.get(name), dict)), {})


def _token_in(form: Format, texts: list[Any]) -> str | None:
    """The first of the format's own tokens written in one of `texts` (a literal, or a pattern: plain or escaped)."""
    return next((token for text in texts if isinstance(text, str) for token in form.marker_tokens
                 if token in text or re.escape(token) in text), None)


def delimiter_texts(form: Format) -> dict[str, str]:
    """The format's delimiters a turn or a shape may name: `reasoning_close` and `call_close`, each the format's
    own token that closes that region (a token of `marker_tokens` in the field's close text or pattern);
    `reasoning_open` and `call_open`, the field's whole open text where it is a literal (Gemma 4's
    `<|channel>thought\\n`), else the format's token its open pattern writes."""
    texts = {}
    for name, field_names in (("reasoning", REASONING_FIELDS), ("call", ("tool_calls",))):
        spec = _field(form, field_names)
        close = spec.get("close") or spec.get("close_pattern")
        token = _token_in(form, [close] if isinstance(close, str) else list(close or []))
        if token is not None:
            texts[f"{name}_close"] = token
        opener = spec.get("open") if isinstance(spec.get("open"), str) else _token_in(form, [spec.get("open_pattern")])
        if opener:
            texts[f"{name}_open"] = opener
    return texts


def _needs(texts: Mapping[str, str], raw: str, *names: str) -> list[str]:
    missing = [name for name in names if name not in texts]
    if missing:
        raise Inexpressible(f"it has no {' or '.join(missing)} delimiter")
    absent = [name for name in names if name.endswith("_close") and texts[name] not in raw]
    if absent:
        raise Inexpressible(f"its rendering of the turn writes no {texts[absent[0]]!r}")
    return [texts[name] for name in names]


def reasoning_region(raw: str, texts: Mapping[str, str]) -> tuple[int, int, int]:
    """Where the turn's first reasoning region is: its start (its opener, or 0 where the prompt wrote the
    opener), the start of its closer, and the end of its closer."""
    opener, closer = _needs(texts, raw, "reasoning_open", "reasoning_close")
    close_at = raw.find(closer)
    open_at = raw.find(opener, 0, close_at)
    return max(open_at, 0), close_at, close_at + len(closer)


def call_region(raw: str, texts: Mapping[str, str], start: int = 0) -> tuple[int, int]:
    """Where the first tool-call region from `start` on is: its opener and the end of its closer."""
    opener, closer = _needs(texts, raw, "call_open", "call_close")
    open_at = raw.find(opener, start)
    close_at = raw.find(closer, open_at) if open_at >= 0 else -1
    if close_at < 0:
        raise Inexpressible("its rendering of the turn writes no closed call")
    return open_at, close_at + len(closer)


def unclosed_last_call(raw: str, texts: Mapping[str, str]) -> str:
    """The rendered turn ended inside its last call: everything from that call's closer on is left out."""
    closer = texts.get("call_close")
    at = raw.rfind(closer) if closer else -1
    if at < 0:
        raise Inexpressible("it has no call closer to leave out")
    return raw[:at]


def unclosed_reasoning(raw: str, texts: Mapping[str, str]) -> str:
    """The rendered turn ended inside its reasoning (max_tokens spent thinking): everything from the reasoning's
    closer on is left out."""
    _, close_at, _ = reasoning_region(raw, texts)
    return raw[:close_at]


def two_reasoning_blocks(raw: str, texts: Mapping[str, str]) -> str:
    """A second reasoning region right after the first: the format's opener, the first region's text with
    its words replaced by `SECOND_THOUGHT` (its whitespace kept), the format's closer."""
    start, close_at, end = reasoning_region(raw, texts)
    opener, closer = texts["reasoning_open"], texts["reasoning_close"]
    inner = raw[start + len(opener):close_at] if raw.startswith(opener, start) else raw[start:close_at]
    words = inner.strip()
    if not words:
        raise Inexpressible("its rendering of the turn writes an empty reasoning region")
    second = opener + inner.replace(words, SECOND_THOUGHT, 1) + closer
    return raw[:end] + second + raw[end:]


def text_after_calls(raw: str, texts: Mapping[str, str]) -> str:
    """`AFTER_CALLS` written right after the last call's closer (the model went on writing after its calls)."""
    (closer,) = _needs(texts, raw, "call_close")
    end = raw.rfind(closer) + len(closer)
    return raw[:end] + AFTER_CALLS + raw[end:]


def call_in_reasoning(raw: str, texts: Mapping[str, str]) -> str:
    """The first call after the reasoning moved, whole, to the end of the reasoning region, right before its
    closer (the model wrote its call while still thinking)."""
    _, close_at, end = reasoning_region(raw, texts)
    open_at, call_end = call_region(raw, texts, end)
    return raw[:close_at] + raw[open_at:call_end] + raw[close_at:open_at] + raw[call_end:]


# shape: a change to the rendered text, defined on the format's own regions (the schema's `shape` enum)
SHAPES: dict[str, Callable[[str, Mapping[str, str]], str]] = {
    "unclosed_last_call": unclosed_last_call,
    "unclosed_reasoning": unclosed_reasoning,
    "two_reasoning_blocks": two_reasoning_blocks,
    "text_after_calls": text_after_calls,
    "call_in_reasoning": call_in_reasoning,
}
