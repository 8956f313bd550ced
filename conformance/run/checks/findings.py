"""Findings: facts clients depend on, recorded for reports and diffs and never failing a case (was
the output forced, which reasoning field the server uses, how tool calls stream, whether
openai-python's own accumulator rebuilds the same message)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conformance.record.outcomes import FAIL, FINDING, PASS, SKIP, Check
from conformance.record.transcript import Transcript
from conformance.record.wire import (
    Message,
    StreamReading,
    message_from_chat_json,
    message_from_responses_json,
    message_view,
)
from conformance.run.checks.contract import compare_views
from conformance.run.checks.openai_replay import replay_chat, replay_responses


def finding_forced_output(transcript: Transcript) -> Check:
    """Did the server emit exactly the forced text, each marker as its own token? A finding: some
    request patterns legitimately replace the forced output (hermes guides `required` with its own
    grammar); where they do not, a `no` explains the failures next to it."""
    problems = transcript.forcing_problems
    if problems is None:
        return Check("forced_output", SKIP, FINDING,
                     reason="not verified: no token ids came back or the server has no /tokenize and /detokenize")
    if problems:
        return Check("forced_output", FAIL, FINDING, reason="; ".join(problems)[:600])
    return Check("forced_output", PASS, FINDING, reason="exactly the forced text, every marker as its single token")


def finding_reasoning_field(message: Message) -> Check:
    keys = sorted(message.reasoning_keys)
    value = "+".join(keys) if keys else "none"
    reason = "reasoning text arrived in " + (" and ".join(f"`{k}`" for k in keys) if keys else "no field")
    return Check("reasoning_field", PASS, FINDING, reason=reason, actual=value)


def observed_tool_call_streaming(reading: StreamReading) -> str:
    """`whole` (one delta per call), `incremental` (some call in several deltas) or `none`."""
    if not reading.tool_deltas:
        return "none"
    return "whole" if all(len(deltas) == 1 for deltas in reading.tool_deltas.values()) else "incremental"


def finding_tool_call_streaming(reading: StreamReading) -> Check:
    counts = {index: len(deltas) for index, deltas in reading.tool_deltas.items()}
    observed = observed_tool_call_streaming(reading)
    return Check("tool_call_streaming", PASS, FINDING, reason=f"deltas per call index: {counts}", actual=observed)


def replay_with_openai_client(reading: StreamReading, tools: Sequence[Any]) -> Message:
    """The message openai-python's own accumulator (the helper behind `client.chat.completions.stream()`)
    rebuilds from the recorded chunks (`conformance.run.checks.openai_replay.replay_chat`)."""
    message, finish_reason = replay_chat(reading.chunks, tools)
    return message_from_chat_json(message, finish_reason)


def replay_responses_with_openai_client(reading: StreamReading, tools: Sequence[Any]) -> Message:
    """The message of the final response openai-python's own accumulator (the state behind
    `client.responses.stream()`) rebuilds from the recorded events (`conformance.run.checks.openai_replay.replay_responses`)."""
    return message_from_responses_json(replay_responses(reading.events, tools))


def finding_client_replay(transcript: Transcript, reading: StreamReading) -> Check:
    """Does openai-python's own stream accumulator rebuild the message we reassembled?"""
    replay = replay_responses_with_openai_client if transcript.endpoint == "responses" else replay_with_openai_client
    try:
        replayed = replay(reading, transcript.request.get("tools") or [])
    except Exception as exc:  # the point is to report how the real client breaks
        return Check("client_replay", FAIL, FINDING, reason=f"openai client raised {type(exc).__name__}: {exc}"[:400])
    return compare_views("client_replay", FINDING, message_view(reading.message), message_view(replayed),
                          "openai client rebuilds a different message: ", "openai client rebuilds the same message")
