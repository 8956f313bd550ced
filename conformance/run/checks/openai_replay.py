"""Client replay: a recorded stream fed through openai-python's own accumulator, as a client of
`client.chat.completions.stream()` / `client.responses.stream()` would see it. No I/O.

`replay_chat(chunks, tools)` and `replay_responses(events, tools)` return what the SDK's accumulator
ends with (or raise what it raises); `conformance.run.checks.findings` turns that into a `Message` and compares it
with its own reassembly (the `client_replay` finding).

Two shortcuts keep this cheap, each held equal to the SDK's own way by tests/test_replay.py:
* `sdk_object` builds the objects openai-python builds from each JSON value (`construct_type`),
  through pydantic-core's strict validation where the value fits exactly (about ten times faster).
* Consecutive chunks that only append text to choice 0 (vLLM sends one per token, and an empty one
  per token the parser swallows), the last perhaps with the finish reason, are fed as one chunk with
  their texts joined: the accumulator concatenates strings, so it ends the same, and such chunks
  fire no event that changes the state (the finish reason's "done" events follow the same rebuild).
  A run of such chunks that appends nothing at all (empty deltas, as vLLM sends before a tool call)
  is left out where the next chunk rebuilds the message anyway (`_ChunkFeed.run_then_one`).
  This is done only where it provably changes nothing (`_ChunkFeed._joinable`); elsewhere every
  chunk is fed.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping, Sequence
from typing import Any

# The delta fields a text-only chunk may carry: content, and vLLM's reasoning fields.
TEXT_FIELDS = frozenset({"content", "reasoning", "reasoning_content"})
# The finish reasons of openai-python's ChatCompletionChunk (a chunk with another one does not fit it exactly).
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


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
        built = _strict_adapter(_member_named(type_, value)).validate_python(value, strict=True)
    except ValidationError:
        return construct_type(type_=type_, value=value), False
    _unset_extras(built, type_)
    return built, True


@functools.cache
def _strict_adapter(type_: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(type_)


def _member_named(type_: Any, value: Any) -> Any:
    """For a union openai-python tells apart by a field (its event unions, by `type`), the member
    `value` names there, the one `construct_type` falls back to; else `type_`. A value that fits that
    member exactly fits the union as that member alone, and validating against one member is many
    times faster than trying all of them."""
    details = _discriminator(type_)
    if details is None or not isinstance(value, dict):
        return type_
    name = value.get(details.field_alias_from or details.field_name)
    return details.mapping.get(name, type_) if isinstance(name, str) else type_


@functools.cache
def _discriminator(type_: Any) -> Any:
    """openai-python's own reading of a discriminated union (`Annotated[Union[...], PropertyInfo(discriminator=...)]`),
    None for any other type."""
    from openai._models import _build_discriminated_union_meta

    if typing.get_origin(type_) is not typing.Annotated:
        return None
    union, *annotations = typing.get_args(type_)
    return _build_discriminated_union_meta(union=union, meta_annotations=tuple(annotations))


def _unset_extras(value: Any, type_: Any) -> None:
    """Make a validated `value` of `type_` say what `construct_type` says of it. `construct_type` builds
    a model with its `construct` (as in lists and dicts of models), which leaves fields the model does
    not declare (vLLM's `token_ids`, `reasoning`, ...) out of `model_fields_set`, where validation puts
    them; a union (an optional field, an event union) it validates with pydantic, as the strict path
    did. Only declared fields can hold models: undeclared ones keep the raw JSON value either way."""
    plan = _descent(type_)
    if plan is None or value is None:
        return
    kind, inner = plan
    if kind == "list":
        for item in value:
            _unset_extras(item, inner)
    elif kind == "dict":
        for item in value.values():
            _unset_extras(item, inner)
    else:
        if value.__pydantic_extra__:
            object.__setattr__(value, "__pydantic_fields_set__", value.model_fields_set - value.__pydantic_extra__.keys())
        for name, annotation in _model_descent(type(value)):
            _unset_extras(value.__dict__.get(name), annotation)


@functools.cache
def _descent(type_: Any) -> tuple[str, Any] | None:
    """How `_unset_extras` goes into a value of `type_`: ("list", item type), ("dict", value type),
    ("model", None), or None where there is nothing to do (a union, a plain value, a list of them)."""
    while typing.get_origin(type_) is typing.Annotated:
        type_ = typing.get_args(type_)[0]
    origin = typing.get_origin(type_)
    if origin is list:
        inner = typing.get_args(type_)[0]
        return ("list", inner) if _descent(inner) is not None else None
    if origin is dict:
        inner = typing.get_args(type_)[1]
        return ("dict", inner) if _descent(inner) is not None else None
    if origin is None and isinstance(type_, type) and hasattr(type_, "__pydantic_fields__"):  # a pydantic model
        return ("model", None)
    return None


@functools.cache
def _model_descent(model: type) -> tuple[tuple[str, Any], ...]:
    """The declared fields of `model` that `_unset_extras` goes into, with their annotations."""
    return tuple((name, field.annotation) for name, field in model.__pydantic_fields__.items()
                 if _descent(field.annotation) is not None)


def replay_chat(chunks: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> tuple[dict[str, Any], Any]:
    """(choice 0's message as a dict, its finish_reason) after openai-python's accumulator (the state
    behind `client.chat.completions.stream()`) has taken every chunk, finalised as
    `get_final_completion()` does (which parses strict tools' arguments), except after `length` or
    `content_filter`, which the SDK always refuses to finalise: then the last snapshot."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    feed = _ChunkFeed(ChatCompletionStreamState(input_tools=tools), strict_tools=any(map(_is_strict, tools)))
    run: list[tuple[Mapping[str, Any], _Appended]] = []  # appending chunks, arguments (if any) for one call
    call_index = None  # the call the run appends arguments to
    for chunk in chunks:
        appended = _appended(chunk)
        other_call = appended is not None and None not in (appended.call_index, call_index) \
            and appended.call_index != call_index
        if appended is None:
            feed.run_then_one(run, call_index, chunk)
            run, call_index = [], None
            continue
        if other_call:
            feed.run(run, call_index)
            run, call_index = [], None
        run.append((chunk, appended))
        call_index = call_index if appended.call_index is None else appended.call_index
        if appended.finishes:  # the finish reason ends a run
            feed.run(run, call_index)
            run, call_index = [], None
    feed.run(run, call_index)
    state = feed.state
    choice = state.current_completion_snapshot.choices[0]
    if choice.finish_reason not in ("length", "content_filter"):
        choice = _kept_alive(state.get_final_completion()).choices[0]
    return choice.message.to_dict(), choice.finish_reason


_SDK_GENERICS: set[type] = set()  # the parametrized models of the SDK's final objects, kept alive


def _kept_alive(final: Any) -> Any:
    """`final` (a parsed completion or response), its class kept alive. The SDK parametrizes its
    generic models (`ParsedChatCompletion[ResponseFormatT]`, ...) anew for each final object, and
    pydantic caches those classes weakly: once the garbage collector has taken one, the next
    replay builds it and its validation schema again (a tenth of all judging)."""
    _SDK_GENERICS.add(type(final))
    return final


class _Appended(typing.NamedTuple):
    """What a chunk that only appends to choice 0 appends: text to text fields, arguments to one call.
    (A tuple: one is made for nearly every chunk of a stream.)"""

    texts: Mapping[str, str | None]
    call_index: int | None = None
    arguments: str | None = None
    finishes: bool = False  # the chunk also carries choice 0's finish reason


_TEXT_TYPES = frozenset({str, type(None)})


def _appended(chunk: Any) -> _Appended | None:
    """What a chunk appends when all it carries for choice 0 is text (strings or null), at most
    the next piece of one call's arguments and perhaps a finish reason the SDK knows (no role, id,
    name, logprobs or moderation); None for any other chunk. (Called for every chunk: the tests of
    keys and value types are set operations.)"""
    if type(chunk) is not dict or chunk.get("moderation") is not None:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or type(choice.get("index")) is not int or choice["index"] != 0:
        return None
    finish_reason = choice.get("finish_reason")
    if finish_reason is not None and (type(finish_reason) is not str or finish_reason not in FINISH_REASONS) \
            or choice.get("logprobs") is not None:
        return None
    finishes = finish_reason is not None
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    if "tool_calls" not in delta:
        if delta.keys() <= TEXT_FIELDS and _TEXT_TYPES.issuperset(map(type, delta.values())):
            return _Appended(delta, None, None, finishes)
        return None
    texts = {key: text for key, text in delta.items() if key != "tool_calls"}
    if not (texts.keys() <= TEXT_FIELDS and _TEXT_TYPES.issuperset(map(type, texts.values()))):
        return None
    calls = delta["tool_calls"]
    if type(calls) is not list or len(calls) != 1 or type(calls[0]) is not dict or calls[0].keys() != {"index", "function"}:
        return None
    index, function = calls[0]["index"], calls[0]["function"]
    if type(index) is not int or type(function) is not dict or function.keys() != {"arguments"}:
        return None
    arguments = function["arguments"]
    return _Appended(texts, index, arguments, finishes) if type(arguments) is str else None


def _is_strict(tool: Any) -> bool:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    return isinstance(function, Mapping) and bool(function.get("strict"))


class _ChunkFeed:
    """Feeds chunks to a `ChatCompletionStreamState`, a run of appending chunks as one where that
    provably ends the same."""

    def __init__(self, state: Any, strict_tools: bool) -> None:
        self.state, self.strict_tools = state, strict_tools
        self.started = False  # a chunk has been fed (so the state has a snapshot)
        self.all_exact = True  # every chunk fed so far fit ChatCompletionChunk exactly
        self.current_call: Any = None  # the index of the last call choice 0 got a delta for

    def one(self, chunk: Mapping[str, Any]) -> None:
        from openai.types.chat import ChatCompletionChunk

        self._handle(*_build(ChatCompletionChunk, chunk))

    def run_then_one(self, run: Sequence[tuple[Mapping[str, Any], _Appended]], call_index: int | None,
                     chunk: Mapping[str, Any]) -> None:
        """Feed a run of appending chunks, then `chunk`. A run that appends nothing (every delta
        empty: vLLM sends one per token its parser swallows, as before a tool call) is left out where
        it is joinable and `chunk` fits exactly with choice 0 alone: such a run only rebuilds choice
        0's message from its dump (which `_joinable` holds to change nothing) and sets the snapshot's
        usage and system_fingerprint, and `chunk` rebuilds the message again and sets both from itself."""
        from openai.types.chat import ChatCompletionChunk

        built, exact = _build(ChatCompletionChunk, chunk)
        rebuilds_choice_0 = exact and len(built.choices) == 1 and built.choices[0].index == 0
        if not (rebuilds_choice_0 and run and _appends_nothing(run) and self._joinable(None)):
            self.run(run, call_index)
        self._handle(built, exact)

    def _handle(self, built: Any, exact: bool) -> None:
        self.all_exact = self.all_exact and exact
        self.state.handle_chunk(built)
        self.started = True
        for choice in built.choices if exact else ():
            if choice.index == 0 and choice.delta.tool_calls:
                self.current_call = choice.delta.tool_calls[-1].index

    def run(self, run: Sequence[tuple[Mapping[str, Any], _Appended]], call_index: int | None) -> None:
        """Feed a run of appending chunks (arguments, if any, for call `call_index`): one by one until
        the rest is joinable, then the rest as one chunk. A finish reason of a request with strict
        tools is fed on its own (the SDK then parses their arguments, and for `length` raises an
        error naming the usage so far)."""
        if run and run[-1][1].finishes and self.strict_tools:
            self.run(run[:-1], call_index)
            self.one(run[-1][0])
            return
        start = 0
        while len(run) - start > 1 and not self._joinable(call_index):
            self.one(run[start][0])
            start += 1
        if len(run) - start > 1:
            self.one(_joined(run[start:], call_index))
        elif len(run) > start:
            self.one(run[start][0])

    def _joinable(self, call_index: int | None) -> bool:
        """Whether appending chunks (arguments, if any, for call `call_index`) fed now end where one
        chunk carrying all they append ends.

        For such a chunk the accumulator rebuilds the message of choice 0 from its dump with the
        delta's strings appended (a field that holds no string yet stays as it is, null changes
        nothing), sets the snapshot's usage and system_fingerprint from the chunk (so the last chunk's
        win), and fires delta events, which change nothing. That holds while choice 0 exists (the
        first chunk for it creates it, with fewer fields set) and has no finish_reason, and arguments
        go to the call the last delta was for (otherwise a chunk fires "done" events, which set fields
        the next chunk's rebuild drops), of a request without strict tools (their partial arguments
        are parsed at every chunk, which may fail at a cut a joined chunk does not have), and every call
        so far has its name (see `_calls_are_named`). Rebuilding a
        message from its own dump gives the same message as long as every chunk so far fit the SDK's
        types exactly (not claimed for broken streams: their chunks are all fed). The last chunk may
        carry the finish reason: the accumulator sets it after the same rebuild, then fires the "done"
        events, which (no strict tools, no response format) set `parsed` and the current call's
        `parsed_arguments` to None, whether or not texts came with that chunk."""
        if not (self.started and self.all_exact):
            return False
        if call_index is not None and (self.strict_tools or call_index != self.current_call):
            return False
        choices = self.state.current_completion_snapshot.choices
        return bool(choices) and not choices[0].finish_reason and _calls_are_named(choices[0].message)


def _appends_nothing(run: Sequence[tuple[Mapping[str, Any], _Appended]]) -> bool:
    """Whether every chunk of a run has an empty delta (a run never holds a finish reason but as its end,
    and `replay_chat` feeds a run at once when it ends so)."""
    return all(not appended.texts and appended.arguments is None for _, appended in run)


def _calls_are_named(message: Any) -> bool:
    """Whether every tool call of a snapshot message has a function with its name set: a call
    begun by a delta without a name gets `name: None` at the next chunk's rebuild, which one joined
    chunk would skip."""
    return all(call.function is not None and "name" in call.function.model_fields_set
               for call in message.tool_calls or ())


def _joined(run: Sequence[tuple[Mapping[str, Any], _Appended]], call_index: int | None) -> dict[str, Any]:
    """The last chunk of a run of appending chunks, carrying everything the run appends."""
    texts: dict[str, str | None] = {}
    arguments: list[str] = []
    for _, appended in run:
        for key, text in appended.texts.items():
            texts[key] = text if texts.get(key) is None else texts[key] + (text or "")
        if appended.arguments is not None:
            arguments.append(appended.arguments)
    delta: dict[str, Any] = dict(texts)
    if arguments:
        delta["tool_calls"] = [{"index": call_index, "function": {"arguments": "".join(arguments)}}]
    last = run[-1][0]
    return {**last, "choices": [{**last["choices"][0], "delta": delta}]}


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
    return _kept_alive(final).to_dict()
