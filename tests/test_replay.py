"""Client replay builds SDK objects faster than openai-python does, and must build the same ones.

`conformance.checks.sdk_object` takes pydantic-core's strict validation where a value fits the type
exactly and openai-python's own `construct_type` otherwise. These properties hold it to the SDK:
for generated chunks and events (well-formed, vLLM-extended and broken), the objects are identical
down to types, `model_fields_set` and extras, and a whole replay ends the same way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._models import construct_type
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel

from conformance import checks
from conformance.checks import read_stream, replay_with_openai_client, sdk_object
from tests.answer_strategies import chunk, event
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
def test_a_chunk_is_built_as_the_sdk_builds_it(value: dict) -> None:
    expected = construct_type(type_=ChatCompletionChunk, value=value)
    assert object_state(sdk_object(ChatCompletionChunk, value)) == object_state(expected)


@settings(max_examples=200, deadline=None)
@given(event)
def test_a_responses_event_is_built_as_the_sdk_builds_it(value: dict) -> None:
    expected = construct_type(type_=ResponseStreamEvent, value=value)
    assert object_state(sdk_object(ResponseStreamEvent, value)) == object_state(expected)


def replay_outcome(chunks: list[dict]) -> Any:
    reading = replace(read_stream(stream_transcript([])), chunks=chunks)  # only the chunks are replayed
    try:
        return replay_with_openai_client(reading, [])
    except Exception as exc:
        return type(exc), str(exc)


@settings(max_examples=150, deadline=None)
@given(st.lists(chunk, min_size=1, max_size=5))
def test_a_replay_ends_as_it_ends_with_the_sdks_own_builder(chunks: list[dict]) -> None:
    fast = replay_outcome(chunks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checks, "sdk_object", lambda type_, value: construct_type(type_=type_, value=value))
        slow = replay_outcome(chunks)
    assert fast == slow


def test_the_strict_path_is_taken_for_a_well_formed_chunk_and_not_for_a_coercible_one() -> None:
    well_formed = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": "hi", "reasoning": "r"}, "finish_reason": None}]}
    built = sdk_object(ChatCompletionChunk, well_formed)
    assert built.choices[0].delta.content == "hi" and built.choices[0].delta.model_fields_set == {"content"}
    # pydantic in lax mode would turn "0" into 0; the SDK keeps the string, and so do we
    coercible = {**well_formed, "choices": [{**well_formed["choices"][0], "index": "0"}]}
    assert sdk_object(ChatCompletionChunk, coercible).choices[0].index == "0"


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
