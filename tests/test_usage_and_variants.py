"""The `usage` expectation and the cases that need another variant of the tiny checkpoint (fast
tier: the real loader, hand-made transcripts and the loopback fake server)."""

from __future__ import annotations

import json

import pytest

from conformance.cli import main
from conformance.formats.tiny_checkpoint import response_template_for
from conformance.record.transcript import SseLine, Transcript
from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.run.judge import judge
from conformance.suite.cases import check_suite
from tests.engine_helpers import STAMP, load_cases
from tests.fake_server import PLAIN, fake_server

USAGE_CASES = """
- id: counted
  description: The reasoning tokens of the think block are counted in the usage object.
  features: [reasoning, usage]
  modes: [non-stream]
  request:
    messages: [{role: user, content: plain}]
  force: "x"
  expect:
    hf:
      message: {content: "hi"}
      finish_reason: stop
      usage: {completion_tokens_details.reasoning_tokens: 8, prompt_tokens_details: null}
- id: counted-in-stream
  description: The final usage chunk of a stream counts the reasoning tokens as well.
  features: [reasoning, usage]
  modes: [stream]
  request:
    messages: [{role: user, content: plain}]
    stream_options: {include_usage: true}
  force: "x"
  expect:
    hf:
      message: {content: "hi"}
      finish_reason: stop
      usage: {completion_tokens_details.reasoning_tokens: 8}
"""


def _answer(usage: dict | None) -> Transcript:
    response = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    if usage is not None:
        response["usage"] = usage
    return Transcript("counted", "non-stream", "hf", "chat", STAMP, {}, status=200, response=response)


def _usage_check(case, transcript):
    return next(check for check in judge(case, transcript) if check.name == "expected_usage")


@pytest.fixture
def usage_cases(tmp_path):
    return load_cases(tmp_path, USAGE_CASES)


def test_usage_figures_are_judged_by_their_path_and_null_means_absent(usage_cases):
    case = usage_cases["counted"]
    assert case.expect["hf"].usage == {"completion_tokens_details.reasoning_tokens": 8, "prompt_tokens_details": None}
    good = _usage_check(case, _answer({"completion_tokens": 15, "completion_tokens_details": {"reasoning_tokens": 8}}))
    assert good.outcome == "pass" and good.kind == "expectation"
    zero = _usage_check(case, _answer({"completion_tokens_details": {"reasoning_tokens": 0},
                                       "prompt_tokens_details": {"cached_tokens": 0}}))
    assert zero.outcome == "fail"
    assert zero.expected == {"completion_tokens_details.reasoning_tokens": 8, "prompt_tokens_details": None}
    assert "completion_tokens_details.reasoning_tokens (0, expected 8)" in zero.reason
    missing = _usage_check(case, _answer(None))
    assert (missing.outcome, missing.reason) == ("fail", "the answer carries no usage object")


def test_a_stream_is_judged_on_its_final_usage_chunk(usage_cases):
    case = usage_cases["counted-in-stream"]
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
              {"choices": [], "usage": {"completion_tokens_details": {"reasoning_tokens": 8}}}]
    lines = [SseLine(json.dumps(chunk), 0.01) for chunk in chunks] + [SseLine("[DONE]", 0.02)]
    transcript = Transcript("counted-in-stream", "stream", "hf", "chat", STAMP, {}, status=200, sse=lines)
    assert _usage_check(case, transcript).outcome == "pass"
    assert _usage_check(case, Transcript("counted-in-stream", "stream", "hf", "chat", STAMP, {}, status=200,
                                         sse=lines[:2] + lines[3:])).outcome == "fail"


def test_the_loader_refuses_usage_on_a_stream_that_does_not_ask_for_it_and_an_unknown_variant(tmp_path):
    (tmp_path / "suite.yaml").write_text("""\
cases:
  - id: streams-without-usage
    description: A usage figure on a case that streams without asking for the usage chunk.
    features: [usage]
    fixture_variant: no-such-variant
    request:
      messages: [{role: user, content: hi}]
    force: "x"
    expect:
      hf:
        message: {content: hi}
        finish_reason: stop
        usage: {completion_tokens: 1}
""")
    problems = {(issue.field, issue.message.split(":")[0]) for issue in check_suite(tmp_path).errors}
    assert problems == {("expect.hf.usage", "a stream carries usage only when asked"),
                        ("fixture_variant", "unknown fixture variant 'no-such-variant' (known")}


VARIANT_CASES = f"""
- id: on-the-record-variant
  description: A plain answer, on the variant the profile record is launched on.
  features: [content]
  request:
    messages: [{{role: user, content: plain}}]
  expect:
    hf:
      message: {{content: {json.dumps(PLAIN)}}}
      finish_reason: stop
- id: on-the-closer-variant
  description: A plain answer, on the checkpoint variant whose tool closer ends with the start anchor.
  features: [content]
  fixture_variant: closer-ends-with-anchor
  request:
    messages: [{{role: user, content: plain}}]
  expect:
    hf:
      message: {{content: {json.dumps(PLAIN)}}}
      finish_reason: stop
"""


@pytest.mark.parametrize(("served", "sent"), [(None, "on-the-record-variant"),
                                              ("full", "on-the-record-variant"),
                                              ("closer-ends-with-anchor", "on-the-closer-variant")])
def test_only_the_cases_of_the_served_variant_are_sent_the_others_are_allowed_skips(tmp_path, served, sent):
    cases = list(load_cases(tmp_path, VARIANT_CASES).values())
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="hf", can_force=True,
                                   fixture_variant=served), tmp_path / "out")
    assert len(server.requests) == 2  # the sent case, both modes
    outcomes = {(r.case_id, r.outcome, r.skip_kind, r.skip_allowed) for r in output.results}
    other = ({c.id for c in cases} - {sent}).pop()
    assert outcomes == {(sent, "pass", None, False), (other, "skip", "other_fixture_variant", True)}
    skipped = next(r for r in output.results if r.case_id == other)
    needed = "closer-ends-with-anchor" if other == "on-the-closer-variant" else "full"
    assert skipped.reason == f"needs the tiny checkpoint's {needed!r} variant; this run serves {served or 'full'!r}"
    assert output.summary.exit_code == 0


def test_cli_run_fixture_variant_says_which_variant_an_attached_server_serves(tmp_path, capsys):
    load_cases(tmp_path / "cases", VARIANT_CASES)
    with fake_server() as server:
        code = main(["run", "--base-url", server.base_url, "--model", "fake", "--profile", "hf", "--cases",
                     str(tmp_path / "cases"), "--fixture-variant", "closer-ends-with-anchor", "--out", str(tmp_path / "o")])
    assert code == 0 and len(server.requests) == 2
    assert all(body["messages"][-1]["content"] == "plain" for body in server.requests)
    assert "2 pass, 0 fail, 2 skip" in capsys.readouterr().out


def test_the_closer_variant_closes_tool_calls_with_the_next_turns_start_anchor():
    template = response_template_for("closer-ends-with-anchor")
    full = response_template_for("full")
    assert template["fields"]["tool_calls"]["close"] == "</tool_call>" + template["start_anchor"]
    assert template["start_anchor"] == full["start_anchor"] == "<|im_start|>assistant\n"
    template["fields"]["tool_calls"]["close"] = full["fields"]["tool_calls"]["close"]
    assert template == full  # nothing else differs


@pytest.mark.parametrize(("variant", "sent"), [(None, "on-the-record-variant"),
                                               ("closer-ends-with-anchor", "on-the-closer-variant")])
def test_gate_fixture_variant_sends_both_sides_only_the_cases_of_that_variant(tmp_path, variant, sent):
    load_cases(tmp_path / "cases", VARIANT_CASES)
    chosen = ["--fixture-variant", variant] if variant else []
    with fake_server() as one, fake_server() as other:
        code = main(["gate", "--baseline", one.base_url, "--baseline-model", "fake", "--baseline-profile", "hf",
                     "--candidate", other.base_url, "--candidate-model", "fake", "--candidate-profile", "hf",
                     "--cases", str(tmp_path / "cases"), *chosen, "--no-expect", "--out", str(tmp_path / "g")])
    gate = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert code == 0 and gate["differences"] == []
    chat = [body for server in (one, other) for body in server.requests if "messages" in body]
    assert len(chat) == 4  # one case, both modes, on each side
    for side in ("baseline", "candidate"):
        results = [json.loads(line) for line in (tmp_path / "g" / side / "results.jsonl").read_text().splitlines()[1:]]
        assert {(r["case_id"], r["outcome"]) for r in results} == {
            (sent, "pass"), (({"on-the-record-variant", "on-the-closer-variant"} - {sent}).pop(), "skip")}
