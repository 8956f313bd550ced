"""Checks: pure functions from a recorded answer (its message, stream reading, transcript) to one
`Check` each. No I/O, no server. `conformance.run.judge` runs every check that applies to a transcript.
Kinds:

* `contract`: the client contract every response must keep (stream framing, tool-call deltas,
  valid JSON arguments, no leaked template markers, stream equals non-stream, transport).
* `expectation`: the case's expected outcome for the profile (or, in natural mode, the tool call
  the prompt asks for).
* `schema`: tool arguments validated against the tool's JSON schema. A model choosing wrong
  values is not a parser failure, so a failing schema check never fails the case.
* `finding`: facts clients depend on, recorded for reports and diffs (which reasoning field the
  server uses, how tool calls stream, whether openai-python's own accumulator rebuilds the same
  message). Never fails the case.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from conformance.record.case_model import Case, Mode
from conformance.util.json_codec import parse_json
from conformance.util.locations import format_path
from conformance.servers.profiles import expectation_for
from conformance.run.checks.openai_replay import replay_chat, replay_responses
from conformance.record.transcript import Transcript
from conformance.record.wire import (
    RESPONSES_TERMINAL_EVENTS,
    VIEW_FIELDS,
    Message,
    StreamReading,
    brief_json,
    empty_text,
    error_object,
    error_text,
    message_from_chat_json,
    message_from_responses_json,
    message_view,
    response_message,
)

PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"
CONTRACT, EXPECTATION, SCHEMA, FINDING = "contract", "expectation", "schema", "finding"
BLOCKING_KINDS = (CONTRACT, EXPECTATION)
# Why a result was not judged; only reasons about the server's capabilities or the run's own choices
# (an HTTP error about the setup is an `error`, never a skip). See cases/README.md, "Verdict".
SkipKind = Literal[
    "declared",  # the case's expectation for the profile declares a known skip
    "cannot_force",  # the server cannot force outputs (the forcing probe said why)
    "forcing_off",  # `--forcing off`
    "unforceable_output",  # this case's output cannot be written as a forcing regex
    "no_responses_api",  # the server has no Responses API (404/405 on /responses, not about the model)
    "no_expectation",  # the case has no expectation for this profile
    "model_miss",  # natural mode: the model did not call the tool the prompt asks for
    "other_fixture_variant",  # the case needs another variant of the tiny checkpoint than the run serves
]
SKIP_KINDS: tuple[str, ...] = get_args(SkipKind)


@dataclass(frozen=True)
class Check:
    name: str
    outcome: str  # pass | fail | skip | error
    kind: str = CONTRACT
    reason: str = ""
    expected: Any = None
    actual: Any = None
    skip_kind: SkipKind | None = None  # set on the skip that makes the whole result a skip

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        return cls(**data)


def shape_problems(transcript: Transcript) -> list[str]:
    """Where an answer's JSON departs from the shape the API defines for the parts the checks read
    (schemas/response-shape.schema.json): the clear reason for an answer the checks could not read.
    Empty when the shape is right."""
    responses = transcript.endpoint == "responses"
    if transcript.mode == "stream":
        validator = _shape_validator("responsesEvent" if responses else "chatChunk")
        payloads = []
        for number, line in enumerate(transcript.sse, start=1):
            try:
                payloads.append((f"data line {number}", parse_json(line.data)))
            except json.JSONDecodeError:
                continue  # read_stream reports those
    else:
        validator = _shape_validator("response" if responses else "chatCompletion")
        payloads = [("the response", transcript.response)] if transcript.response is not None else []
    problems = []
    for where, payload in payloads:
        for error in _innermost(validator.iter_errors(payload)):
            at = format_path(list(error.absolute_path))
            if error.validator == "type":
                what = f"{brief_json(error.instance, 60)} is not of type {' or '.join(_list_of(error.validator_value))}"
            else:
                what = f"{brief_json(error.instance, 60)} is not an output item object or null"  # the one anyOf
            problems.append(f"{where}: {at or 'the object'}: {what}")
    return problems


def shape_failure(problems: Sequence[str]) -> Check:
    """The `response_shape` fail for an answer with these `shape_problems` (the first three named)."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return Check("response_shape", FAIL, reason="the answer does not have the API's shape: "
                 + "; ".join(problems[:3]) + more)


def _innermost(errors: Iterable[Any]) -> Iterator[Any]:
    """Schema errors, an `anyOf` replaced by the errors deeper inside its object branch."""
    for error in errors:
        deeper = [sub for sub in error.context or () if len(sub.absolute_path) > len(error.absolute_path)]
        if deeper:
            yield from _innermost(deeper)
        else:
            yield error


@functools.cache
def _shape_validator(definition: str) -> Any:
    import jsonschema

    from conformance.util.package_paths import load_schema

    return jsonschema.Draft202012Validator({**load_schema("response-shape.schema.json"), "$ref": f"#/$defs/{definition}"})


def _list_of(value: Any) -> list[str]:
    return value if isinstance(value, list) else [str(value)]


# --- helpers ------------------------------------------------------------------------------------


def expected_view(case: Case, profile: str, mode: Mode) -> dict[str, Any] | None:
    """The expected message + finish_reason for this profile and mode (stream overrides applied),
    in the shape of `message_view`; None when the profile expects an error or has no expectation."""
    expectation = expectation_for(case, profile)
    if expectation is None or expectation.error is not None:
        return None
    expectation = expectation.for_mode(mode)
    message = expectation.message
    return {
        "reasoning": empty_text(message.reasoning) if message else None,
        "content": empty_text(message.content) if message else None,
        "tool_calls": [_expected_call_view(call) for call in (message.tool_calls if message else ())],
        "finish_reason": expectation.finish_reason,
    }


def _expected_call_view(call: Any) -> dict[str, Any]:
    if call.is_raw:
        return {"name": call.name, "arguments": {"raw": call.arguments_raw}}
    return {"name": call.name, "arguments": {"json": {} if call.arguments is None else call.arguments}}


# --- the checks ---------------------------------------------------------------------------------


# Refusals a server gives after reading the request: a contract matter (an unpredicted one fails).
# Any other 4xx is about the setup (auth, unknown model or path, rate limit, proxy): an `error`.
CONTRACT_REFUSAL_STATUSES = frozenset({400, 422})
NO_ROUTE_STATUSES = frozenset({404, 405})


def check_transport(transcript: Transcript, reading: StreamReading | None, expected_status: int | None = None) -> Check:
    """Did a judgeable response arrive? Anything else is an infrastructure `error`, never a pass:
    no answer, 5xx, and a 4xx that is neither a contract refusal (400, 422) nor `expected_status`
    (the status the case's expectation names)."""
    if transcript.transport_error:
        return Check("transport", ERROR, reason=transcript.transport_error)
    if transcript.status is None:
        return Check("transport", ERROR, reason="no HTTP response recorded")
    status = transcript.status
    if status >= 500 or (status >= 400 and status != expected_status and status not in CONTRACT_REFUSAL_STATUSES):
        return Check("transport", ERROR, reason=f"HTTP {status}: {error_text(transcript.error_body)}")
    if reading is not None:
        if reading.invalid_lines:
            return Check("transport", ERROR, reason="invalid SSE: " + "; ".join(reading.invalid_lines[:3]))
        if reading.stream_error is not None:
            return Check("transport", ERROR, reason=f"error inside the stream: {error_text(reading.stream_error)}")
    elif transcript.status < 400 and response_message(transcript) is None:
        if problems := shape_problems(transcript):  # an answer, of the wrong shape: the server's fault
            return shape_failure(problems)
        return Check("transport", ERROR, reason="the response has no choices[0].message / output")
    return Check("transport", PASS)


def check_stream_framing(reading: StreamReading, endpoint: str, ends_with_done: bool = True) -> Check:
    """Role once, one finish_reason, nothing after [DONE], and `data: [DONE]` at the end, or, for a
    profile whose record says its server ends streams without it (`ends_with_done` False), none."""
    problems = []
    if endpoint == "responses":
        terminal = [i for i, e in enumerate(reading.events) if e.get("type") in RESPONSES_TERMINAL_EVENTS]
        if len(terminal) != 1:
            problems.append(f"{len(terminal)} terminal events (response.completed/incomplete/failed), expected 1")
        elif terminal[0] != len(reading.events) - 1:
            problems.append("events after the terminal event")
        elif reading.final is not None:
            deltas, final = message_view(reading.message), message_view(reading.final)
            differing = [key for key in final if deltas[key] != final[key]]
            if differing:
                problems.append(
                    "the deltas add up to a different message than the final response in "
                    + ", ".join(f"{key} ({deltas[key]!r} vs {final[key]!r})" for key in differing)
                )
    else:
        role_chunks = [i for i, c in enumerate(reading.chunks) if _delta(c).get("role")]
        if not reading.chunks or _delta(reading.chunks[0]).get("role") != "assistant":
            problems.append("the first delta does not carry role 'assistant'")
        if len(role_chunks) > 1:
            problems.append(f"role sent in {len(role_chunks)} deltas")
        finishes = [c for c in reading.chunks for ch in c.get("choices") or [] if ch.get("finish_reason")]
        if len(finishes) != 1:
            problems.append(f"{len(finishes)} chunks carry a finish_reason, expected exactly 1")
        if not reading.done and ends_with_done:
            problems.append("no data: [DONE]")
        elif reading.done and not ends_with_done:
            problems.append("data: [DONE] arrived, but the profile's record says its server ends streams without it")
    if reading.lines_after_done:
        problems.append(f"{reading.lines_after_done} data line(s) after [DONE]")
    if problems:
        return Check("stream_framing", FAIL, reason="; ".join(problems))
    if endpoint != "responses" and not ends_with_done:
        return Check("stream_framing", PASS, reason="no data: [DONE] (the contract's end of a stream), as recorded "
                     "for this profile: its server just closes the stream")
    return Check("stream_framing", PASS)


def _delta(chunk: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = chunk.get("choices") or []
    return (choices[0].get("delta") or {}) if choices else {}


def check_tool_call_deltas(reading: StreamReading) -> Check:
    """First delta per index: id, type "function", non-empty name; indices 0.. contiguous."""
    problems = list(reading.tool_delta_problems)
    order = list(reading.tool_deltas)  # insertion order = order of first appearance
    if order != list(range(len(order))):
        problems.append(f"indices in order of appearance are {order}, expected 0..{len(order) - 1}")
    for index, deltas in reading.tool_deltas.items():
        first = deltas[0]
        function = first.get("function") or {}
        missing = [
            what
            for what, ok in (
                ("an id", bool(first.get("id"))),
                ('type "function"', first.get("type") == "function"),
                ("a non-empty name", bool(function.get("name"))),
            )
            if not ok
        ]
        if missing:
            problems.append(f"first delta of index {index} lacks {', '.join(missing)}: {json.dumps(first)}")
    if problems:
        return Check("tool_call_deltas", FAIL, reason="; ".join(problems))
    return Check("tool_call_deltas", PASS)


def check_tool_call_shape(message: Message) -> Check:
    """Every call has a non-empty id, type "function" and a non-empty name; ids are distinct."""
    problems = []
    for index, call in enumerate(message.tool_calls):
        missing = [what for what, ok in (("an id", isinstance(call.id, str) and call.id),
                                         ('type "function"', call.type == "function"),
                                         ("a non-empty name", isinstance(call.name, str) and call.name)) if not ok]
        if missing:
            problems.append(f"call {index} lacks {', '.join(missing)}")
    ids = [call.id for call in message.tool_calls if call.id]
    if len(ids) != len(set(ids)):
        problems.append(f"tool call ids repeat: {ids}")
    if problems:
        return Check("tool_call_shape", FAIL, reason="; ".join(problems))
    return Check("tool_call_shape", PASS)


def check_arguments_json(message: Message, raw_expected: set[int]) -> Check:
    problems = []
    for index, call in enumerate(message.tool_calls):
        if index in raw_expected:
            continue  # the case expects these arguments verbatim, not as JSON
        try:
            json.loads(call.arguments or "")
        except json.JSONDecodeError:
            problems.append(f"call {index} ({call.name}): arguments are not valid JSON: {call.arguments!r}")
    if problems:
        return Check("arguments_json", FAIL, reason="; ".join(problems))
    return Check("arguments_json", PASS)


def check_arguments_schema(message: Message, tools: Mapping[str, Mapping[str, Any]]) -> Check:
    """`tools`: each request tool's parameters schema by function name."""
    from jsonschema import validators

    problems = []
    for index, call in enumerate(message.tool_calls):
        tool = tools.get(call.name or "")
        if tool is None:
            problems.append(f"call {index}: {call.name!r} is not one of the request's tools")
            continue
        try:
            arguments = json.loads(call.arguments or "")
        except json.JSONDecodeError:
            continue  # reported by arguments_json
        schema = tool
        validator = validators.validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        for error in errors:
            where = "/".join(map(str, error.path)) or "<root>"
            problems.append(f"call {index} ({call.name}) {where}: {error.message}")
    if not message.tool_calls:
        return Check("arguments_schema", SKIP, SCHEMA, reason="no tool calls")
    if problems:
        return Check("arguments_schema", FAIL, SCHEMA, reason="; ".join(problems))
    return Check("arguments_schema", PASS, SCHEMA)


def check_marker_leaks(message: Message, expected: Mapping[str, Any] | None, markers: Sequence[str]) -> Check:
    """No template delimiter in content or reasoning, unless the case expects it there."""
    leaks = []
    for name in ("reasoning", "content"):
        text = getattr(message, name) or ""
        allowed = (expected or {}).get(name) or ""
        leaks += [f"{marker!r} in {name}" for marker in markers if marker in text and marker not in allowed]
    if leaks:
        return Check("marker_leak", FAIL, reason="template markers leaked: " + ", ".join(leaks))
    return Check("marker_leak", PASS)


def _compare_views(name: str, kind: str, expected: Mapping[str, Any], actual: Mapping[str, Any], differs: str,
                   same: str = "") -> Check:
    """Fail with the differing keys (expected vs actual, those keys only) unless `actual` matches `expected`
    on every key of `expected`."""
    differing = [key for key in expected if actual.get(key) != expected[key]]
    if differing:
        return Check(name, FAIL, kind, reason=differs + ", ".join(differing),
                     expected={key: expected[key] for key in differing},
                     actual={key: actual.get(key) for key in differing})
    return Check(name, PASS, kind, reason=same)


def check_stream_equals_non_stream(
    stream: Message, non_stream: Message, skip_fields: set[str]
) -> Check:
    fields = [f for f in VIEW_FIELDS if f not in skip_fields]
    suffix = f" (known differences skipped: {', '.join(sorted(skip_fields))})" if skip_fields else ""
    return _compare_views("stream_equals_non_stream", CONTRACT, message_view(non_stream, fields),
                          message_view(stream, fields),
                          "reassembled stream differs from the non-streaming message in ", "same message" + suffix)


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
    return _compare_views("client_replay", FINDING, message_view(reading.message), message_view(replayed),
                          "openai client rebuilds a different message: ", "openai client rebuilds the same message")


def check_expected_error(transcript: Transcript, expected_error: Any) -> Check:
    want = {"status": expected_error.status, "param": expected_error.param, "message": expected_error.message}
    if transcript.status is None or transcript.status < 400:
        return Check("expected_error", FAIL, EXPECTATION, reason="the request was accepted, expected a refusal",
                     expected=want, actual={"status": transcript.status})
    error = error_object(transcript.error_body)
    got = {"status": transcript.status, "param": error.get("param"), "message": error.get("message") or error.get("detail")}
    problems = []
    if want["status"] is not None and got["status"] != want["status"]:
        problems.append(f"status {got['status']} != {want['status']}")
    if want["param"] is not None and got["param"] != want["param"]:
        problems.append(f"param {got['param']!r} != {want['param']!r}")
    if want["message"] and want["message"] not in str(got["message"] or ""):
        problems.append(f"message does not contain {want['message']!r}")
    if problems:
        return Check("expected_error", FAIL, EXPECTATION, reason="; ".join(problems), expected=want, actual=got)
    return Check("expected_error", PASS, EXPECTATION, expected=want, actual=got)


def check_expected_message(actual: Message, expected: Mapping[str, Any]) -> Check:
    want = {k: v for k, v in expected.items() if not (k == "finish_reason" and v is None)}
    return _compare_views("expected_message", EXPECTATION, want, message_view(actual),
                          "differs from the expected message in ")


def check_expected_streaming(reading: StreamReading, expected: str) -> Check:
    observed = observed_tool_call_streaming(reading)
    if observed in ("none", expected):
        return Check("expected_tool_call_streaming", PASS, EXPECTATION, expected=expected, actual=observed)
    return Check(
        "expected_tool_call_streaming",
        FAIL,
        EXPECTATION,
        reason=f"tool calls streamed {observed}, expected {expected}",
        expected=expected,
        actual=observed,
    )


def check_natural(message: Message, expect_tool: str | None) -> Check:
    """Natural mode: did the model call the tool the prompt asks for? A miss is the model's, not the parser's."""
    names = [call.name for call in message.tool_calls]
    if expect_tool is None:
        return Check("natural", PASS, EXPECTATION, reason="no tool call asked for", actual=names)
    if expect_tool in names:
        return Check("natural", PASS, EXPECTATION, expected=expect_tool, actual=names)
    return Check("natural", SKIP, EXPECTATION, reason=f"model miss: no call to {expect_tool}", expected=expect_tool,
                 actual=names, skip_kind="model_miss")


# --- putting it together -------------------------------------------------------------------------
