"""The second turn without a server: what each hand-written rebuilder sends back, the turn-1 answer it can
answer, the case linter's rules, the second turn rendered in every shipped format, the prompt check over
recorded renderings, and the gate's `multi_turn` difference. The real servers and clients:
tests/test_second_turn_live.py."""

from __future__ import annotations

import copy
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.compare.diff import Pair, diff_pair
from conformance.formats.registry import FORMATS
from conformance.record.case_model import (
    SECOND_TURN_FEATURE,
    ExpectedMessage,
    ExpectedToolCall,
    mode_order,
    rebuilder_of,
    second_turn_mode,
)
from conformance.record.outcomes import CONTRACT, ERROR, FAIL, FINDING, PASS, SKIP
from conformance.record.results import make_result
from conformance.record.transcript import ServerStamp, Transcript
from conformance.run.checks.second_turn import check_turn2_prompt
from conformance.run.engine import request_count, second_turn_modes
from conformance.run.second_turn import (
    REASONING_REBUILDERS,
    TurnJob,
    first_turn_job,
    reference_conversations,
    turn2_request,
)
from conformance.suite.cases import check_suite, load_suite
from tests.engine_helpers import WEATHER_TOOL

CALL = {"id": "call-1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}}
ANSWER = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": None, "reasoning": "I need the weather.", "tool_calls": [CALL]}}]}
REQUEST = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object"}}}], "max_tokens": 100, "temperature": 0}


def _job() -> TurnJob:
    return TurnJob("k", copy.deepcopy(REQUEST), ANSWER, ('{"forecast": "sun"}',))


@pytest.mark.parametrize(("name", "fields"), [("reasoning", ["reasoning"]), ("reasoning_content", ["reasoning_content"]),
                                             ("both-reasoning-fields", ["reasoning", "reasoning_content"]),
                                             ("no-reasoning", [])])
def test_hand_written_rebuilders_send_the_reasoning_where_they_say(name: str, fields: list[str]) -> None:
    body = REASONING_REBUILDERS[name]([_job()])["k"].body
    assert body is not None
    user, assistant, tool = body["messages"]
    assert user == REQUEST["messages"][0]
    assert [key for key in ("reasoning", "reasoning_content") if key in assistant] == fields
    assert all(assistant[key] == "I need the weather." for key in fields)
    assert assistant["tool_calls"] == [CALL] and assistant["content"] is None
    assert tool == {"role": "tool", "tool_call_id": "call-1", "content": '{"forecast": "sun"}'}
    assert body["tools"] == REQUEST["tools"] and body["max_tokens"] == 100


def test_a_turn_2_body_gets_the_run_controls_its_client_left_out() -> None:
    case = _loaded_case()
    body = turn2_request(case, {"messages": [], "max_tokens": 7})
    assert body["max_tokens"] == 7 and body["temperature"] == case.request["temperature"]


def _loaded_case(case_id: str = "turn-reasoning-then-call"):
    return next(case for case in load_suite() if case.id == case_id)


def _first(status: int = 200, response=ANSWER) -> Transcript:
    return Transcript("turn-reasoning-then-call", "non-stream", "hf", "chat", ServerStamp("u", "m", "hf"), {},
                      status=status, response=response if status == 200 else None)


def test_only_a_completion_with_as_many_calls_as_results_is_answered() -> None:
    case = _loaded_case()
    assert isinstance(first_turn_job(case, _first()), TurnJob)
    assert "HTTP 400" in first_turn_job(case, _first(400))
    assert "no answer" in first_turn_job(case, None)
    two = copy.deepcopy(ANSWER)
    two["choices"][0]["message"]["tool_calls"] = [CALL, CALL]
    assert "2 well-formed tool call(s); the second turn answers 1" in first_turn_job(case, _first(response=two))
    for shape in ({"choices": {"0": {}}}, {"choices": [{"message": {"tool_calls": ["x"]}}]},
                  {"choices": [{"message": {"tool_calls": [{"function": "f"}]}}]}, {"choices": 3}):
        assert "0 well-formed tool call(s)" in first_turn_job(case, _first(response=shape)), shape  # never raises
    unforced = _first()
    unforced.forcing_problems = ["the output is not the forced text"]
    assert "not the forced text" in first_turn_job(case, unforced)


def test_shipped_second_turns_are_sent_per_rebuilder_after_every_other_mode() -> None:
    cases = [case for case in load_suite() if case.second_turn is not None]
    assert {case.id for case in cases} >= {"turn-reasoning-then-call", "turn-two-calls",
                                           "string-values-cast-to-integer-and-boolean"}
    modes = second_turn_modes(cases[0], ["reasoning", "no-reasoning"])
    assert modes == ("turn2@reasoning", "turn2@no-reasoning")
    assert [rebuilder_of(mode) for mode in modes] == ["reasoning", "no-reasoning"]
    assert mode_order("turn2@reasoning") > mode_order("stream@whole") > mode_order("stream")
    assert request_count(cases, 1, (), ["a", "b"]) == request_count(cases) + 2 * len(cases)
    plain = [case for case in load_suite() if case.second_turn is None]
    assert request_count(plain, 1, (), ["a"]) == request_count(plain)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_the_second_turn_is_rendered_in_every_format_that_can_express_it(name: str) -> None:
    rendered = 0
    if name in ("qwen3-hermes", "gemma4", "glm45", "qwen3-xml"):  # the formats gated live: each renders both turns
        rendered = -2
    for case in load_suite(form=FORMATS[name]):
        if case.second_turn is None:
            continue
        second = case.second_turn
        assert second.reference is not None
        if second.force is None:  # a skip that says why, turn 1's or turn 2's own
            assert second.reference.skip and name in second.reference.skip
            continue
        assert case.force and second.force != case.force
        rendered += 1
        # the format's parse of the rendered second turn gives the turn back (the round trip)
        message = second.reference.message
        assert message is not None and not message.tool_calls
        assert (message.content or "").strip() == second.turn.content
        if FORMATS[name].response_template.get("fields", {}).get("thinking") or message.reasoning:
            assert (message.reasoning or "").strip() == second.turn.reasoning
    assert rendered >= 0  # the turn cases' second turns (and the cast case's, in its own format) at least


def test_the_reference_conversation_is_turn_1_as_the_model_wrote_it() -> None:
    case = _loaded_case()
    conversations = reference_conversations(case, ANSWER)
    assistant = conversations["reference"][-2]
    assert assistant["content"] is None  # none written: null on the wire ("" renders a newline more on vLLM)
    assert assistant["reasoning"] == case.turn.reasoning == assistant["reasoning_content"]
    assert assistant["tool_calls"][0]["id"] == "call-1"
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris", "days": 3}'
    assert "reasoning" not in conversations["reference_without_reasoning"][-2]
    assert conversations["reference"][-1] == {"role": "tool", "tool_call_id": "call-1",
                                             "content": case.second_turn.tool_results[0]}


SECOND_TURN_CASE = """
- id: looped
  description: A call answered by a tool result, then the model's final answer.
  features: [tool_call]
  request:
    messages: [{role: user, content: "Weather?"}]
    tools: [get_weather]
  turn:
    tool_calls: [{name: get_weather, arguments: {city: Paris}}]
  second_turn:
    tool_results: ["sun", "rain"]
    turn: {content: "Sunny."}
  shape: unclosed_last_call
"""


def _lint(directory: Path, cases_yaml: str) -> list[str]:
    directory.mkdir()
    (directory / "suite.yaml").write_text(WEATHER_TOOL + "cases:\n" + textwrap.indent(textwrap.dedent(cases_yaml), "  "))
    (directory / "features.txt").write_text((Path(__file__).parents[1] / "cases" / "features.txt").read_text())
    return [str(issue) for issue in check_suite(directory).issues]


def test_the_linter_holds_a_second_turn_to_one_result_per_call_and_a_plain_turn(tmp_path: Path) -> None:
    issues = _lint(tmp_path / "a", SECOND_TURN_CASE)
    assert any("2 tool result(s) for the 1 call(s)" in issue for issue in issues), issues
    assert any("no shape" in issue for issue in issues), issues
    streamed = SECOND_TURN_CASE.replace("  shape: unclosed_last_call\n", "  modes: [stream]\n")
    issues = _lint(tmp_path / "c", streamed.replace("    tools: [get_weather]\n", "    tools: [get_weather]\n    top_p: 1\n"))
    assert any("keep non-stream" in issue for issue in issues), issues
    assert any("sends top_p, which the clients do not send back" in issue for issue in issues), issues
    without_turn = SECOND_TURN_CASE.replace("  turn:\n    tool_calls: [{name: get_weather, arguments: {city: Paris}}]\n",
                                            "  force: x\n  expect: {hf: {skip: no}}\n").replace(
        "  shape: unclosed_last_call\n", "")
    assert any("second_turn" in issue for issue in _lint(tmp_path / "b", without_turn))


REFERENCE = "<user>hi</user><assistant><think>plan</think>\n<call>{\"city\": \"Paris\"}</call></assistant><tool>sun</tool>"
BARE = "<user>hi</user><assistant>\n<call>{\"city\": \"Paris\"}</call></assistant><tool>sun</tool>"


def _turn2(sent: str, reasoning_keys: tuple[str, ...] = ("reasoning",), profile: str = "hf",
           prompts_error: str | None = None) -> Transcript:
    assistant = {"role": "assistant", "content": None, **dict.fromkeys(reasoning_keys, "plan")}
    return Transcript("c", "turn2@x", profile, "chat", ServerStamp("u", "m", profile),
                      {"messages": [{"role": "user", "content": "hi"}, assistant]}, status=200,
                      prompts=None if prompts_error else {"sent": sent, "reference": REFERENCE,
                                                          "reference_without_reasoning": BARE},
                      prompts_error=prompts_error)


@pytest.mark.parametrize(("sent", "keys", "read", "outcome", "kind", "words"), [
    (REFERENCE, ("reasoning",), ("reasoning",), PASS, CONTRACT, "as the model wrote it"),
    (BARE, ("reasoning_content",), ("reasoning",), FAIL, FINDING, "does not read (it reads reasoning)"),
    (BARE, (), ("reasoning",), FAIL, FINDING, "sent no reasoning back"),
    (BARE, ("reasoning",), ("reasoning",), FAIL, CONTRACT, "sent back as reasoning is not in the prompt"),
    (BARE, ("reasoning_content",), None, FAIL, CONTRACT, "sent back as reasoning_content is not in the prompt"),
    (REFERENCE.replace("</think>\n", "</think>\n\n\n"), ("reasoning",), ("reasoning",), FAIL, FINDING,
     "only in whitespace"),
    (REFERENCE.replace('"Paris"', '"paris"'), ("reasoning",), ("reasoning",), FAIL, CONTRACT, "a turn it did not write"),
    (REFERENCE.replace("<user>hi", "<user>h i"), ("reasoning",), ("reasoning",), FAIL, CONTRACT,
     "a turn it did not write"),  # whitespace that splits a word is not "only whitespace"
    (REFERENCE.replace('"Paris"', '" Paris"'), ("reasoning",), ("reasoning",), FAIL, FINDING, "only in whitespace"),
    (REFERENCE, ("reasoning_content",), ("reasoning",), ERROR, CONTRACT, "the record is stale"),
])
def test_the_prompt_check_tells_the_model_s_turn_from_what_the_client_and_server_made_of_it(
        sent: str, keys: tuple[str, ...], read: tuple[str, ...] | None, outcome: str, kind: str, words: str) -> None:
    check = check_turn2_prompt(_turn2(sent, keys), read)
    assert (check.outcome, check.kind) == (outcome, kind) and words in check.reason, check


def test_calls_sent_back_as_the_server_parsed_them_are_the_client_s_finding_and_faithful_ones_must_render() -> None:
    written = ExpectedMessage(tool_calls=(ExpectedToolCall("get_weather", {"city": "Paris", "days": "3"}),))
    cast = _turn2(REFERENCE.replace('"Paris"}', '"Paris", "days": 3}'))
    cast.request["messages"][1]["tool_calls"] = [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}}]
    check = check_turn2_prompt(cast, ("reasoning",), written)
    assert (check.outcome, check.kind) == (FAIL, FINDING)
    assert 'call 0: {"city": "Paris", "days": 3} where it wrote {"city": "Paris", "days": "3"}' in check.reason
    faithful = copy.deepcopy(cast)
    faithful.request["messages"][1]["tool_calls"][0]["function"]["arguments"] = '{"days": "3", "city": "Paris"}'
    check = check_turn2_prompt(faithful, ("reasoning",), written)  # the calls the model wrote, rendered otherwise
    assert (check.outcome, check.kind) == (FAIL, CONTRACT) and "a turn it did not write" in check.reason
    lost = copy.deepcopy(cast)
    lost.request["messages"][1]["tool_calls"] = []
    assert "0 call(s) where it wrote 1" in check_turn2_prompt(lost, ("reasoning",), written).reason


def test_a_case_with_a_raw_forced_text_sends_back_the_turn_it_states_as_written() -> None:
    case = _loaded_case("string-values-cast-to-integer-and-boolean")
    assert case.written_turn is case.second_turn.written and case.turn is None
    assert second_turn_modes(case, ["reasoning"]) == ("turn2@reasoning",)
    assert case.second_turn.force.endswith("Sun, sun, then rain in A.")  # rendered in the case's own format
    sent = reference_conversations(case, ANSWER)["reference"][-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent) == {"city": "A", "days": "3", "metric": "true"}  # the strings the model wrote
    in_gemma = next(c for c in load_suite(form=FORMATS["gemma4"]) if c.id == case.id)
    assert in_gemma.second_turn.force is None  # written for qwen3-hermes: skipped elsewhere with its first turn


def test_a_server_that_cannot_render_is_named_and_renderings_that_failed_are_an_error() -> None:
    unavailable = _turn2(REFERENCE)
    unavailable.prompts, unavailable.prompts_unavailable = None, "the server has no tokenize endpoint to verify tokens"
    check = check_turn2_prompt(unavailable, None)
    assert check.outcome == SKIP and "no tokenize endpoint" in check.reason and check.skip_kind is None
    failed = check_turn2_prompt(_turn2(REFERENCE, prompts_error="ServerRefused: /tokenize: HTTP 500"), None)
    assert failed.outcome == ERROR and "HTTP 500" in failed.reason
    unrecorded = _turn2(REFERENCE)
    unrecorded.prompts = None
    assert check_turn2_prompt(unrecorded, None).outcome == ERROR


def test_a_second_turn_result_is_listed_under_multi_turn() -> None:
    case = _loaded_case()
    result = make_result(case, replace(_turn2(REFERENCE), mode=second_turn_mode("litellm")), [])
    assert SECOND_TURN_FEATURE in result.features and result.mode == "turn2@litellm"


def _pair(base: Transcript, cand: Transcript) -> Pair:
    return Pair("c", base.mode, {"baseline": base, "candidate": cand}, {})


def test_the_gate_shows_a_second_turn_rendered_or_refused_differently_as_multi_turn() -> None:
    base = _turn2(REFERENCE)
    base.response = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                                   "content": "Sunny."}}]}
    cand = copy.deepcopy(base)
    cand.prompts = {**base.prompts, "sent": REFERENCE.replace("</think>\n", "</think>\n\n\n")}
    differences = diff_pair(_pair(base, cand))
    assert [(d.kind, d.field) for d in differences] == [("multi_turn", "prompt")]
    assert "as x sends it back: the model's own turn under the baseline, parts from the model's turn at character " \
           "46: 'hi</user>" in differences[0].summary
    assert diff_pair(_pair(base, copy.deepcopy(base))) == []
    other_ids = copy.deepcopy(base)  # a template that renders call ids: each side's own, each its model's own turn
    other_ids.prompts = {name: text.replace("<call>", "<call id=2>") for name, text in base.prompts.items()}
    assert diff_pair(_pair(base, other_ids)) == []
    refused = copy.deepcopy(base)
    refused.status, refused.response = 400, None
    refused.error_body = {"error": {"message": "bad message", "param": "messages"}}
    kinds = [(d.kind, d.field) for d in diff_pair(_pair(base, refused))]
    assert kinds == [("multi_turn", "status")], kinds


LOOP_CASES = """
- id: looped
  description: A call the fake answers (scenario ok), then its tool result picks the fake's plain answer.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
    max_tokens: 50
  turn:
    reasoning: plan
    tool_calls: [{name: get_weather, arguments: {city: Paris}}]
  second_turn:
    tool_results: [plain]
    turn: {content: "It is sunny."}
- id: garbled
  description: A first turn the fake answers with a body that is not JSON, so there is nothing to answer.
  features: [tool_call]
  request:
    messages: [{role: user, content: garbage}]
    tools: [get_weather]
  turn:
    tool_calls: [{name: get_weather, arguments: {city: Paris}}]
  second_turn:
    tool_results: [plain]
    turn: {content: "It is sunny."}
"""


def _broken_rebuilder(jobs):
    raise OSError("the replay server could not bind")


def test_a_run_sends_second_turns_records_each_and_never_stops_on_one(tmp_path: Path) -> None:
    """Against the loopback fake: each rebuilder's turn 2 is sent with the rebuilt body (forced, the run's
    controls added) and recorded; the fake's /tokenize refuses (403), so the prompt check is an error, never a
    pass; a first turn with no completion is a named skip; a rebuilder whose own set-up fails is an error of
    its mode alone."""
    import asyncio

    from conformance.run.driver import Target
    from conformance.run.engine import recheck, run_async
    from tests.fake_server import fake_server

    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "suite.yaml").write_text(WEATHER_TOOL + "cases:\n" + textwrap.indent(textwrap.dedent(LOOP_CASES), "  "))
    (directory / "features.txt").write_text((Path(__file__).parents[1] / "cases" / "features.txt").read_text())
    cases = load_suite(directory)
    rebuilders = {"reasoning": REASONING_REBUILDERS["reasoning"], "broken": _broken_rebuilder}
    with fake_server() as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", timeout=5, can_force=True)
        output = asyncio.run(run_async(cases, target, tmp_path / "run", rebuilders=rebuilders))
        sent = [body for body in server.requests if body.get("messages", [{}])[-1].get("role") == "tool"
                and "add_generation_prompt" not in body]  # not the /tokenize renderings
    results = {(r.case_id, r.mode): r for r in output.results}
    looped = results[("looped", "turn2@reasoning")]
    assert looped.outcome == "error" and "second_turn_prompt" in looped.reason and "403" in looped.reason
    assert [c.outcome for c in looped.checks if c.name == "expectation"] in ([], ["pass"])
    assert len(sent) == 1 and sent[0]["max_tokens"] == 50 and sent[0]["structured_outputs"]["regex"]
    assert sent[0]["messages"][1]["reasoning"] and sent[0]["messages"][2]["tool_call_id"] == "chatcmpl-tool-0000000000000000"
    broken = results[("looped", "turn2@broken")]
    assert broken.outcome == "error" and "could not bind" in broken.reason
    for mode in ("turn2@reasoning", "turn2@broken"):
        garbled = results[("garbled", mode)]
        assert garbled.outcome == "skip" and garbled.skip_kind == "first_turn_unusable" and garbled.skip_allowed
    recorded = [json.loads(line) for line in (tmp_path / "run" / "transcripts.jsonl").read_text().splitlines()[1:]]
    assert sum(t["mode"].startswith("turn2@") for t in recorded) == 4  # every second turn written
    again = {(r.case_id, r.mode): r.outcome for r in recheck(output.transcripts, cases)}
    assert again == {key: r.outcome for key, r in results.items()}


def test_a_declared_refusal_is_a_finding_while_it_happens_and_stale_once_the_server_accepts() -> None:
    from conformance.record.outcomes import Check as CheckRecord
    from conformance.run.second_turn import judged_with_known_refusal
    from conformance.servers.profile import KnownRefusal

    known = KnownRefusal("turn2@x", ("reasoning", "reasoning_content"), 400, "duplicate field", "a known bug",
                         "https://example.test/issue")
    refused = _turn2(REFERENCE, ("reasoning", "reasoning_content"))
    refused.status, refused.response = 400, None
    refused.error_body = {"error": {"message": "messages[1]: duplicate field `reasoning`"}}
    checks = judged_with_known_refusal([CheckRecord("http_status", FAIL, reason="refused")], refused, known)
    assert [(c.name, c.outcome, c.kind) for c in checks] == [("known_refusal", FAIL, FINDING)]
    assert "https://example.test/issue" in checks[0].reason
    other = copy.deepcopy(refused)
    other.error_body = {"error": {"message": "something else"}}
    assert [c.name for c in judged_with_known_refusal([CheckRecord("http_status", FAIL)], other, known)] == [
        "http_status"]  # another refusal is still a failure
    accepted = judged_with_known_refusal([], _turn2(REFERENCE, ("reasoning", "reasoning_content")), known)
    assert [(c.name, c.outcome, c.kind) for c in accepted] == [("known_refusal", FAIL, CONTRACT)]
    assert "stale" in accepted[0].reason
    assert judged_with_known_refusal([], _turn2(REFERENCE, ()), known) == []  # no reasoning sent: nothing declared


def test_cases_with_a_second_turn_are_sent_first_so_their_turn_2_runs_beside_the_rest(tmp_path: Path) -> None:
    import asyncio

    from conformance.run.driver import Target
    from conformance.run.engine import run_async
    from tests.fake_server import fake_server

    plain = """
- id: plain-first
  description: A case without a second turn, written before the looped one.
  features: [tool_call]
  request:
    messages: [{role: user, content: plain}]
    tools: [get_weather]
  turn:
    content: "It is sunny."
"""
    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "suite.yaml").write_text(WEATHER_TOOL + "cases:\n" + textwrap.indent(
        textwrap.dedent(plain) + textwrap.dedent(LOOP_CASES).split("- id: garbled")[0], "  "))
    (directory / "features.txt").write_text((Path(__file__).parents[1] / "cases" / "features.txt").read_text())
    cases = load_suite(directory)
    assert [case.id for case in cases] == ["plain-first", "looped"]
    with fake_server() as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", timeout=5, can_force=True)
        asyncio.run(run_async(cases, target, None, concurrency=1, rebuilders={"reasoning": REASONING_REBUILDERS["reasoning"]}))
        first_asked = [body["messages"][0]["content"] for body in server.requests if body.get("messages")]
    assert first_asked[0] == "ok" and "plain" in first_asked  # the looped case's turn 1 before the plain case
