"""A checkpoint with no shipped record speaks its own format (fast tier: no vLLM): its turn cases are rendered in
its own delimiters and parse back to the turns, written from its response_template where its chat template drops
reasoning, its untrusted template is rendered bounded, and a legacy side without parsers is exit 2 naming them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.formats.checkpoint_format import served_format
from conformance.formats.registry import FORMATS, format_named
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.suite import format_cases
from conformance.suite.cases import load_suite
from conformance.suite.format_cases import delimiter_texts, round_trip_loss, with_delimiters
from conformance.util import exit_codes
from tests.test_fixture_clone import INVENTED

REASON_RENDERING = "{%- if message.reasoning %}{{- '<reason>' + message.reasoning + '</reason>' }}{%- endif %}"
OTHER_FORMATS_MARKERS = ("<think>", "<tool_call>", "<|im_start|>")


def source_with(tmp_path: Path, name: str, chat_template: str) -> Path:
    """The invented source with another chat template."""
    config = json.loads((INVENTED / "tokenizer_config.json").read_text())
    config["chat_template"] = chat_template
    (tmp_path / name).mkdir()
    (tmp_path / name / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path / name


def invented_template() -> str:
    return json.loads((INVENTED / "tokenizer_config.json").read_text())["chat_template"]


def turn_cases(directory: Path) -> list:
    return [case for case in load_suite(None, served_format(None, directory)) if case.turn is not None]


def test_a_checkpoint_without_a_record_is_a_format_of_its_own_named_after_it() -> None:
    form = served_format(None, INVENTED)
    assert form.name == "checkpoint:calls_reason_checkpoint" and form.name not in FORMATS
    assert format_named(form.name) is form and form.legacy_flags == ()
    assert form.chat_template == invented_template() and form.eos_token == "<|end|>"
    assert {"<reason>", "</reason>", "<calls>", "</calls>"} <= set(form.delimiter_tokens)


def test_a_checkpoint_with_a_records_chat_template_is_that_record(tmp_path: Path) -> None:
    source = build_fixture(tmp_path / "xml", "full", FORMATS["qwen3-xml"])
    assert served_format(None, source) is FORMATS["qwen3-xml"]
    assert served_format("gemma4", INVENTED) is FORMATS["gemma4"]  # --format wins


def assert_round_trips(cases: list, form_name: str) -> None:
    form = format_named(form_name)
    checked = 0
    for case in cases:
        assert case.format == form_name
        if case.reference.skip is not None:
            continue
        assert not any(marker in case.force for marker in OTHER_FORMATS_MARKERS), (case.id, case.force)
        turn = with_delimiters(case.turn, delimiter_texts(form))
        if case.shape is None and turn is case.turn:  # its turn as written: the format's parse gives it back
            assert round_trip_loss(turn, case.reference) is None, (case.id, case.force, case.reference.message)
            checked += 1
        if case.turn.reasoning:
            assert "<reason>" in case.force, case.id
        if case.turn.tool_calls:
            assert "<calls>" in case.force, case.id
    assert checked >= 6


def test_the_turn_cases_render_in_its_own_delimiters_and_parse_back_to_the_turns() -> None:
    cases = turn_cases(INVENTED)
    assert_round_trips(cases, "checkpoint:calls_reason_checkpoint")
    assert {case.reference.rendered_with for case in cases if case.reference.skip is None} == {"chat_template"}


def test_where_the_chat_template_drops_reasoning_the_response_template_writes_the_turn(tmp_path: Path) -> None:
    source = source_with(tmp_path, "drops-reasoning", invented_template().replace(REASON_RENDERING, ""))
    cases = turn_cases(source)
    assert_round_trips(cases, "checkpoint:drops-reasoning")
    ways = {case.id: case.reference.rendered_with for case in cases if case.reference.skip is None}
    with_reasoning = {case.id for case in cases if case.turn.reasoning and case.id in ways}
    assert with_reasoning and {ways[name] for name in with_reasoning} == {"response_template"}
    assert {way for name, way in ways.items() if name not in with_reasoning} == {"chat_template"}
    for case in cases:
        if case.reference.skip is not None:  # said why, both ways
            assert "nor can its response_template's delimiters write it" in case.reference.skip, case.id


LOOP = "{%- for i in range(100000) %}{%- for j in range(100000) %}{%- endfor %}{%- endfor %}"


def test_a_template_that_loops_on_calls_is_a_named_skip_for_those_cases(tmp_path: Path, monkeypatch) -> None:
    template = invented_template().replace("{%- if message.tool_calls %}", "{%- if message.tool_calls %}" + LOOP)
    form = served_format(None, source_with(tmp_path, "loops-on-calls", template))
    cases = {case.id: case for case in load_suite(None, FORMATS["qwen3-hermes"]) if case.turn is not None}
    # under the default bound first: the worker's own start (its imports) is not the template's time on a busy machine
    [content] = format_cases.in_format([cases["turn-content"]], form)
    assert content.reference.rendered_with == "chat_template"
    monkeypatch.setattr(format_cases, "RENDER_TIMEOUT_S", 1.0)
    started = time.monotonic()
    [call] = format_cases.in_format([cases["turn-one-call"]], form)
    assert time.monotonic() - started < 30
    assert "took longer than 1s" in call.reference.skip and call.force is None


def test_a_template_that_always_loops_is_exit_2_naming_it_before_any_server(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(format_cases, "RENDER_TIMEOUT_S", 1.0)
    source = source_with(tmp_path, "loops", LOOP + invented_template())
    started = time.monotonic()
    code = main(["gate", "--model", str(source), "--baseline-args", "--tool-call-parser hf", "--out", str(tmp_path / "g")])
    assert code == exit_codes.ERROR and time.monotonic() - started < 60
    assert f"{source}: chat_template: no format-independent case renders within bounds" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["gate", "--model", "{src}", "--out", "{out}"],
                                  ["run", "--launch", "legacy", "--model", "{src}", "--out", "{out}"]])
def test_a_legacy_side_without_parsers_for_the_checkpoints_format_is_exit_2_naming_them(
        argv: list[str], tmp_path: Path, capsys) -> None:
    args = [arg.format(src=INVENTED, out=tmp_path / "out") for arg in argv]
    assert main(args) == exit_codes.ERROR
    err = capsys.readouterr().err
    assert "checkpoint:calls_reason_checkpoint format has no record" in err and "--baseline-args" in err
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
