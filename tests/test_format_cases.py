"""Format-independent cases offline: each shipped turn rendered in every format and parsed back (the round
trip), the reference as the judge uses it, the documented rules and declared deviations, the skip of cases
written for another format, and the audit's reading of config.json's model_type (gpt-oss: harmony)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.predictors.vllm_032 import HARMONY_REASONING, HARMONY_TOOLS
from conformance.cli import main
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.record.server_rules import KEEPS_REGION_WHITESPACE
from conformance.record.transcript import ServerStamp, Transcript
from conformance.run.driver import Target
from conformance.run.forcing_plan import other_format
from conformance.run.judge import judge
from conformance.servers.profiles import PROFILES, served_profile
from conformance.suite.cases import load_suite
from conformance.suite.format_cases import in_format, round_trip_loss
from conformance.suite.turn_shapes import delimiter_texts

TURNS = [case for case in load_suite() if case.turn is not None]


# the shipped turns a format cannot express (every other one renders and parses back)
GPT_OSS_EXPRESSES = {"turn-content", "turn-reasoning-then-content", "turn-reasoning-closer-in-content"}
SKIPPED = {
    "cohere-command": {case.id for case in TURNS},  # no chat template known
    "gpt-oss": {case.id for case in TURNS} - GPT_OSS_EXPRESSES,  # its two templates disagree about calls
    # transformers' json parser cannot read a call region cut at the closer inside its argument
    "qwen3-hermes": {"turn-call-closer-in-argument"}, "gemma4": {"turn-call-closer-in-argument"},
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_turn_round_trips_in_every_format_or_is_a_skip_that_says_why(name: str) -> None:
    skipped = set()
    for case in in_format(TURNS, FORMATS[name]):
        reference = case.reference
        if reference.skip is not None:
            assert case.force is None and f"the {name} format cannot express this turn: " in reference.skip
            skipped.add(case.id)
            continue
        assert case.format == name and case.force
        if case.shape is None and "{{" not in json.dumps(case.request) + repr(case.turn):
            assert round_trip_loss(case.turn, reference) is None
        for end in FORMATS[name].end_tokens:
            assert not case.force.endswith(end), (name, case.id)  # the server generates the end itself
    assert skipped == SKIPPED.get(name, set()), name


def test_a_turn_names_the_formats_own_delimiters_and_a_shape_cuts_its_rendered_text() -> None:
    assert delimiter_texts(FORMATS["qwen3-hermes"])["call_close"] == "</tool_call>"
    assert delimiter_texts(FORMATS["gemma4"])["reasoning_close"] == "<channel|>"
    assert delimiter_texts(FORMATS["qwen3-xml"])["call_close"] == "</tool_call>"  # a token in its close pattern
    cases = {case.id: case for case in in_format(TURNS, FORMATS["qwen3-xml"])}
    closer = cases["turn-call-closer-in-argument"]
    assert "the tag </tool_call> ends a call" in closer.force
    assert closer.reference.message.tool_calls[0].arguments == {"text": "the tag </tool_call> ends a call"}
    unclosed = {case.id: case for case in in_format(TURNS, FORMATS["qwen3-hermes"])}["turn-unclosed-call"]
    assert unclosed.force.endswith('{"city": "Rome"}}\n') and "</tool_call>" not in unclosed.force
    assert [call.name for call in unclosed.reference.message.tool_calls] == ["get_weather"]  # the format's parse


def test_gpt_oss_calls_are_skipped_because_its_two_templates_disagree() -> None:
    cases = {case.id: case for case in in_format(TURNS, FORMATS["gpt-oss"])}
    assert "its two templates disagree" in cases["turn-one-call"].reference.skip
    assert "tool calls [], not [('get_weather', {'city': 'Paris'})]" in cases["turn-one-call"].reference.skip
    assert cases["turn-content"].reference.skip is None


def _answer(case_id: str, profile: str, message: dict, form: str = DEFAULT_FORMAT.name) -> list:
    case = {c.id: c for c in in_format(TURNS, FORMATS[form])}[case_id]
    response = {"choices": [{"index": 0, "message": {"role": "assistant", **message},
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}]}
    transcript = Transcript(case_id, "non-stream", profile, "chat", ServerStamp("http://127.0.0.1:1", "m", profile),
                            {}, status=200, response=response)
    return judge(case, transcript)


def _check(checks: list, name: str):
    return next(check for check in checks if check.name == name)


def test_an_answer_is_judged_against_the_formats_parse_and_passes_only_by_a_documented_rule() -> None:
    exact = _answer("turn-reasoning-then-content", "hf", {"reasoning": "The user asks a simple question.",
                                                           "content": "Yes, on a clear day."})
    assert _check(exact, "expected_message").outcome == "pass"
    spaced = _answer("turn-reasoning-then-content", "hf", {"reasoning": "\nThe user asks a simple question.\n",
                                                            "content": "\n\nYes, on a clear day."})
    ruled = _check(spaced, "expected_message")
    assert ruled.outcome == "pass" and "keeps_region_whitespace" in ruled.reason
    # vLLM's Rust frontend documents no such rule (it trims): the same whitespace is a failure there
    assert _check(_answer("turn-reasoning-then-content", "hf-rust",
                          {"reasoning": "\nThe user asks a simple question.\n",
                           "content": "\n\nYes, on a clear day."}), "expected_message").outcome == "fail"
    lost = _check(_answer("turn-reasoning-then-content", "hf", {"reasoning": "The user asks a simple question."}),
                  "expected_message")
    assert lost.outcome == "fail" and "rules allow none of it" in lost.reason


def test_a_mutated_reference_fails_the_right_cases(monkeypatch) -> None:
    """A server rule removed: hf's whitespace now fails; a deviation undeclared: gemma4's legacy bug fails."""
    spaced = {"reasoning": "\nThe user asks a simple question.\n", "content": "Yes, on a clear day."}
    assert _check(_answer("turn-reasoning-then-content", "hf", spaced), "expected_message").outcome == "pass"
    monkeypatch.setitem(PROFILES, "hf", replace(PROFILES["hf"], rules=tuple(
        rule for rule in PROFILES["hf"].rules if rule is not KEEPS_REGION_WHITESPACE)))
    assert _check(_answer("turn-reasoning-then-content", "hf", spaced), "expected_message").outcome == "fail"

    string_count = {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "search_flights", "arguments":
                    json.dumps({"direct": True, "passengers": [{"count": "2", "type": "adult"}],
                                "route": {"from": "CDG", "to": "JFK"}})}}]}
    declared = _answer("turn-nested-arguments", "legacy", string_count, "gemma4")
    assert _check(declared, "expected_message").outcome == "pass"
    assert "gemma4 tool parser" in _check(declared, "known_deviation").reason
    monkeypatch.setitem(FORMATS, "gemma4", replace(FORMATS["gemma4"], deviations=()))
    undeclared = _answer("turn-nested-arguments", "legacy", string_count, "gemma4")
    assert _check(undeclared, "expected_message").outcome == "fail"
    assert not any(check.name == "known_deviation" for check in undeclared)


def test_a_declared_deviation_that_stops_happening_fails_as_stale() -> None:
    fixed = {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "search_flights", "arguments":
             json.dumps({"direct": True, "passengers": [{"count": 2, "type": "adult"}],
                         "route": {"from": "CDG", "to": "JFK"}})}}]}
    stale = _check(_answer("turn-nested-arguments", "legacy", fixed, "gemma4"), "expected_message")
    assert stale.outcome == "fail" and "the bug is fixed and its declaration stale" in stale.reason
    assert _check(_answer("turn-nested-arguments", "hf", fixed, "gemma4"), "expected_message").outcome == "pass"


def test_a_case_written_for_one_format_is_skipped_on_another_and_a_turn_runs_on_any() -> None:
    suite = load_suite(form=FORMATS["glm45"])
    written = next(case for case in suite if case.id == "reasoning-then-one-call")
    turn = next(case for case in suite if case.id == "turn-one-call")
    on_glm = Target("http://127.0.0.1:1/v1", "m", "hf", format="glm45")
    skipped = other_format(written, on_glm)
    assert skipped.kind == "other_format" and "written for the qwen3-hermes format" in skipped.reason
    assert other_format(turn, on_glm) is None and "<arg_key>city</arg_key>" in turn.force
    assert other_format(written, Target("http://127.0.0.1:1/v1", "m", "hf")) is None


def test_the_legacy_profile_serves_each_format_with_its_own_parsers_and_hf_stays_as_it_is() -> None:
    glm = served_profile("legacy", FORMATS["glm45"])
    assert glm.server_args == FORMATS["glm45"].legacy_flags
    assert glm.launch.env["VLLM_ENFORCE_STRICT_TOOL_CALLING"] == "0"
    assert served_profile("hf", FORMATS["glm45"]) is PROFILES["hf"]
    assert served_profile("legacy", DEFAULT_FORMAT).server_args == DEFAULT_FORMAT.legacy_flags


def test_the_audit_reads_model_type_and_predicts_harmony_refusing_hf(tmp_path: Path) -> None:
    checkpoint = build_fixture(tmp_path / "gpt-oss", form=FORMATS["gpt-oss"])
    audit = audit_local(checkpoint)
    assert audit.model_type == "gpt_oss" and "config.json" in audit.files
    verdicts = audit.vllm_0_32
    assert verdicts["tool_call_parser_hf"].error == HARMONY_TOOLS
    assert verdicts["reasoning_parser_hf"].error == verdicts["both"].error == HARMONY_REASONING
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "model_type": "qwen3"}))
    assert all(verdict.starts for verdict in audit_local(checkpoint).vllm_0_32.values())
    (checkpoint / "config.json").write_text("{not json")
    unread = audit_local(checkpoint)
    assert unread.model_type is None and any("config.json" in warning for warning in unread.warnings)


def test_the_audit_names_a_shipped_format_by_its_chat_template_and_says_where_a_template_comes_from(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<turn|>"}))
    (bare / "chat_template.jinja").write_text(FORMATS["gemma4"].chat_template + "\n")  # whitespace aside
    audit = audit_local(bare)
    assert audit.known_format == "gemma4" and not audit.vllm_0_32["both"].starts
    known = next(finding for finding in audit.findings if finding.code == "known-format")
    assert "--write-template" in known.message
    served = tmp_path / "served"
    served.mkdir()
    (served / "tokenizer_config.json").write_text(json.dumps({"response_template": FORMATS["gemma4"].response_template,
                                                             "chat_template": FORMATS["gemma4"].chat_template}))
    audit = audit_local(served)
    assert audit.known_format == "gemma4" and audit.vllm_0_32["both"].starts
    assert not any(f.code == "known-format" for f in audit.findings)  # nothing to do about it
    other = tmp_path / "other"
    other.mkdir()
    (other / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert audit_local(other).known_format is None


def test_write_template_gives_a_checkpoint_of_a_known_format_the_template_vllm_serves(tmp_path, capsys):
    checkpoint = tmp_path / "qwen35"
    checkpoint.mkdir()
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "model_max_length": 4096}))
    (checkpoint / "chat_template.jinja").write_text(FORMATS["qwen3-xml"].chat_template)
    written = tmp_path / "tokenizer_config.json"
    assert main(["audit", "--local", str(checkpoint), "--examples", "0", "--write-template", str(written)]) == 0
    assert "with the qwen3-xml format's response_template" in capsys.readouterr().err
    config = json.loads(written.read_text())
    assert config["model_max_length"] == 4096 and config["response_template"] == FORMATS["qwen3-xml"].response_template
    (checkpoint / "tokenizer_config.json").write_text(written.read_text())
    served = audit_local(checkpoint)
    assert all(verdict.starts for verdict in served.vllm_0_32.values())
    # nothing to write now, an existing file is never overwritten, an unknown chat template names no format
    assert main(["audit", "--local", str(checkpoint), "--examples", "0", "--write-template", str(tmp_path / "x")]) == 2
    assert "already start" in capsys.readouterr().err
    assert main(["audit", "--local", str(checkpoint), "--examples", "0", "--write-template", str(written)]) == 2
    (checkpoint / "chat_template.jinja").write_text("{{ messages }}")
    (checkpoint / "tokenizer_config.json").write_text("{}")
    assert main(["audit", "--local", str(checkpoint), "--examples", "0", "--write-template", str(tmp_path / "y")]) == 2
    assert "none of the shipped formats'" in capsys.readouterr().err
