"""Contract checks: the client contract every response must keep (transport, stream framing,
tool-call deltas, call shape, valid JSON arguments, arguments against the tool's schema, no leaked
template markers, the stream equal to the non-stream answer). Pure functions to one `Check` each."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.record.outcomes import CONTRACT, ERROR, FAIL, FINDING, PASS, SCHEMA, SKIP, Check
from conformance.record.server_rules import ServerRule, normalized
from conformance.record.transcript import Transcript
from conformance.record.wire import (
    RESPONSES_TERMINAL_EVENTS,
    VIEW_FIELDS,
    Message,
    StreamReading,
    error_text,
    message_view,
    response_message,
)
from conformance.run.checks.shape import shape_failure, shape_problems
from conformance.util.json_codec import parse_json
from conformance.util.json_values import json_equal

# Refusals a server gives after reading the request: a contract matter (an unpredicted one fails).
# Any other 4xx is about the setup (auth, unknown model or path, rate limit, proxy): an `error`.
CONTRACT_REFUSAL_STATUSES = frozenset({400, 422})
NO_ROUTE_STATUSES = frozenset({404, 405})


def check_transport(transcript: Transcript, reading: StreamReading | None, expected_status: int | None = None) -> Check:
    """Did a judgeable response arrive? Anything else is an infrastructure `error`, never a pass:
    no answer, 5xx, and a 4xx that is neither a contract refusal (400, 422) nor `expected_status`
    (the status the case's expectation names). A stream whose JSON is nested deeper than the reader's
    bound, or an answer of the wrong shape, is the server's fault: a `response_shape` fail."""
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
        if reading.too_deep_lines:
            return shape_failure(shape_problems(transcript))
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
            differing = [key for key in final if not json_equal(deltas[key], final[key])]
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
            parse_json(call.arguments or "")
        except json.JSONDecodeError as exc:
            problems.append(f"call {index} ({call.name}): arguments are not valid JSON ({exc.msg}): "
                            f"{(call.arguments or '')[:200]!r}")
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
            arguments = parse_json(call.arguments or "")
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


def check_marker_leaks(message: Message, expected: Mapping[str, Any] | None, markers: Sequence[str],
                       reference: Mapping[str, Any] | None = None, deviation: str | None = None) -> Check:
    """No template delimiter in content or reasoning, unless the case expects it there. With `deviation` (the
    expected answer is a declared bug's), a delimiter that only the bug's answer has, not the format's parse
    (`reference`), is still a leak: reported as that bug's finding, never passed."""
    if leaks := _leaks(message, expected, markers):
        return Check("marker_leak", FAIL, reason="template markers leaked: " + ", ".join(leaks))
    if deviation and reference is not None and (leaks := _leaks(message, reference, markers)):
        return Check("marker_leak", FAIL, FINDING, reason="template markers leaked: " + ", ".join(leaks)
                     + f" (the format's parse has none there; a declared bug of the server: {deviation})")
    return Check("marker_leak", PASS)


def _leaks(message: Message, allowed_in: Mapping[str, Any] | None, markers: Sequence[str]) -> list[str]:
    leaks = []
    for name in ("reasoning", "content"):
        text = getattr(message, name) or ""
        allowed = (allowed_in or {}).get(name) or ""
        leaks += [f"{marker!r} in {name}" for marker in markers if marker in text and marker not in allowed]
    return leaks


def compare_views(name: str, kind: str, expected: Mapping[str, Any], actual: Mapping[str, Any], differs: str,
                   same: str = "") -> Check:
    """Fail with the differing keys (expected vs actual, those keys only) unless `actual` matches `expected`
    on every key of `expected` (as JSON values: `true` is not `1`)."""
    differing = [key for key in expected if not json_equal(actual.get(key), expected[key])]
    if differing:
        return Check(name, FAIL, kind, reason=differs + ", ".join(differing),
                     expected={key: expected[key] for key in differing},
                     actual={key: actual.get(key) for key in differing})
    return Check(name, PASS, kind, reason=same)


def check_stream_equals_non_stream(
    stream: Message, non_stream: Message, skip_fields: set[str], rules: Sequence[ServerRule] = ()
) -> Check:
    """The reassembled stream against the non-streaming message, but for `skip_fields` (a case's known
    differences); with `rules` (a reference-judged case), both compared as the profile's rules normalize them."""
    fields = [f for f in VIEW_FIELDS if f not in skip_fields]
    suffix = f" (known differences skipped: {', '.join(sorted(skip_fields))})" if skip_fields else ""
    whole, streamed = message_view(non_stream, fields), message_view(stream, fields)
    if rules and not json_equal(whole, streamed):
        whole, streamed = normalized(whole, rules), normalized(streamed, rules)
        suffix += " by the server's documented rules: " + ", ".join(rule.name for rule in rules)
    return compare_views("stream_equals_non_stream", CONTRACT, whole, streamed,
                          "reassembled stream differs from the non-streaming message in ", "same message" + suffix)
