"""The second turn of a tool loop: the assistant message a client sends back after turn 1, then the
tool results, and what the server makes of that request.

A case with a `second_turn` is sent as usual (turn 1); then, from the same server's non-streaming answer,
each *rebuilder* makes the turn-2 request a client would send: the real client libraries
(`conformance.clients.second_turn`, injected by the command that runs, since they live further down the
data flow) and the four ways a hand-written client sends reasoning back (`REASONING_REBUILDERS`).
Each rebuilder is a mode of its own, `turn2@<name>`.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from conformance.record.case_model import RUN_CONTROLS, Case, Mode, second_turn_mode
from conformance.record.outcomes import FAIL, FINDING, Check, SkipKind
from conformance.record.transcript import Transcript
from conformance.record.wire import error_text
from conformance.run.checks.second_turn import check_turn2_prompt, reasoning_fields_sent
from conformance.run.driver import Clients, Target, send
from conformance.run.forcing_plan import NotSent
from conformance.run.judge import judge
from conformance.servers.forcing import ForcingUnsupported, ServerTokenizer
from conformance.servers.profile import KnownRefusal
from conformance.servers.profiles import profile_record
from conformance.suite.format_cases import second_turn_conversation, tool_messages
from conformance.util.side_requests import in_daemon_thread


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
    available: bool = True  # False: the client cannot run here (not installed); `error` says why


# A rebuilder: the jobs it is given together (the engine gives one at a time, as each case's turn 1 is in),
# answered by job key.
TurnRebuilder = Callable[[Sequence[TurnJob]], Mapping[str, TurnBody]]


def answer_message(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The first choice's message of a chat completion (empty when it has none, or none of the right shape)."""
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, Mapping) else None
    return dict(message) if isinstance(message, Mapping) else {}


def answer_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A message's tool calls, [] unless they are a list of objects each with a `function` object."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not all(isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)
                                              for c in calls):
        return []
    return calls


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
            if calls := answer_calls(sent):
                message["tool_calls"] = [
                    {"id": call.get("id"), "type": "function",
                     "function": {"name": call["function"].get("name"), "arguments": call["function"].get("arguments")}}
                    for call in calls]
            if (reasoning := _reasoning_of(sent)) is not None:
                message.update(dict.fromkeys(reasoning_keys, reasoning))
            body = {key: copy.deepcopy(value) for key, value in job.request.items()}
            body["messages"] = [*body["messages"], message, *tool_messages(
                [call.get("id") for call in answer_calls(sent)], job.tool_results)]
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


def first_turn_job(case: Case, first: Transcript | None) -> TurnJob | str:
    """What the rebuilders get from the server's non-streaming turn-1 answer, or why there is none
    to answer (that answer is judged in its own mode): none, a refusal, an answer that is not the forced
    text (what the model wrote is then unknown), calls of the wrong shape or number."""
    assert case.second_turn is not None
    if first is None or first.status != 200 or not isinstance(first.response, Mapping):
        status = "no answer" if first is None or first.status is None else f"HTTP {first.status}"
        return f"the server's non-streaming turn-1 answer is not a completion to answer ({status})"
    if first.forcing_problems:
        return f"the server's non-streaming turn-1 answer is not the forced text: {first.forcing_problems[0]}"
    calls = answer_calls(answer_message(first.response))
    wanted = len(case.second_turn.tool_results)
    if len(calls) != wanted:
        return (f"the server's non-streaming turn-1 answer has {len(calls)} well-formed tool call(s); the second "
                f"turn answers {wanted}")
    return TurnJob(f"{case.id}#{first.repeat}", copy.deepcopy(case.request), first.response,
                   case.second_turn.tool_results)


def turn2_request(case: Case, body: Mapping[str, Any]) -> dict[str, Any]:
    """A rebuilt turn-2 body with the case's run controls it left out."""
    request = copy.deepcopy(dict(body))
    for key in RUN_CONTROLS:
        if key in case.request and key not in request:
            request[key] = case.request[key]
    return request


def turn2_case(case: Case, request: Mapping[str, Any]) -> Case:
    """The case as its second turn: `request` (the rebuilt body) sent, forcing and judged against the
    second turn's rendered text and reference."""
    assert case.second_turn is not None
    return replace(case, request=dict(request), force=case.second_turn.force, reference=case.second_turn.reference,
                   turn=case.second_turn.turn, expect={}, shape=None, second_turn=None)


def reference_conversations(case: Case, answer: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The turn-2 conversation as the model wrote turn 1 (the case's turn, with the server's call ids),
    with and without its reasoning: what the model was trained to see next."""
    first = case.written_turn
    assert first is not None
    ids = [call.get("id") for call in answer_calls(answer_message(answer))]
    return {"reference": second_turn_conversation(case, first, ids, api=True),
            "reference_without_reasoning": second_turn_conversation(case, replace(first, reasoning=None), ids,
                                                                    api=True)}


async def rendered_prompts(tokenizer: ServerTokenizer, case: Case, transcript: Transcript,
                           answer: Mapping[str, Any]) -> dict[str, str]:
    """The prompts the server rendered: for the request as sent, the prompt its answer was generated from
    (the answer's `prompt_token_ids` decoded, `sent_from: prompt_token_ids`) where it carries them, else its
    /tokenize rendering of the request's messages (`sent_from: tokenize`), which need not be the same: vLLM
    0.32's chat request renames `reasoning_content` to `reasoning` before rendering, its /tokenize does not;
    and its /tokenize renderings of the reference conversations (reasoning under both names)."""
    request = transcript.request
    tools = request.get("tools") or case.request.get("tools")
    ids = (transcript.response or {}).get("prompt_token_ids")
    if isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids):
        prompts = {"sent": await tokenizer.detokenize(ids), "sent_from": "prompt_token_ids"}
    else:
        prompts = {"sent": await tokenizer.render_chat(request["messages"], tools), "sent_from": "tokenize"}
    for name, messages in reference_conversations(case, answer).items():
        prompts[name] = await tokenizer.render_chat(messages, tools)
    return prompts


@dataclass(frozen=True)
class TurnSender:
    """What sending a second turn takes of the run: its connections and target, its slots for requests in
    flight, the forcing of a turn-2 request (its fields, or why it is not sent: a method that keys on the
    prompt needs the rebuilt request), the server's renderer and the verification of a forced answer."""

    clients: Clients
    target: Target
    slots: asyncio.Semaphore
    forcing: Callable[[Case], Awaitable[tuple[dict[str, Any] | None, NotSent | None]]]
    renderer: Callable[[], ServerTokenizer]
    verify: Callable[[Case, Transcript], Awaitable[list[str] | None]]


async def send_second_turn(sender: TurnSender, case: Case, job: TurnJob, name: str, rebuild: TurnRebuilder,
                           repeat: int) -> Transcript:
    """`rebuild`'s turn 2 of `case` (a client library runs in a daemon thread, within the run's timeout), sent
    forced, the forced answer verified and the server's renderings of the request and of the reference
    conversation recorded. What goes wrong on the way is the transcript's error, never the run's."""
    mode, target = second_turn_mode(name), sender.target
    try:
        bodies = await in_daemon_thread(REBUILD_TIMEOUT, _one_at_a_time, rebuild, job)
    except TimeoutError:
        return turn2_not_sent(case, target, mode, repeat, None,
                              f"{name} did not send a second turn within {REBUILD_TIMEOUT:g}s")
    except Exception as exc:  # a rebuilder's own set-up (a replay server, a Node batch) failing
        return turn2_not_sent(case, target, mode, repeat, None,
                              f"{name} did not send a second turn: {type(exc).__name__}: {exc}")
    body = bodies.get(job.key)
    if body is None or body.body is None:
        why = body.error if body is not None else "the rebuilder gave no body"
        return turn2_not_sent(case, target, mode, repeat, "client_unavailable" if body and not body.available else None,
                              f"{name} did not send a second turn: {why}")
    sent = turn2_case(case, turn2_request(case, body.body))
    forcing, not_sent = await sender.forcing(sent)
    if not_sent is not None:
        return turn2_not_sent(case, target, mode, repeat, not_sent.kind, not_sent.reason)
    async with sender.slots:
        transcript = await send(sender.clients, target, sent, mode, forcing=forcing, repeat=repeat)
    if transcript.status == 200:
        transcript.forcing_problems = await sender.verify(sent, transcript)
        record = profile_record(target.profile)
        if not record.tokenizes_conversations:
            transcript.prompts_unavailable = f"{record.server_name}'s /tokenize does not render a conversation"
            return transcript
        try:
            async with asyncio.timeout(target.timeout):
                transcript.prompts = await rendered_prompts(sender.renderer(), case, transcript, job.answer)
        except ForcingUnsupported as exc:  # a server without /tokenize and /detokenize
            transcript.prompts_unavailable = target.redact(str(exc))
        except Exception as exc:  # a refusal, a timeout, an answer of the wrong shape: not judged, an error
            transcript.prompts_error = target.redact(f"{type(exc).__name__}: {exc}")
    return transcript


# Rebuilders run one at a time, whichever run (a gate's two sides) asks: two client libraries imported at
# once in two threads met a half-imported httpx ("partially initialized module"), measured. Each waits at
# most REBUILD_TIMEOUT seconds, its turn included (a client's two calls are bounded by its own timeout).
_REBUILDING = threading.Lock()
REBUILD_TIMEOUT = 300.0


def _one_at_a_time(rebuild: TurnRebuilder, job: TurnJob) -> Mapping[str, TurnBody]:
    with _REBUILDING:
        return rebuild([job])


def turn2_not_sent(case: Case, target: Target, mode: Mode, repeat: int, kind: SkipKind | None,
                   reason: str) -> Transcript:
    """A second turn not sent: a skip of `kind`, or (None) an error (nothing to send: no body was made)."""
    return Transcript(case.id, mode, target.profile, case.endpoint, target.stamp(), {}, repeat=repeat,
                      skip_reason=reason if kind else None, skip_kind=kind, transport_error=None if kind else reason)


def judged_with_known_refusal(checks: list[Check], transcript: Transcript, known: KnownRefusal) -> list[Check]:
    """The checks of a mode whose refusal the profile declares: while the server refuses it so, the refusal is
    a `known_refusal` finding instead of a failure; once it accepts it, the declaration fails as stale."""
    if transcript.skip_reason is not None or transcript.transport_error is not None or not set(known.fields) <= set(
            reasoning_fields_sent(transcript.request)):
        return checks  # not sent, or without what the server refuses
    declared = f"{known.reason} ({known.link})"
    if transcript.status == known.status and known.message in error_text(transcript.error_body):
        return [check for check in checks if check.name != "http_status"] + [
            Check("known_refusal", FAIL, FINDING, reason=f"a declared bug of the server: {declared}")]
    if transcript.status is not None and transcript.status < 400:
        return [*checks, Check("known_refusal", FAIL, reason=f"the declared refusal no longer happens, the "
                               f"declaration is stale: {declared}")]
    return checks


def judge_second_turn(case: Case, transcript: Transcript, markers: Sequence[str]) -> list[Check]:
    """A second turn's checks: the answer (accepted, forced, judged against the second turn's reference)
    and the prompt the server rendered for it."""
    checks = judge(turn2_case(case, transcript.request or case.request), transcript, markers=markers)
    if (known := next((r for r in profile_record(transcript.profile).known_refusals
                       if r.mode == transcript.mode), None)) is not None:
        checks = judged_with_known_refusal(checks, transcript, known)
    if transcript.skip_reason is None and transcript.status == 200:
        checks.append(check_turn2_prompt(transcript, profile_record(transcript.profile).reasoning_input_fields,
                                         case.written_turn))
    return checks
