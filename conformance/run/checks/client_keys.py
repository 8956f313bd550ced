"""Checks of what clients key on that a renamed or moved field would otherwise slip past.

The message comparison reads reasoning from either field name, takes a tool call's first id, and
reads choice 0 wherever its `index` is missing; clients do not. These checks pin each of those:

* `expected_reasoning_field` (expectation): reasoning arrives under the profile's field name
  (`conformance.servers.profiles.Profile.reasoning_field`), and under no other;
* `message_role` (contract, non-streaming): the message says `role: assistant`;
* `tool_call_delta_keys` (contract, streaming): `id` and `name` come in the first delta of a call
  only (openai-python's accumulator joins a repeated string onto the first: `call_1call_1`);
* `chunk_choices` (contract, streaming): every choice of every chunk carries its integer `index`,
  and nothing (content, reasoning, tool calls) arrives after the chunk with the `finish_reason`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.record.outcomes import EXPECTATION, FAIL, PASS, Check
from conformance.record.transcript import Transcript
from conformance.record.wire import REASONING_KEYS, Message, StreamReading

_PAYLOAD_KEYS = ("content", *REASONING_KEYS, "tool_calls")


def client_key_checks(transcript: Transcript, message: Message, reading: StreamReading | None,
                      reasoning_field: str | None) -> list[Check]:
    """The checks above that apply to one Chat Completions answer (`reasoning_field` None: the
    profile has no record, so no field name is pinned)."""
    checks = [] if reasoning_field is None else [check_reasoning_field(message, reasoning_field)]
    if reading is None:
        checks.append(check_message_role(transcript.response or {}))
    else:
        checks += [check_tool_call_delta_keys(reading), check_chunk_choices(reading)]
    return checks


def check_reasoning_field(message: Message, expected: str) -> Check:
    others = sorted(message.reasoning_keys - {expected})
    if others:
        return Check("expected_reasoning_field", FAIL, EXPECTATION, expected=expected, actual=others,
                     reason=f"reasoning arrived in `{'`, `'.join(others)}`, but clients of this profile read "
                            f"`{expected}`")
    return Check("expected_reasoning_field", PASS, EXPECTATION, expected=expected)


def check_message_role(response: Mapping[str, Any]) -> Check:
    choices = response.get("choices") or [{}]
    role = (choices[0].get("message") or {}).get("role")
    if role != "assistant":
        return Check("message_role", FAIL, reason=f"the message's role is {role!r}, expected 'assistant'",
                     expected="assistant", actual=role)
    return Check("message_role", PASS)


def check_tool_call_delta_keys(reading: StreamReading) -> Check:
    problems = []
    for index, deltas in reading.tool_deltas.items():
        for number, delta in enumerate(deltas[1:], start=2):
            repeated = [key for key, value in (("id", delta.get("id")), ("name", (delta.get("function") or {}).get("name")))
                        if value]
            if repeated:
                problems.append(f"delta {number} of call index {index} carries {' and '.join(repeated)} again "
                                "(clients that accumulate deltas join it onto the first)")
    if problems:
        return Check("tool_call_delta_keys", FAIL, reason="; ".join(problems[:3]))
    return Check("tool_call_delta_keys", PASS)


def check_chunk_choices(reading: StreamReading) -> Check:
    problems, finished = [], None
    for number, chunk in enumerate(reading.chunks, start=1):
        for choice in chunk.get("choices") or []:
            if not isinstance(choice.get("index"), int):
                problems.append(f"chunk {number}: a choice without an integer `index`")
            delta = choice.get("delta") or {}
            if finished is not None and any(delta.get(key) for key in _PAYLOAD_KEYS):
                problems.append(f"chunk {number} carries {', '.join(k for k in _PAYLOAD_KEYS if delta.get(k))} after "
                                f"the finish_reason of chunk {finished} (clients stop reading there)")
            if choice.get("finish_reason") and finished is None:
                finished = number
    if problems:
        return Check("chunk_choices", FAIL, reason="; ".join(problems[:3]))
    return Check("chunk_choices", PASS)
