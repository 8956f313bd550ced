"""Every check on hand-made transcripts, well-formed and broken (fast tier, no server)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.formats.markers import DEFAULT_MARKERS, template_markers
from conformance.record.outcomes import FINDING, SCHEMA
from conformance.record.results import make_result
from conformance.record.transcript import Transcript
from conformance.record.wire import read_stream, response_message
from conformance.run.checks.contract import check_stream_framing
from conformance.run.checks.findings import finding_client_replay, observed_tool_call_streaming
from conformance.run.judge import judge
from tests.engine_helpers import STAMP, error_transcript, load_cases, response_transcript, stream_transcript

CASES_YAML = r"""
- id: one-call
  description: One tool call after reasoning arrives whole under hf with its arguments parsed.
  features: [reasoning, tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        reasoning: "\nplan\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
      tool_call_streaming: whole
- id: raw-args
  description: A call whose arguments are not JSON is expected verbatim, so invalid JSON is no failure here.
  features: [tool_call, malformed_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        tool_calls: [{name: get_weather, arguments_raw: "{bad}"}]
      finish_reason: tool_calls
- id: raw-content
  description: With tool_choice none the tool region comes back as raw content, delimiters included.
  features: [tool_choice_none]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
    tool_choice: none
  force: "x"
  expect:
    hf:
      message: {content: "<tool_call>\n{}\n</tool_call>"}
      finish_reason: stop
- id: refused
  description: A required tool choice is refused with HTTP 400 naming the tool_choice parameter.
  features: [tool_choice_required]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
    tool_choice: required
  force: "x"
  expect:
    hf:
      error: {status: 400, param: tool_choice, message: cannot guarantee required tool choice}
- id: stream-differs
  description: The stream knowingly carries a trailing newline of content that non-streaming drops.
  features: [content, stream]
  request:
    messages: [{role: user, content: ok}]
  force: "x"
  expect:
    hf:
      message: {content: "a"}
      finish_reason: stop
      stream: {content: "a\n"}
- id: string-days
  description: The model passes days as a string; hermes keeps it, which the schema finding reports.
  features: [tool_call, type_coercion]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        tool_calls: [{name: get_weather, arguments: {city: A, days: "3"}}]
      finish_reason: tool_calls
- id: legacy-only
  description: Only the legacy profile has an expectation, so hf gets contract checks and a skip.
  features: [content]
  request:
    messages: [{role: user, content: ok}]
  force: "x"
  expect:
    legacy:
      message: {content: "a"}
      finish_reason: stop
- id: natural-case
  description: A capable model asked for the weather calls the weather tool by itself.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  natural: {expect_tool: get_weather}
  expect:
    hf:
      message: {content: "a"}
      finish_reason: stop
"""

ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}


def delta(d: dict, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def call(index: int | None = 0, name: str | None = "get_weather", arguments: str = '{"city": "Paris"}',
         **extra) -> dict:
    out = {"id": f"chatcmpl-tool-{index}", "type": "function", "function": {"name": name, "arguments": arguments}}
    if index is not None:
        out["index"] = index
    return {**out, **extra}


GOOD_STREAM = [ROLE, delta({"reasoning": "\nplan\n"}), delta({"tool_calls": [call()]}), delta({}, "tool_calls")]
GOOD_MESSAGE = {"reasoning": "\nplan\n", "content": None,
                "tool_calls": [{"id": "x", "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return load_cases(tmp_path_factory.mktemp("cases"), CASES_YAML)


def by_name(checks):
    return {check.name: check for check in checks}


def outcome(case, transcript, companion=None):
    return make_result(case, transcript, judge(case, transcript, companion=companion))


def test_a_well_formed_hf_stream_passes_every_check(cases):
    case = cases["one-call"]
    stream = stream_transcript(GOOD_STREAM, request=case.request)
    non_stream = response_transcript(GOOD_MESSAGE, "tool_calls", request=case.request)
    checks = by_name(judge(case, stream, companion=non_stream))
    assert {n: c.outcome for n, c in checks.items()} == {
        "transport": "pass", "stream_framing": "pass", "tool_call_deltas": "pass", "tool_call_shape": "pass",
        "arguments_json": "pass",
        "marker_leak": "pass", "arguments_schema": "pass", "reasoning_field": "pass", "forced_output": "skip",
        "tool_call_streaming": "pass", "client_replay": "pass", "stream_equals_non_stream": "pass",
        "expected_message": "pass", "expected_tool_call_streaming": "pass", "expected_reasoning_field": "pass",
        "tool_call_delta_keys": "pass", "chunk_choices": "pass",
    }  # fmt: skip
    assert checks["reasoning_field"].actual == "reasoning"
    assert checks["tool_call_streaming"].actual == "whole"
    assert "not verified" in checks["forced_output"].reason  # no token ids were recorded
    assert outcome(case, stream, non_stream).outcome == "pass"
    assert outcome(case, non_stream).outcome == "pass"


@pytest.mark.parametrize(
    ("problems", "finding"), [([], "pass"), (["the output is not the forced text: ..."], "fail"), (None, "skip")]
)
def test_the_forced_output_verification_is_a_finding_that_never_fails_the_case(cases, problems, finding):
    case = cases["one-call"]
    transcript = response_transcript(GOOD_MESSAGE, "tool_calls", request=case.request)
    transcript.forcing_problems = problems
    check = by_name(judge(case, transcript))["forced_output"]
    assert (check.outcome, check.kind) == (finding, "finding")
    assert all(problem in check.reason for problem in problems or [])
    assert outcome(case, transcript).outcome == "pass"


def test_an_unforced_request_has_no_forced_output_finding(cases):
    case = cases["one-call"]
    transcript = response_transcript(GOOD_MESSAGE, "tool_calls", request=case.request)
    transcript.forced = False
    assert "forced_output" not in by_name(judge(case, transcript))


@pytest.mark.parametrize(
    ("chunks", "done", "problem"),
    [
        ([delta({"content": "a"}), delta({}, "stop")], True, "first delta does not carry role"),
        ([ROLE, delta({"role": "assistant", "content": "a"}), delta({}, "stop")], True, "role sent in 2 deltas"),
        ([ROLE, delta({"content": "a"}, "stop"), delta({}, "stop")], True, "2 chunks carry a finish_reason"),
        ([ROLE, delta({"content": "a"})], True, "0 chunks carry a finish_reason"),
        ([ROLE, delta({"content": "a"}, "stop")], False, "no data: [DONE]"),
    ],
)
def test_stream_framing_failures_are_named(cases, chunks, done, problem):
    transcript = stream_transcript(chunks, done=done)
    check = by_name(judge(cases["legacy-only"], transcript))["stream_framing"]
    assert check.outcome == "fail"
    assert problem in check.reason
    assert outcome(cases["legacy-only"], transcript).outcome == "fail"


def test_data_after_done_is_a_framing_failure(cases):
    transcript = stream_transcript([ROLE, delta({"content": "a"}, "stop")])
    transcript.sse.append(type(transcript.sse[0])(data=json_dumps(delta({"content": "late"})), t=1.0))
    check = by_name(judge(cases["legacy-only"], transcript))["stream_framing"]
    assert check.outcome == "fail" and "after [DONE]" in check.reason


def json_dumps(obj) -> str:
    import json

    return json.dumps(obj)


@pytest.mark.parametrize(
    ("tool_chunks", "problem"),
    [
        ([call(index=None)], "without an integer `index`"),
        ([call(index=1)], "indices in order of appearance are [1]"),
        ([call(0), call(2)], "indices in order of appearance are [0, 2]"),
        ([{"index": 0, "function": {"arguments": "{}"}}], "lacks an id, type \"function\", a non-empty name"),
        ([call(name="")], "lacks a non-empty name"),
        ([call(type="custom")], 'lacks type "function"'),
    ],
)
def test_tool_call_delta_failures_are_named(cases, tool_chunks, problem):
    chunks = [ROLE, *(delta({"tool_calls": [c]}) for c in tool_chunks), delta({}, "tool_calls")]
    check = by_name(judge(cases["one-call"], stream_transcript(chunks)))["tool_call_deltas"]
    assert check.outcome == "fail"
    assert problem in check.reason


def test_incremental_arguments_are_reassembled_and_fail_a_whole_expectation(cases):
    head = {"index": 0, "id": "chatcmpl-tool-0", "type": "function", "function": {"name": "get_weather"}}
    pieces = [{"index": 0, "function": {"arguments": p}} for p in ('{"city"', ': "Par', 'is"}')]
    chunks = [ROLE, delta({"reasoning": "\nplan\n"}), *(delta({"tool_calls": [c]}) for c in [head, *pieces]),
              delta({}, "tool_calls")]
    checks = by_name(judge(cases["one-call"], stream_transcript(chunks)))
    assert read_stream(stream_transcript(chunks)).message.tool_calls[0].arguments == '{"city": "Paris"}'
    assert checks["tool_call_deltas"].outcome == "pass"
    assert checks["expected_message"].outcome == "pass"
    assert checks["tool_call_streaming"].actual == "incremental"
    assert checks["expected_tool_call_streaming"].outcome == "fail"
    assert "streamed incremental, expected whole" in checks["expected_tool_call_streaming"].reason


def test_invalid_json_arguments_fail_unless_the_case_expects_them_raw(cases):
    chunks = [ROLE, delta({"tool_calls": [call(arguments="{bad}")]}), delta({}, "tool_calls")]
    one_call = by_name(judge(cases["one-call"], stream_transcript(chunks)))
    assert one_call["arguments_json"].outcome == "fail"
    assert "'{bad}'" in one_call["arguments_json"].reason
    raw = judge(cases["raw-args"], stream_transcript(chunks))
    assert by_name(raw)["arguments_json"].outcome == "pass"
    assert by_name(raw)["expected_message"].outcome == "pass"


def test_schema_violations_are_findings_that_do_not_fail_the_case(cases):
    message = {**GOOD_MESSAGE, "tool_calls": [{"id": "x", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris", "days": "3"}'}}]}  # fmt: skip
    transcript = response_transcript(message, "tool_calls", request=cases["one-call"].request)
    checks = by_name(judge(cases["one-call"], transcript))
    assert checks["arguments_schema"].kind == SCHEMA
    assert checks["arguments_schema"].outcome == "fail"
    assert "days: '3' is not of type 'integer'" in checks["arguments_schema"].reason
    assert checks["expected_message"].outcome == "fail"  # the expectation itself still compares values
    unknown = {**GOOD_MESSAGE, "tool_calls": [{"id": "x", "type": "function",
                                               "function": {"name": "nope", "arguments": "{}"}}]}
    check = by_name(judge(cases["one-call"], response_transcript(unknown, "tool_calls")))["arguments_schema"]
    assert "'nope' is not one of the request's tools" in check.reason


def test_schema_finding_alone_keeps_the_result_a_pass(cases):
    message = {"tool_calls": [{"id": "x", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "A", "days": "3"}'}}]}  # fmt: skip
    result = outcome(cases["string-days"], response_transcript(message, "tool_calls"))
    assert by_name(result.checks)["arguments_schema"].outcome == "fail"
    assert result.outcome == "pass"


def test_a_profile_without_expectation_gets_contract_checks_then_a_skip(cases):
    chunks = [ROLE, delta({"content": "a"}, "stop")]
    transcript = stream_transcript(chunks)
    result = outcome(cases["legacy-only"], transcript)
    assert result.outcome == "skip"  # no hf expectation: contract checks ran, the expectation is skipped
    assert "no expectation for profile hf" in result.reason


def test_markers_in_content_leak_unless_expected(cases):
    leaked = response_transcript({"content": "a</think>b"}, "stop")
    check = by_name(judge(cases["legacy-only"], leaked))["marker_leak"]
    assert check.outcome == "fail" and "'</think>' in content" in check.reason
    raw = response_transcript({"content": "<tool_call>\n{}\n</tool_call>"}, "stop")
    checks = by_name(judge(cases["raw-content"], raw))
    assert checks["marker_leak"].outcome == "pass"
    assert checks["expected_message"].outcome == "pass"
    reasoning_leak = response_transcript({"content": "<tool_call>\n{}\n</tool_call>", "reasoning": "<think>x"}, "stop")
    check = by_name(judge(cases["raw-content"], reasoning_leak))["marker_leak"]
    assert check.outcome == "fail" and "'<think>' in reasoning" in check.reason


def test_markers_come_from_the_checkpoint_template():
    template = {"fields": {"thinking": {"open": "<|think|>", "close": ["<|/think|>", "</t>"]},
                           "tool_calls": {"open_pattern": "\\s*<call>", "close": "</call>"}, "content": {}}}
    assert template_markers(template) == ("<|think|>", "<|/think|>", "</t>", "</call>", "<call>")
    transformers_qwen3 = {"fields": {
        "tool_calls": {"open_pattern": r"\s*<tool_call>", "close_pattern": r"</tool_call>\s*"},
        "content": {"close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)"},  # alternation: no literal
        "thinking": {"open_pattern": r"<think>\d+"},  # a character class: no literal
        "x": {"open_pattern": r"<\|tool\|>"}}}  # fmt: skip
    assert template_markers(transformers_qwen3) == ("<tool_call>", "</tool_call>", "<|tool|>")
    assert template_markers(None) == DEFAULT_MARKERS


def test_stream_that_differs_from_non_stream_fails_unless_overridden(cases):
    stream = stream_transcript([ROLE, delta({"content": "a\n"}), delta({}, "stop")])
    non_stream = response_transcript({"content": "a"}, "stop")
    overridden = by_name(judge(cases["stream-differs"], stream, companion=non_stream))
    assert overridden["stream_equals_non_stream"].outcome == "pass"
    assert "known differences skipped: content" in overridden["stream_equals_non_stream"].reason
    assert overridden["expected_message"].outcome == "pass"  # the stream override is the stream's expectation
    plain = by_name(judge(cases["legacy-only"], stream, companion=non_stream))["stream_equals_non_stream"]
    assert plain.outcome == "fail"
    assert plain.expected == {"content": "a"} and plain.actual == {"content": "a\n"}


def test_reasoning_content_field_is_recorded_as_a_finding(cases):
    transcript = stream_transcript([ROLE, delta({"reasoning_content": "r"}), delta({"content": "a"}, "stop")])
    check = by_name(judge(cases["legacy-only"], transcript))["reasoning_field"]
    assert (check.kind, check.actual) == (FINDING, "reasoning_content")
    assert read_stream(transcript).message.reasoning == "r"


def test_client_replay_reports_where_the_openai_client_breaks(cases):
    # A call at index 1 with no index 0: our reassembly keeps it, openai's accumulator cannot.
    chunks = [ROLE, delta({"tool_calls": [call(index=1)]}), delta({}, "tool_calls")]
    check = by_name(judge(cases["one-call"], stream_transcript(chunks, request=cases["one-call"].request)))
    assert check["client_replay"].kind == FINDING
    assert check["client_replay"].outcome == "fail"
    assert "openai client raised IndexError" in check["client_replay"].reason


def test_expected_refusal(cases):
    case = cases["refused"]
    body = {"error": {"message": "response_template parsing cannot guarantee required tool choice without a "
                      "format-compatible structural grammar (parameter=tool_choice)", "param": "tool_choice",
                      "type": "BadRequestError", "code": 400}}
    assert outcome(case, error_transcript(400, body)).outcome == "pass"
    wrong_param = {"error": {**body["error"], "param": "tools"}}
    result = outcome(case, error_transcript(400, wrong_param))
    assert result.outcome == "fail" and "param 'tools' != 'tool_choice'" in result.reason
    accepted = outcome(case, response_transcript({"content": "a"}, "stop"))
    assert accepted.outcome == "fail" and "the request was accepted, expected a refusal" in accepted.reason
    both = by_name(judge(case, error_transcript(400, body, mode="stream"), companion=error_transcript(400, body)))
    assert both["stream_equals_non_stream"].outcome == "pass"


def test_an_unexpected_refusal_fails(cases):
    result = outcome(cases["one-call"], error_transcript(400, {"error": {"message": "nope", "param": None}}))
    assert result.outcome == "fail" and "refused with HTTP 400: nope" in result.reason


@pytest.mark.parametrize(
    ("transcript", "reason"),
    [
        (Transcript("c", "stream", "hf", "chat", STAMP, {}, transport_error="connection failed: ConnectError"),
         "connection failed"),
        (error_transcript(500, {"error": {"message": "boom"}}), "HTTP 500: boom"),
        (stream_transcript([ROLE, "{not json", delta({}, "stop")]), "invalid SSE: data line 2 is not JSON"),
        (stream_transcript([ROLE, {"error": {"message": "engine died", "code": 500}}]),
         "error inside the stream: engine died"),
        (Transcript("c", "non-stream", "hf", "chat", STAMP, {}, status=200, response={"choices": []}),
         "no choices[0].message"),
    ],
)
def test_infrastructure_problems_are_errors_never_passes(cases, transcript, reason):
    result = outcome(cases["one-call"], transcript)
    assert result.outcome == "error"
    assert reason in result.reason


def test_a_request_that_was_not_sent_is_skipped(cases):
    transcript = Transcript("c", "stream", "hf", "chat", STAMP, {}, skip_reason="server cannot force outputs")
    result = outcome(cases["one-call"], transcript)
    assert (result.outcome, result.reason) == ("skip", "server cannot force outputs")


def test_natural_mode_counts_a_missing_call_as_a_model_miss(cases):
    case = cases["natural-case"]
    miss = response_transcript({"content": "I cannot check the weather."}, "stop")
    miss.natural = True
    result = outcome(case, miss)
    assert (result.outcome, result.model_miss) == ("skip", True)
    assert "model miss: no call to get_weather" in result.reason
    hit = response_transcript(GOOD_MESSAGE, "tool_calls", request=case.request)
    hit.natural = True
    assert outcome(case, hit).outcome == "pass"  # the hf expectation does not apply in natural mode


def test_responses_api_output_items_map_to_the_message_shape():
    response = {"status": "completed", "output": [
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "plan"}]},
        {"type": "message", "content": [{"type": "output_text", "text": "Hi"}]},
        {"type": "function_call", "name": "get_weather", "arguments": '{"city": "A"}', "call_id": "c1"},
    ]}  # fmt: skip
    transcript = Transcript("c", "non-stream", "hf", "responses", STAMP, {}, status=200, response=response)
    message = response_message(transcript)
    assert (message.reasoning, message.content, message.finish_reason) == ("plan", "Hi", "completed")
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("get_weather", '{"city": "A"}')]
    events = [
        {"type": "response.created"},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning"}},
        {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "pl"},
        {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "an"},
        {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message"}},
        {"type": "response.output_text.delta", "output_index": 1, "delta": "Hi"},
        {"type": "response.output_item.added", "output_index": 2,
         "item": {"type": "function_call", "name": "get_weather", "call_id": "c1", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"city": '},
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '"A"}'},
        {"type": "response.completed", "response": response},
    ]  # fmt: skip
    stream = stream_transcript(events, done=False, endpoint="responses")
    reading = read_stream(stream)
    assert (reading.message.reasoning, reading.message.content) == ("plan", "Hi")
    assert reading.message.tool_calls == message.tool_calls
    assert observed_tool_call_streaming(reading) == "incremental"
    assert check_stream_framing(reading, "responses").outcome == "pass"
    # deltas that do not add up to the final response are a framing failure
    lost_delta = stream_transcript([e for e in events if e.get("delta") != "Hi"], done=False, endpoint="responses")
    check = check_stream_framing(read_stream(lost_delta), "responses")
    assert check.outcome == "fail"
    assert "deltas add up to a different message than the final response in content (None vs 'Hi')" in check.reason
    no_terminal = stream_transcript(events[:-1], done=False, endpoint="responses")
    assert "0 terminal events" in check_stream_framing(read_stream(no_terminal), "responses").reason
    incomplete = {**response, "status": "incomplete"}
    transcript.response = incomplete
    assert response_message(transcript).finish_reason == "incomplete"


def test_a_refusal_is_judged_in_natural_mode_too(cases):
    body = {"error": {"message": "cannot guarantee required tool choice", "param": "tool_choice"}}
    refused = error_transcript(400, body)
    refused.natural = True
    assert outcome(cases["refused"], refused).outcome == "pass"
    accepted = response_transcript({"content": "a"}, "stop")
    accepted.natural = True
    assert outcome(cases["refused"], accepted).outcome == "fail"


def test_client_replay_of_a_length_cut_stream_compares_the_accumulated_message(cases):
    # openai's get_final_completion() always raises on finish_reason length; the snapshot is what clients see.
    chunks = [ROLE, delta({"content": "Hello"}), delta({"content": " th"}, "length")]
    check = by_name(judge(cases["legacy-only"], stream_transcript(chunks)))["client_replay"]
    assert check.outcome == "pass", check.reason


def test_a_wrong_shape_fails_and_a_bug_of_ours_is_an_error_not_a_crash(cases, monkeypatch):
    from conformance.run import engine

    weird = stream_transcript([ROLE, {"choices": [{"index": 0, "delta": {"content": 42}}]}])
    (result,) = engine.judge_group(cases["legacy-only"], {"stream": weird}, DEFAULT_MARKERS)
    assert (result.outcome, result.reason) == ("fail", "response_shape: the answer does not have the API's shape: "
                                               "data line 2: choices[0].delta.content: 42 is not of type string or null")

    def broken_judge(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(engine, "judge", broken_judge)
    fine = stream_transcript([ROLE, {"choices": [{"index": 0, "delta": {"content": "hi"}}]}])
    (result,) = engine.judge_group(cases["legacy-only"], {"stream": fine}, DEFAULT_MARKERS)
    assert (result.outcome, result.reason) == ("error", "judge: internal error while judging: KeyError: 'a bug'")


def test_tool_call_shape_in_a_whole_message(cases):
    two = {"tool_calls": [{"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                          {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}
    check = by_name(judge(cases["legacy-only"], response_transcript(two, "tool_calls")))["tool_call_shape"]
    assert check.outcome == "fail" and "tool call ids repeat: ['a', 'a']" in check.reason
    bare = {"tool_calls": [{"function": {"name": "", "arguments": "{}"}}]}
    check = by_name(judge(cases["legacy-only"], response_transcript(bare, "tool_calls")))["tool_call_shape"]
    assert check.reason == 'call 0 lacks an id, type "function", a non-empty name'
    good = by_name(judge(cases["one-call"], response_transcript(GOOD_MESSAGE, "tool_calls")))
    assert good["tool_call_shape"].outcome == "pass"


def test_responses_streams_are_replayed_through_the_openai_client_too():
    final = {"id": "resp_1", "object": "response", "status": "completed", "output": [
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": '{"city": "A"}', "call_id": "c1",
         "status": "completed"},
    ]}  # fmt: skip
    events = [
        {"type": "response.created", "response": {**final, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hi"},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {"type": "function_call", "id": "fc_1", "name": "get_weather", "call_id": "c1", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"city": "A"}'},
        {"type": "response.completed", "response": final},
    ]  # fmt: skip
    stream = stream_transcript(events, done=False, endpoint="responses")
    check = finding_client_replay(stream, read_stream(stream))
    assert (check.outcome, check.reason) == ("pass", "openai client rebuilds the same message")
    # the final response disagrees with the deltas: the client (which keeps the final one) sees other arguments
    changed = {**final, "output": [final["output"][0], {**final["output"][1], "arguments": '{"city": "B"}'}]}
    stream = stream_transcript(events[:-1] + [{"type": "response.completed", "response": changed}], done=False,
                               endpoint="responses")
    check = finding_client_replay(stream, read_stream(stream))
    assert (check.outcome, check.actual) == ("fail", {"tool_calls": [
        {"name": "get_weather", "arguments": {"json": {"city": "B"}}}]})
    # an incomplete response: client.responses.stream().get_final_response() raises
    incomplete = stream_transcript(events[:-1] + [{"type": "response.incomplete", "response": {
        **final, "status": "incomplete"}}], done=False, endpoint="responses")
    check = finding_client_replay(incomplete, read_stream(incomplete))
    assert check.outcome == "fail" and "Didn't receive a `response.completed` event" in check.reason


def preflight_transcript(status: int | None, headers: dict[str, str], body: str = "",
                         transport_error: str | None = None) -> Transcript:
    request = {"path": "/chat/completions", "origin": "http://localhost:3000", "method": "POST"}
    response = {"headers": headers, "body": body} if status is not None else None
    return Transcript("p", "non-stream", "hf", "preflight", STAMP, request, forced=False, status=status,
                      response=response, transport_error=transport_error)


def test_a_preflight_is_judged_on_status_headers_and_body(tmp_path) -> None:
    case = load_cases(tmp_path, """
- id: p
  description: A preflight from an unlisted origin is refused and carries no allow-origin header.
  features: [cors]
  endpoint: preflight
  request: {origin: "http://localhost:3000", method: POST}
  expect:
    hf: {preflight: {status: 400, body: Disallowed, headers: {access-control-allow-origin: null, vary: Origin}}}
""")["p"]
    refused = {"vary": "Origin", "content-type": "text/plain"}
    checks = judge(case, preflight_transcript(400, refused, "Disallowed CORS origin"))
    assert [(c.name, c.outcome) for c in checks] == [("transport", "pass"), ("expected_preflight", "pass")]
    allowed = {"vary": "Origin", "access-control-allow-origin": "http://localhost:3000"}
    check = judge(case, preflight_transcript(200, allowed, "OK"))[-1]
    assert check.outcome == "fail"
    assert check.reason == ("status 200 != 400; header access-control-allow-origin: 'http://localhost:3000', "
                            "expected none; body does not contain 'Disallowed'")
    assert check.actual == {"status": 200, "body": "OK", "headers": {
        "access-control-allow-origin": "http://localhost:3000", "vary": "Origin"}}
    no_vary = judge(case, preflight_transcript(400, {}, "Disallowed CORS origin"))[-1]
    assert (no_vary.outcome, no_vary.reason) == ("fail", "header vary: None, expected 'Origin'")
    broken = judge(case, preflight_transcript(None, {}, transport_error="connection failed: refused"))
    assert [(c.name, c.outcome, c.reason) for c in broken] == [("transport", "error", "connection failed: refused")]
    legacy = judge(case, replace(preflight_transcript(400, refused), profile="legacy"))
    assert [(c.name, c.outcome) for c in legacy] == [("transport", "pass"), ("expectation", "skip")]


def test_a_template_without_literal_delimiters_is_checked_for_none_of_another_formats() -> None:
    only_patterns = {"fields": {"thinking": {"open_pattern": "(?:<a>|<b>)", "close_pattern": "</[ab]>"}, "content": {}}}
    assert template_markers(only_patterns) == ()
