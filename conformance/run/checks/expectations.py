"""Expectation checks: the case's expected outcome for the profile (an error, a message, how it
streams) or, in natural mode, the tool call the prompt asks for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from conformance.record.case_model import Case, Expectation, Mode
from conformance.record.outcomes import EXPECTATION, FAIL, PASS, SKIP, Check
from conformance.record.server_rules import ServerRule, normalized
from conformance.record.transcript import Transcript
from conformance.record.wire import Message, StreamReading, empty_text, error_object, message_view
from conformance.run.checks.contract import compare_views
from conformance.run.checks.findings import observed_tool_call_streaming
from conformance.servers.profiles import expectation_for
from conformance.util.json_values import json_equal


def expected_view(case: Case, profile: str, mode: Mode) -> dict[str, Any] | None:
    """The expected message + finish_reason for this profile and mode (stream overrides applied),
    in the shape of `message_view`; None when the profile expects an error or has no expectation."""
    return view_of(expectation_for(case, profile), mode)


def view_of(expectation: Expectation | None, mode: Mode) -> dict[str, Any] | None:
    """`expectation`'s message + finish_reason in `mode`, as `expected_view` gives them."""
    if expectation is None or expectation.error is not None or expectation.skip is not None:
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
    if want["param"] is not None and not json_equal(got["param"], want["param"]):
        problems.append(f"param {got['param']!r} != {want['param']!r}")
    if want["message"] and want["message"] not in str(got["message"] or ""):
        problems.append(f"message does not contain {want['message']!r}")
    if problems:
        return Check("expected_error", FAIL, EXPECTATION, reason="; ".join(problems), expected=want, actual=got)
    return Check("expected_error", PASS, EXPECTATION, expected=want, actual=got)


def check_expected_message(actual: Message, expected: Mapping[str, Any], rules: Sequence[ServerRule] = (),
                           deviation: str | None = None) -> Check:
    """The answer against the expected message; with `rules` (a reference outcome, the profile's documented
    rules), a difference that every rule's normalization of both sides removes passes, naming them. With
    `deviation` (the expected message is a declared bug's), a failure says the bug may be gone."""
    want = {k: v for k, v in expected.items() if not (k == "finish_reason" and v is None)}
    got = message_view(actual)
    exact = compare_views("expected_message", EXPECTATION, want, got, "differs from the expected message in ")
    if deviation and exact.outcome != PASS:
        exact = replace(exact, reason=exact.reason + " (the expected message is a declared bug's: if the answer is "
                        f"now the format's own parse, the bug is fixed and its declaration stale: {deviation})")
    if exact.outcome == PASS or not rules:
        return exact
    within = compare_views("expected_message", EXPECTATION, normalized(want, rules), normalized(got, rules),
                           "differs from the format's own parse in ",
                           same="equal by the server's documented rules: " + ", ".join(rule.name for rule in rules))
    if within.outcome == PASS:
        return within
    return replace(exact, reason=exact.reason + " (the server's documented rules allow none of it: "
                   + ", ".join(rule.name for rule in rules) + ")")


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
