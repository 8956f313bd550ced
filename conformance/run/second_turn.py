"""The second turn of a tool loop: the assistant message a client sends back after turn 1, then the
tool results, and what the server makes of that request.

A case with a `second_turn` is sent as usual (turn 1); then, from the same server's non-streaming answer,
each *rebuilder* makes the turn-2 request a client would send: the real client libraries
(`conformance.clients.second_turn`, injected by the command that runs, since they live further down the
data flow) and the four ways a hand-written client sends reasoning back (`REASONING_REBUILDERS`).
Each rebuilder is a mode of its own, `turn2@<name>`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TurnJob:
    """What a rebuilder gets: the case's turn-1 request as sent (no forcing fields), the server's
    non-streaming turn-1 answer (chat completion JSON, status 200) and the tool message content that
    answers each call of that answer, in order."""

    key: str
    request: Mapping[str, Any]
    answer: Mapping[str, Any]
    tool_results: tuple[str, ...]


@dataclass(frozen=True)
class TurnBody:
    """The turn-2 request body a rebuilder made (without `model` and `stream`), or why it has none."""

    body: dict[str, Any] | None
    error: str | None = None


# A rebuilder: every job of a run at once (a client may need a process per batch), answered by job key.
TurnRebuilder = Callable[[Sequence[TurnJob]], Mapping[str, TurnBody]]


def tool_messages(answer_message: Mapping[str, Any], results: Sequence[str]) -> list[dict[str, Any]]:
    """The tool messages answering each call of `answer_message`, as the OpenAI API asks for them."""
    calls = answer_message.get("tool_calls") or []
    return [{"role": "tool", "tool_call_id": call.get("id"), "content": result}
            for call, result in zip(calls, results)]


def answer_message(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The first choice's message of a chat completion (empty when it has none)."""
    choices = answer.get("choices") or [{}]
    message = choices[0].get("message") if isinstance(choices[0], Mapping) else None
    return dict(message) if isinstance(message, Mapping) else {}


def _reasoning_of(message: Mapping[str, Any]) -> str | None:
    for key in ("reasoning", "reasoning_content"):
        if isinstance(message.get(key), str) and message[key]:
            return message[key]
    return None


def _hand_written(reasoning_keys: tuple[str, ...]) -> TurnRebuilder:
    """A client that appends the answer's message as the server sent it (role, content, tool calls),
    its reasoning under `reasoning_keys` (none: dropped), then the tool results."""
    def rebuild(jobs: Sequence[TurnJob]) -> dict[str, TurnBody]:
        bodies = {}
        for job in jobs:
            sent = answer_message(job.answer)
            message: dict[str, Any] = {"role": "assistant", "content": sent.get("content")}
            if sent.get("tool_calls"):
                message["tool_calls"] = [
                    {"id": call.get("id"), "type": "function",
                     "function": {"name": (call.get("function") or {}).get("name"),
                                  "arguments": (call.get("function") or {}).get("arguments")}}
                    for call in sent["tool_calls"]]
            if (reasoning := _reasoning_of(sent)) is not None:
                message.update(dict.fromkeys(reasoning_keys, reasoning))
            body = {key: copy.deepcopy(value) for key, value in job.request.items()}
            body["messages"] = [*body["messages"], message, *tool_messages(sent, job.tool_results)]
            bodies[job.key] = TurnBody(body)
        return bodies
    return rebuild


# How hand-written clients send the turn-1 reasoning back: under `reasoning` (the field vLLM answers
# with), `reasoning_content` (the older name, and what chat templates read), both, or not at all.
REASONING_REBUILDERS: dict[str, TurnRebuilder] = {
    "reasoning": _hand_written(("reasoning",)),
    "reasoning_content": _hand_written(("reasoning_content",)),
    "both-reasoning-fields": _hand_written(("reasoning", "reasoning_content")),
    "no-reasoning": _hand_written(()),
}
