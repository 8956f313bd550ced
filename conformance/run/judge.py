"""Judging: every check that applies to one transcript (`conformance.run.checks`, `client_keys`,
`checks_usage`), chosen by the case, its expectation for the profile, the mode and the endpoint.
Pure: recorded transcripts in, `Check`s out, so a run can be judged again offline."""

from __future__ import annotations

from collections.abc import Sequence

from conformance.formats.markers import DEFAULT_MARKERS
from conformance.record.case_model import Case, Expectation, Mode, is_stream, tokens_per_delta
from conformance.record.outcomes import ERROR, EXPECTATION, FAIL, FINDING, PASS, SKIP, Check
from conformance.record.transcript import Transcript
from conformance.record.wire import Message, error_object, error_text, read_stream, response_message
from conformance.run.checks.client_keys import client_key_checks
from conformance.run.checks.contract import (
    NO_ROUTE_STATUSES,
    check_arguments_json,
    check_arguments_schema,
    check_marker_leaks,
    check_stream_equals_non_stream,
    check_stream_framing,
    check_tool_call_deltas,
    check_tool_call_shape,
    check_transport,
)
from conformance.run.checks.expectations import (
    check_expected_error,
    check_expected_message,
    check_expected_streaming,
    check_natural,
    expected_view,
    view_of,
)
from conformance.run.checks.findings import (
    finding_client_replay,
    finding_forced_output,
    finding_reasoning_field,
    finding_tool_call_streaming,
)
from conformance.run.checks.granularity import check_split_invariance
from conformance.run.checks.usage import check_expected_usage
from conformance.servers.forcing import VERIFIED_ENDPOINTS
from conformance.servers.profiles import expectation_chain, expectation_for, profile_record
from conformance.util.json_values import json_equal


def judge(
    case: Case,
    transcript: Transcript,
    *,
    companion: Transcript | None = None,
    markers: Sequence[str] = DEFAULT_MARKERS,
    one_token_stream: Transcript | None = None,
) -> list[Check]:
    """Every check that applies to one transcript. `companion` is the non-streaming transcript of the
    same case/profile/repeat, used to judge a stream against it; `one_token_stream` its one-token
    stream, which a granular stream (`stream@N`) must reassemble to."""
    if transcript.skip_reason:
        return [Check("request", SKIP, reason=transcript.skip_reason,
                      skip_kind=transcript.skip_kind or "cannot_force")]  # recordings before skip kinds
    expectation = expectation_for(case, transcript.profile)
    if expectation is not None and expectation.skip is not None:
        return [Check("expectation", SKIP, EXPECTATION, reason=f"declared: {expectation.skip}", skip_kind="declared")]
    if transcript.endpoint == "preflight":
        return judge_preflight(case, transcript)
    named = expectation is not None and expectation.error is not None and expectation.error.status == transcript.status
    if _no_responses_api(transcript) and not named:  # a status the expectation names is judged against it
        return [Check("responses_api", SKIP, reason=f"the server has no Responses API: HTTP {transcript.status}: "
                      f"{error_text(transcript.error_body)}", skip_kind="no_responses_api")]
    streaming = is_stream(transcript.mode)
    reading = read_stream(transcript) if streaming else None
    expected_error = expectation.error if expectation is not None else None
    transport = check_transport(transcript, reading, expected_error.status if expected_error else None)
    if transport.outcome == ERROR:
        return [transport]
    checks = [transport]
    refused = transcript.status is not None and transcript.status >= 400

    natural = transcript.natural
    if natural:  # `natural` replaces the expected message; an expected refusal still counts
        expectation = None
    if expected_error is not None:
        checks.append(check_expected_error(transcript, expected_error))
    if refused:
        reason = f"refused with HTTP {transcript.status}: {error_text(transcript.error_body)}"
        if not natural and expectation is None:
            checks.append(Check("expectation", SKIP, EXPECTATION, skip_kind="no_expectation",
                                reason=f"{_no_expectation(transcript.profile)}; {reason}"))
        elif expected_error is None:
            checks.append(Check("http_status", FAIL, reason=reason, expected="2xx", actual=transcript.status))
        if streaming and companion is not None:
            checks.append(_compare_refusals(transcript, companion))
        return checks

    message = reading.message if reading is not None else response_message(transcript)
    assert message is not None  # check_transport guarantees it
    expected = None if natural else expected_view(case, transcript.profile, transcript.mode)
    if reading is not None:
        checks.append(check_stream_framing(reading, transcript.endpoint,
                                           profile_record(transcript.profile).ends_stream_with_done))
        if transcript.endpoint == "chat":
            checks.append(check_tool_call_deltas(reading))
    raw_expected = {i for i, call in enumerate(expected["tool_calls"] if expected else []) if "raw" in call["arguments"]}
    checks.append(check_tool_call_shape(message))
    checks.append(check_arguments_json(message, raw_expected))
    deviation = expectation.deviation if expectation is not None else None
    checks.append(check_marker_leaks(message, expected, markers, view_of(case.reference, transcript.mode), deviation))
    checks.append(check_arguments_schema(message, case.tool_parameters()))
    checks.append(finding_reasoning_field(message))
    if transcript.endpoint == "chat":
        checks += client_key_checks(transcript, message, reading, profile_record(transcript.profile).reasoning_field)
    if transcript.forced and transcript.endpoint in VERIFIED_ENDPOINTS:
        checks.append(finding_forced_output(transcript))
    if reading is not None:
        checks.append(finding_tool_call_streaming(reading))
        checks.append(finding_client_replay(transcript, reading))
        if companion is not None and not natural:  # natural outputs differ between requests
            checks.append(_compare_with_companion(case, transcript, message, companion))
        if tokens_per_delta(transcript.mode) is not None and transcript.endpoint == "chat":
            checks.append(check_split_invariance(transcript.mode, reading, one_token_stream))

    if natural:
        checks.append(check_natural(message, case.natural.expect_tool if case.natural else None))
    elif expectation is None:
        checks.append(Check("expectation", SKIP, EXPECTATION, reason=_no_expectation(transcript.profile),
                            skip_kind="no_expectation"))
    elif expected_error is None and expected is not None:
        rules = profile_record(transcript.profile).rules if expectation.by_reference else ()
        checks.append(check_expected_message(message, expected, rules, expectation.deviation))
        if expectation.deviation and _deviates_in(case, expectation, transcript.mode):
            checks.append(Check("known_deviation", FAIL, FINDING, reason=f"a declared bug of the server, expected: "
                                f"{expectation.deviation}"))
        wanted_streaming = expectation.tool_call_streaming
        if reading is not None and wanted_streaming:
            checks.append(check_expected_streaming(reading, wanted_streaming))
        if expectation.usage:
            checks.append(check_expected_usage(transcript, expectation.usage))
    return checks


def _deviates_in(case: Case, expectation: Expectation, mode: Mode) -> bool:
    """Whether the declared deviation changes the answer (message or finish_reason) in `mode` (it may show in
    one mode only)."""
    return view_of(expectation, mode) != view_of(case.reference, mode)


def _no_expectation(profile: str) -> str:
    """The reason of a `no_expectation` skip, naming the profiles whose expectations were looked for."""
    fallbacks = expectation_chain(profile)[1:]
    return f"no expectation for profile {profile}" + (f" nor its fallbacks {', '.join(fallbacks)}" if fallbacks else "")


def _no_responses_api(transcript: Transcript) -> bool:
    """A 404/405 from /responses that is not about the model: the server has no such route."""
    if transcript.endpoint != "responses" or transcript.status not in NO_ROUTE_STATUSES:
        return False
    error = error_object(transcript.error_body)
    return error.get("param") != "model" and "model" not in str(error.get("message") or error.get("detail") or "").lower()


def judge_preflight(case: Case, transcript: Transcript) -> list[Check]:
    """A CORS preflight: an answer must have come (5xx included: CORS is answered before the app),
    then status, headers and body are compared with the profile's expectation."""
    if transcript.transport_error or transcript.status is None or transcript.response is None:
        return [Check("transport", ERROR, reason=transcript.transport_error or "no HTTP response recorded")]
    checks = [Check("transport", PASS)]
    expectation = expectation_for(case, transcript.profile)
    if expectation is None or expectation.preflight is None:
        return [*checks, Check("expectation", SKIP, EXPECTATION, skip_kind="no_expectation",
                               reason=_no_expectation(transcript.profile))]
    want = expectation.preflight
    headers, body = transcript.response.get("headers") or {}, str(transcript.response.get("body") or "")
    expected = {"status": want.status, "headers": dict(want.headers), "body": want.body}
    actual = {"status": transcript.status, "headers": {name: headers.get(name) for name in want.headers},
              "body": body[:300]}
    problems = [f"status {transcript.status} != {want.status}"] if transcript.status != want.status else []
    for name, value in want.headers.items():
        if headers.get(name) != value:
            problems.append(f"header {name}: {headers.get(name)!r}, expected "
                            + ("none" if value is None else repr(value)))
    if want.body and want.body not in body:
        problems.append(f"body does not contain {want.body!r}")
    outcome, reason = (FAIL, "; ".join(problems)) if problems else (PASS, "")
    return [*checks, Check("expected_preflight", outcome, EXPECTATION, reason=reason, expected=expected,
                           actual=actual)]


def _compare_refusals(stream: Transcript, non_stream: Transcript) -> Check:
    same = stream.status == non_stream.status and json_equal(error_object(stream.error_body).get("param"),
                                                             error_object(non_stream.error_body).get("param"))
    if same:
        return Check("stream_equals_non_stream", PASS, reason=f"both refused with HTTP {stream.status}")
    return Check(
        "stream_equals_non_stream",
        FAIL,
        reason="streaming and non-streaming were refused differently",
        expected={"status": non_stream.status, "error": non_stream.error_body},
        actual={"status": stream.status, "error": stream.error_body},
    )


def _compare_with_companion(case: Case, stream: Transcript, message: Message, companion: Transcript) -> Check:
    if companion.skip_reason or companion.transport_error:
        return Check("stream_equals_non_stream", SKIP, reason="no usable non-streaming transcript to compare")
    if companion.status is not None and companion.status >= 400:
        return Check(
            "stream_equals_non_stream",
            FAIL,
            reason=f"the non-streaming request was refused (HTTP {companion.status}) but the stream was accepted",
        )
    whole = response_message(companion)
    if whole is None:
        return Check("stream_equals_non_stream", SKIP, reason="the non-streaming response has no message")
    expectation = expectation_for(case, stream.profile)
    skip = set(expectation.stream_overrides) if expectation is not None else set()  # keys a stream may differ in
    rules = profile_record(stream.profile).rules if expectation is not None and expectation.by_reference else ()
    return check_stream_equals_non_stream(message, whole, skip, rules)
