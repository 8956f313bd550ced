"""Client replay takes two shortcuts past openai-python's own way, and must end where it ends.

`conformance.run.checks.openai_replay.sdk_object` takes pydantic-core's strict validation where a value fits the type
exactly and openai-python's own `construct_type` otherwise; `replay_chat` feeds a run of text-only
chunks as one. These properties hold both to the SDK: for generated chunks and events (well-formed,
vLLM-extended and broken), the objects are identical down to types, `model_fields_set` and extras,
and a whole replay of a generated stream ends with the same message (or the same exception) as the
SDK's accumulator fed every chunk, each built by `construct_type`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from openai._models import construct_type
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel

from conformance.record.wire import read_stream
from conformance.run.checks import findings as checks
from conformance.run.checks import openai_replay as replay
from conformance.run.checks.openai_replay import TEXT_FIELDS, replay_chat, sdk_object
from tests.answer_strategies import chunk, event, sometimes, text, tool_call, usage
from tests.engine_helpers import stream_transcript


def object_state(value: Any) -> Any:
    """Everything that tells two built objects apart: types, values, fields set, extras."""
    if isinstance(value, BaseModel):
        return (
            type(value),
            {name: object_state(item) for name, item in value.__dict__.items()},
            frozenset(value.model_fields_set),
            object_state(value.__pydantic_extra__),
            value.__pydantic_private__,
        )
    if isinstance(value, list):
        return [object_state(item) for item in value]
    if isinstance(value, dict):
        return {key: object_state(item) for key, item in value.items()}
    return (type(value), value)


@settings(max_examples=300, deadline=None)
@given(chunk)
# an optional field (tool_calls) the SDK validates with pydantic, which keeps the extra `a` in the fields set
@example({"id": "", "object": "chat.completion.chunk", "created": 0, "model": "", "choices": [
    {"index": 0, "delta": {"tool_calls": [{"index": 0, "type": "function", "function": {"a": 0}}]}}]})
def test_a_chunk_is_built_as_the_sdk_builds_it(value: dict) -> None:
    expected = construct_type(type_=ChatCompletionChunk, value=value)
    assert object_state(sdk_object(ChatCompletionChunk, value)) == object_state(expected)


@settings(max_examples=200, deadline=None)
@given(event)
# an event union the SDK validates with pydantic, which keeps vLLM's extra field in the fields set
@example({"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0, "delta": "a",
          "sequence_number": 1, "logprobs": [], "token_ids": [5]})
def test_a_responses_event_is_built_as_the_sdk_builds_it(value: dict) -> None:
    expected = construct_type(type_=ResponseStreamEvent, value=value)
    assert object_state(sdk_object(ResponseStreamEvent, value)) == object_state(expected)


def sdk_replay(chunks: list[dict], tools: list[dict]) -> tuple[dict, Any]:
    """What openai-python's accumulator ends with when a client iterates the stream: every chunk
    built by the SDK's own `construct_type` and fed in turn, then finalised (unless the SDK refuses to)."""
    state = ChatCompletionStreamState(input_tools=tools)
    for value in chunks:
        state.handle_chunk(construct_type(type_=ChatCompletionChunk, value=value))
    choice = state.current_completion_snapshot.choices[0]
    if choice.finish_reason not in ("length", "content_filter"):
        choice = state.get_final_completion().choices[0]
    return choice.message.to_dict(), choice.finish_reason


def outcome(replayer: Any, chunks: list[dict], tools: list[dict]) -> Any:
    try:
        return replayer(chunks, tools)
    except Exception as exc:
        return type(exc), str(exc)


def chat_chunk(delta: Any, **fields: Any) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None, **fields}]}


ROLE = chat_chunk({"role": "assistant", "content": ""})
# Chunks that only carry text (vLLM sends one per token, and an empty one per swallowed token) and
# the next piece of a call's arguments (as hermes streams them), sometimes with vLLM's extras, a
# usage or a top-level field of the wrong type.
appended_delta = st.builds(
    lambda texts, call: {**texts, **call},
    st.dictionaries(st.sampled_from(sorted(TEXT_FIELDS)), st.one_of(text, st.none()), max_size=2),
    st.one_of(st.just({}), st.builds(lambda index, piece: {"tool_calls": [{"index": index, "function": {
        "arguments": piece}}]}, st.integers(0, 2), text)),
)
appending_chunk = st.builds(
    lambda delta, choice, top: {**chat_chunk(delta), **top,
                                "choices": [{**chat_chunk(delta)["choices"][0], **choice}]},
    appended_delta,
    st.fixed_dictionaries({}, optional={"logprobs": st.none(), "token_ids": st.lists(st.integers(0, 500), max_size=3)}),
    st.fixed_dictionaries({}, optional={"usage": st.one_of(st.none(), usage), "created": sometimes(st.integers(0, 9)),
                                        "system_fingerprint": st.one_of(st.none(), text)}),
)
call_head = st.integers(0, 2).map(lambda index: chat_chunk({"content": None, "tool_calls": [
    {"index": index, "id": f"call_{index}", "type": "function", "function": {"name": "get_weather"}}]}))
tool_chunk = st.one_of(call_head, st.lists(tool_call, min_size=1, max_size=2).map(
    lambda calls: chat_chunk({"tool_calls": calls})))
# a finish reason, alone or with the last text or argument piece, vLLM's extras or a usage
finish_chunk = st.builds(
    lambda reason, appending, extras: {**appending, "choices": [{**appending["choices"][0], **extras,
                                                                 "finish_reason": reason}]},
    st.sampled_from(["stop", "tool_calls", "length", "content_filter"]),
    st.one_of(st.just(chat_chunk({})), appending_chunk),
    st.fixed_dictionaries({}, optional={"stop_reason": st.one_of(st.none(), st.integers(0, 500))}),
)
first_chunk = st.one_of(st.just(ROLE),
                        st.just({**chat_chunk({}), "choices": []}), chunk)
stream = st.builds(lambda first, middle, tail: [first, *middle, *tail], first_chunk,
                   st.lists(st.one_of(appending_chunk, appending_chunk, tool_chunk, finish_chunk, chunk), max_size=12),
                   st.lists(appending_chunk, max_size=4))  # a stream may well end in appending chunks
tools = st.sampled_from([[], [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
                         [{"type": "function", "function": {"name": "get_weather", "parameters": {}, "strict": True}}]])


@settings(max_examples=400, deadline=None)
@given(stream, tools)
# text after the finish reason: the first such chunk sets `parsed`, which the next one drops
@example([ROLE, chat_chunk({}, finish_reason="length"), chat_chunk({"content": "0"}), chat_chunk({})], [])
# a call begun without a name: the next chunk's rebuild sets `name: None`, so the chunks after it are fed one by one
@example([ROLE, chat_chunk({"tool_calls": [{"index": 0}]}), chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
          chat_chunk({})], [])  # fmt: skip
# a finish reason of the wrong type (unhashable): the chunk is fed as it is
@example([ROLE, {**chat_chunk(None), "choices": [{"index": 0, "delta": {}, "finish_reason": []}]}], [])
# no choice yet: the first text chunk creates it
@example([{**ROLE, "choices": []}, chat_chunk({"content": "a"}), chat_chunk({"content": "b"})], [])
def test_a_replay_ends_as_the_sdks_own_accumulator_ends(chunks: list[dict], tools: list[dict]) -> None:
    assert outcome(replay_chat, chunks, tools) == outcome(sdk_replay, chunks, tools)


# Streams as vLLM sends them, every chunk fitting the SDK's types exactly, so that runs are joined
# (or left out) as often as they are in a real run: text pieces, empty deltas (a swallowed token),
# call heads, whole calls and argument pieces, a usage on any chunk, finish reasons.
exact_text_chunk = st.builds(lambda texts: chat_chunk(texts),
                             st.dictionaries(st.sampled_from(sorted(TEXT_FIELDS)), text, max_size=2))
exact_piece = st.builds(lambda index, piece: chat_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                        st.integers(0, 1), text)
exact_whole_call = st.integers(0, 1).map(lambda index: chat_chunk({"tool_calls": [{
    "index": index, "id": f"call_{index}", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}))
with_usage = st.builds(lambda chunk, usage_: {**chunk, "usage": usage_}, st.one_of(exact_text_chunk, st.just(chat_chunk({}))),
                       st.one_of(st.none(), st.just({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})))
exact_finish = st.sampled_from(["stop", "tool_calls", "length"]).map(lambda reason: chat_chunk({}, finish_reason=reason))
exact_stream = st.builds(lambda middle: [ROLE, *middle], st.lists(st.one_of(
    exact_text_chunk, st.just(chat_chunk({})), st.just(chat_chunk({})), with_usage, call_head, exact_whole_call,
    exact_piece, exact_finish), max_size=14))  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(exact_stream, tools)
def test_a_well_formed_stream_ends_as_the_sdks_own_accumulator_ends(chunks: list[dict], tools: list[dict]) -> None:
    assert outcome(replay_chat, chunks, tools) == outcome(sdk_replay, chunks, tools)


def fed_deltas(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The delta of every chunk the accumulator is fed from now on."""
    fed: list[dict] = []
    handle_chunk = ChatCompletionStreamState.handle_chunk
    monkeypatch.setattr(ChatCompletionStreamState, "handle_chunk", lambda state, built: fed.append(
        built.to_dict()["choices"][0]["delta"]) or handle_chunk(state, built))
    return fed


def test_a_run_of_text_chunks_is_fed_as_one_and_nothing_else_is(monkeypatch: pytest.MonkeyPatch) -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chunks = [chat_chunk({"role": "assistant", "content": ""}), *(chat_chunk({"reasoning": r}) for r in "abc"),
              chat_chunk({}), chat_chunk({"content": "x"}), chat_chunk({"tool_calls": [call]}),
              chat_chunk({}), chat_chunk({}), chat_chunk({}, finish_reason="tool_calls"), chat_chunk({"content": "y"}),
              chat_chunk({"content": "z"})]  # fmt: skip
    fed = fed_deltas(monkeypatch)
    replayed = replay_chat(chunks, [])
    # role; the five text chunks as one; the call; the two empty chunks and the finish as one; after
    # the finish reason every chunk on its own
    assert fed == [{"role": "assistant", "content": ""}, {"reasoning": "abc", "content": "x"}, {"tool_calls": [call]},
                   {}, {"content": "y"}, {"content": "z"}]
    assert replayed == sdk_replay(chunks, []) and replayed[0]["content"] == "xyz"


def test_empty_deltas_before_a_chunk_that_rebuilds_the_message_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    usage_ = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    chunks = [ROLE, chat_chunk({}), {**chat_chunk({}), "usage": usage_}, chat_chunk({"tool_calls": [call]}),
              chat_chunk({}, finish_reason="tool_calls")]
    expected = sdk_replay(chunks, [])
    fed = fed_deltas(monkeypatch)
    assert replay_chat(chunks, []) == expected
    assert fed == [ROLE["choices"][0]["delta"], {"tool_calls": [call]}, {}]
    # the same run before a chunk for two choices, or before one that does not fit the SDK's types, is fed
    two_choices = {**chat_chunk({"tool_calls": [call]}), "choices": [
        chat_chunk({"tool_calls": [call]})["choices"][0], {"index": 1, "delta": {"content": "b"}, "finish_reason": None}]}
    inexact = {**chat_chunk({"tool_calls": [call]}), "created": "0"}
    for chunk in (two_choices, inexact):
        stream = [ROLE, chat_chunk({}), chat_chunk({}), chunk]
        expected = sdk_replay(stream, [])
        fed.clear()
        assert replay_chat(stream, []) == expected and len(fed) == 3  # the two empty deltas joined


def test_argument_pieces_of_the_current_call_are_fed_as_one_unless_a_tool_is_strict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def head(index: int) -> dict:
        return chat_chunk({"content": None, "tool_calls": [{"index": index, "id": f"call_{index}", "type": "function",
                                                            "function": {"name": "f"}}]})

    def piece(index: int, arguments: str) -> dict:
        return chat_chunk({"content": None, "tool_calls": [{"index": index, "function": {"arguments": arguments}}]})

    chunks = [chat_chunk({"role": "assistant", "content": ""}), head(0), piece(0, '{"a"'), piece(0, ": 1"),
              piece(0, "}"), head(1), piece(1, "{"), piece(1, "}"), chat_chunk({}, finish_reason="tool_calls")]
    fed = fed_deltas(monkeypatch)
    replayed = replay_chat(chunks, [])
    # the finish reason ends the last call's run of pieces
    assert [delta.get("tool_calls", [{}])[0].get("function") for delta in fed] == [
        None, {"name": "f"}, {"arguments": '{"a": 1}'}, {"name": "f"}, {"arguments": "{}"}]
    assert replayed == sdk_replay(chunks, [])
    assert [call["function"]["arguments"] for call in replayed[0]["tool_calls"]] == ['{"a": 1}', "{}"]
    strict = [{"type": "function", "function": {"name": "f", "parameters": {}, "strict": True}}]
    expected = sdk_replay(chunks, strict)
    fed.clear()
    assert replay_chat(chunks, strict) == expected and len(fed) == len(chunks)


def test_the_strict_path_is_taken_for_a_well_formed_chunk_and_not_for_a_coercible_one() -> None:
    well_formed = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": "hi", "reasoning": "r"}, "finish_reason": None}]}
    built = sdk_object(ChatCompletionChunk, well_formed)
    assert built.choices[0].delta.content == "hi" and built.choices[0].delta.model_fields_set == {"content"}
    # pydantic in lax mode would turn "0" into 0; the SDK keeps the string, and so do we
    coercible = {**well_formed, "choices": [{**well_formed["choices"][0], "index": "0"}]}
    assert sdk_object(ChatCompletionChunk, coercible).choices[0].index == "0"


def test_an_event_is_validated_against_the_member_its_type_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from openai.types.responses import ResponseTextDeltaEvent

    validated = []
    adapter = replay._strict_adapter
    monkeypatch.setattr(replay, "_strict_adapter", lambda type_: validated.append(type_) or adapter(type_))
    delta = {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0,
             "delta": "hi", "sequence_number": 3, "logprobs": []}
    assert type(sdk_object(ResponseStreamEvent, delta)) is ResponseTextDeltaEvent
    unknown = {"type": "response.not_an_event", "sequence_number": 4}
    assert object_state(sdk_object(ResponseStreamEvent, unknown)) == object_state(
        construct_type(type_=ResponseStreamEvent, value=unknown))
    assert validated == [ResponseTextDeltaEvent, ResponseStreamEvent]


def pieces(text: str, cuts: list[int]) -> list[str]:
    edges = sorted({0, len(text), *(cut % (len(text) + 1) for cut in cuts)})
    return [text[a:b] for a, b in zip(edges, edges[1:])]


@settings(max_examples=150, deadline=None)
@given(reasoning=st.text(max_size=20), content=st.text(max_size=20),
       arguments=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=8), max_size=3),
       cuts=st.lists(st.integers(0, 40), max_size=6), whole=st.booleans())
def test_the_message_does_not_depend_on_where_the_stream_is_cut(reasoning, content, arguments, cuts, whole):
    """Our reassembly and openai-python's accumulator give the same message however the server
    cuts reasoning, content and arguments into deltas (whole calls as hf sends them, or the name
    first and then argument fragments as hermes does)."""
    import json

    def delta(fields: dict, finish_reason: str | None = None) -> dict:
        return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": fields, "finish_reason": finish_reason}]}

    text = json.dumps(arguments)
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather"}}
    calls = ([{**head, "function": {"name": "get_weather", "arguments": text}}] if whole else
             [head] + [{"index": 0, "function": {"arguments": piece}} for piece in pieces(text, cuts)])
    chunks = [delta({"role": "assistant", "content": ""}),
              *(delta({"reasoning": piece}) for piece in pieces(reasoning, cuts)),
              *(delta({"content": piece}) for piece in pieces(content, cuts)),
              *(delta({"tool_calls": [call]}) for call in calls),
              delta({}, "tool_calls")]
    transcript = stream_transcript(chunks)
    reading = read_stream(transcript)
    message = reading.message
    assert (message.reasoning, message.content) == (reasoning or None, content or None)
    assert [(call.name, json.loads(call.arguments)) for call in message.tool_calls] == [("get_weather", arguments)]
    assert checks.finding_client_replay(transcript, reading).outcome == "pass"


def test_a_replay_after_a_garbage_collection_builds_no_model_class_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK parametrizes its generic models (ParsedChatCompletion[ResponseFormatT], ...) for every
    final completion and pydantic caches them weakly: a class the collector took is built again,
    validation schema and all."""
    import gc

    from pydantic._internal import _generics

    chunks = [ROLE, chat_chunk({"content": "hi"}), chat_chunk({}, finish_reason="stop")]
    response = {"id": "r", "object": "response", "status": "completed", "output": [], "created_at": 0, "model": "m"}
    events = [{"type": "response.created", "response": {**response, "status": "in_progress"}},
              {"type": "response.completed", "response": response}]
    replay_chat(chunks, [])
    replay.replay_responses(events, [])
    built = []
    create = _generics.create_generic_submodel
    monkeypatch.setattr(_generics, "create_generic_submodel", lambda *args: built.append(args[0]) or create(*args))
    gc.collect()
    assert replay_chat(chunks, [])[0]["content"] == "hi"
    assert replay.replay_responses(events, [])["status"] == "completed"
    assert built == []
