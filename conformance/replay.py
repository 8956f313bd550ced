"""Client replay: a recorded stream fed through openai-python's own accumulator, as a client of
`client.chat.completions.stream()` / `client.responses.stream()` would see it. No I/O.

`replay_chat(chunks, tools)` and `replay_responses(events, tools)` return what the SDK's accumulator
ends with (or raise what it raises); `conformance.checks` turns that into a `Message` and compares it
with its own reassembly (the `client_replay` finding).

Two shortcuts keep this cheap, each held equal to the SDK's own way by tests/test_replay.py:
* `sdk_object` builds the objects openai-python builds from each JSON value (`construct_type`),
  through pydantic-core's strict validation where the value fits exactly (about ten times faster).
* Consecutive chunks that only append text to choice 0 (vLLM sends one per token, and an empty one
  per token the parser swallows) are fed as one chunk with their texts joined: the accumulator
  concatenates strings, so it ends the same, and such chunks fire no event that changes the state.
  This is done only where it provably changes nothing (`_ChunkFeed._joinable_run`); elsewhere every
  chunk is fed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

# The delta fields a text-only chunk may carry: content, and vLLM's reasoning fields.
TEXT_FIELDS = frozenset({"content", "reasoning", "reasoning_content"})


def sdk_object(type_: Any, value: Any) -> Any:
    """The object openai-python builds from one received JSON value: `construct_type`, which takes
    the value as it is, without validation. A value that already fits `type_` exactly is built by
    pydantic-core in strict mode instead (no coercion, so nothing is "fixed"), which gives the same
    object about ten times faster."""
    return _build(type_, value)[0]


def _build(type_: Any, value: Any) -> tuple[Any, bool]:
    """(`sdk_object(type_, value)`, whether `value` fits `type_` exactly)."""
    from openai._models import construct_type
    from pydantic import ValidationError

    try:
        built = _strict_adapter(type_).validate_python(value, strict=True)
    except ValidationError:
        return construct_type(type_=type_, value=value), False
    _unset_extras(built)
    return built, True


@functools.cache
def _strict_adapter(type_: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(type_)


def _unset_extras(value: Any) -> None:
    """`construct_type` leaves fields the model does not declare (vLLM's `token_ids`, `reasoning`, ...)
    out of `model_fields_set`; validation puts them in. Make the validated objects say the same.
    Only declared fields can hold models: undeclared ones keep the raw JSON value either way."""
    fields = getattr(type(value), "__pydantic_fields__", None)
    if fields is not None:
        if value.__pydantic_extra__:
            object.__setattr__(value, "__pydantic_fields_set__", value.model_fields_set - value.__pydantic_extra__.keys())
        for name in fields:
            item = value.__dict__.get(name)
            if item is not None and not isinstance(item, (str, int, float)):
                _unset_extras(item)
    elif isinstance(value, list):
        for item in value:
            _unset_extras(item)


def replay_chat(chunks: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> tuple[dict[str, Any], Any]:
    """(choice 0's message as a dict, its finish_reason) after openai-python's accumulator (the state
    behind `client.chat.completions.stream()`) has taken every chunk, finalised as
    `get_final_completion()` does (which parses strict tools' arguments), except after `length` or
    `content_filter`, which the SDK always refuses to finalise: then the last snapshot."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    feed = _ChunkFeed(ChatCompletionStreamState(input_tools=tools))
    text_run: list[Mapping[str, Any]] = []
    for chunk in chunks:
        if _text_delta(chunk) is not None:
            text_run.append(chunk)
            continue
        feed.run(text_run)
        text_run = []
        feed.one(chunk)
    feed.run(text_run)
    state = feed.state
    choice = state.current_completion_snapshot.choices[0]
    if choice.finish_reason not in ("length", "content_filter"):
        choice = state.get_final_completion().choices[0]
    return choice.message.to_dict(), choice.finish_reason


class _ChunkFeed:
    """Feeds chunks to a `ChatCompletionStreamState`, a run of text-only chunks as one where that
    provably ends the same."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.started = False  # a chunk has been fed (so the state has a snapshot)
        self.all_exact = True  # every chunk fed so far fit ChatCompletionChunk exactly

    def one(self, chunk: Mapping[str, Any]) -> None:
        from openai.types.chat import ChatCompletionChunk

        built, exact = _build(ChatCompletionChunk, chunk)
        self.all_exact = self.all_exact and exact
        self.state.handle_chunk(built)
        self.started = True

    def run(self, chunks: Sequence[Mapping[str, Any]]) -> None:
        if len(chunks) > 1 and self._joinable_run():
            chunks = [_joined(chunks)]
        for chunk in chunks:
            self.one(chunk)

    def _joinable_run(self) -> bool:
        """Whether text-only chunks fed now end where one chunk with their texts joined ends.

        For such a chunk (see `_text_delta`) the accumulator rebuilds the message of choice 0 from its
        dump with the delta's strings appended (a field that holds no string yet stays as it is), sets
        the snapshot's usage and system_fingerprint from the chunk (so the last chunk's win), and fires
        delta events, which change nothing. That holds while choice 0 exists (the first chunk for it
        creates it, with fewer fields set) and has no finish_reason (after one, a chunk may fire "done"
        events, which set fields the next chunk's rebuild drops). Rebuilding a message from its own
        dump gives the same message as long as every chunk so far fit the SDK's types exactly (not
        claimed for broken streams: their chunks are all fed)."""
        if not (self.started and self.all_exact):
            return False
        choices = self.state.current_completion_snapshot.choices
        return bool(choices) and not choices[0].finish_reason


def _text_delta(chunk: Any) -> dict[str, str] | None:
    """The delta of a chunk that carries nothing but text for choice 0 (no role, tool calls,
    finish_reason, logprobs or moderation; the text fields strings), else None."""
    if not isinstance(chunk, dict) or chunk.get("moderation") is not None:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or type(choice.get("index")) is not int or choice["index"] != 0:
        return None
    if choice.get("finish_reason") is not None or choice.get("logprobs") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or not all(key in TEXT_FIELDS and type(text) is str for key, text in delta.items()):
        return None
    return delta


def _joined(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The last of `chunks` (text-only, see `_text_delta`) carrying all their texts, field by field."""
    texts: dict[str, str] = {}
    for chunk in chunks:
        for key, text in (_text_delta(chunk) or {}).items():
            texts[key] = texts.get(key, "") + text
    last = chunks[-1]
    return {**last, "choices": [{**last["choices"][0], "delta": texts}]}


def replay_responses(events: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> dict[str, Any]:
    """The final response as a dict after openai-python's accumulator (the state behind
    `client.responses.stream()`) has taken every event, taken as `get_final_response()` would: it
    raises when no `response.completed` event came (an incomplete response, for one)."""
    from openai import omit
    from openai.lib.streaming.responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent

    state = ResponseStreamState(input_tools=tools, text_format=omit)
    for event in events:
        state.handle_event(sdk_object(ResponseStreamEvent, event))
    final = state._completed_response  # what get_final_response() returns
    if final is None:
        raise RuntimeError("Didn't receive a `response.completed` event.")  # get_final_response()'s own words
    return final.to_dict()
