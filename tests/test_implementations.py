"""The implementations matrix on the tiny checkpoint's template reproduces the documented differences."""

from __future__ import annotations

import pytest
from roundtrip_helpers import tiny_subject

from conformance.audit.implementations import matrix, registry
from conformance.audit.implementations.matrix import DOCUMENTED_CAST, DOCUMENTED_MALFORMED, build_matrix
from conformance.audit.offline import case_probes
from conformance.audit.roundtrip.worker import render_probe

CHOSEN = "transformers-5.19.0,transformers-5.20.2,vllm-0.32,vllm-0.33,sglang-0.5.23"


@pytest.fixture(scope="module")
def tiny_matrix():
    subject = tiny_subject()
    probes, _ = case_probes(subject)
    inputs = [render_probe(subject, probe) for probe in probes + matrix.CAST_PROBES]
    return build_matrix(registry.select(CHOSEN), subject.response_template, [i for i in inputs if i])


def _entry(record, mode, explained):
    found = [entry for entry in record["disagreements"] if entry["mode"] == mode and entry["explained"] == explained]
    assert len(found) == 1, record["disagreements"]
    return found[0]


def _groups(entry):
    return sorted(sorted(group["implementations"]) for group in entry["groups"])


def test_every_implementation_ran(tiny_matrix):
    assert tiny_matrix["status"] == "ran" and tiny_matrix["unavailable"] == {}
    assert tiny_matrix["implementations"] == CHOSEN.split(",")


def test_a_malformed_call_ends_a_transformers_stream_where_the_forks_go_on(tiny_matrix):
    entry = _entry(tiny_matrix, "stream", DOCUMENTED_MALFORMED)
    assert _groups(entry) == [["sglang-0.5.23", "vllm-0.32", "vllm-0.33"], ["transformers-5.19.0", "transformers-5.20.2"]]
    by_side = {group["implementations"][0]: group["answer"] for group in entry["groups"]}
    assert by_side["transformers-5.19.0"]["error"].startswith("ValueError")
    fork = by_side["vllm-0.32"]
    assert fork["error"] is None and any(event["type"] == "region_malformed" for event in fork["events"])
    assert entry["input"]["origin"].startswith("case ")  # shipped forced outputs
    assert entry["input"]["raw"] == "<tool_call></tool_call>"  # the shortest of them


def test_three_point_zero_is_cast_from_transformers_5_20(tiny_matrix):
    entry = _entry(tiny_matrix, "whole", DOCUMENTED_CAST)
    assert _groups(entry) == [["sglang-0.5.23", "transformers-5.20.2", "vllm-0.33"], ["transformers-5.19.0", "vllm-0.32"]]
    values = {group["implementations"][0]: group["answer"]["message"]["tool_calls"][0]["function"]["arguments"]["n"]
              for group in entry["groups"]}
    assert values == {"transformers-5.19.0": "3.0", "transformers-5.20.2": 3}


def test_no_other_difference_on_the_shipped_cases(tiny_matrix):
    assert {(e["mode"], e["explained"]) for e in tiny_matrix["disagreements"]} == {
        ("stream", DOCUMENTED_MALFORMED), ("whole", DOCUMENTED_CAST), ("stream", DOCUMENTED_CAST)}


def test_an_undocumented_difference_is_shown_unexplained():
    groups = [{"implementations": ["a"], "answer": {"message": {"content": "x"}, "error": None}},
              {"implementations": ["b"], "answer": {"message": {"content": "y"}, "error": None}}]
    assert matrix.explain("whole", groups) is None


def test_an_implementation_that_cannot_answer_is_unavailable_with_the_reason(tmp_path):
    broken = registry.Implementation("broken", "folder", lambda: tmp_path)  # no chat_parsing package there
    record = build_matrix([broken, *registry.select("vllm-0.32")], tiny_subject().response_template,
                          [{"prompt": "", "raw": "hi", "tools": [], "origin": "test"}])
    assert record["status"] == "skipped" and record["reason"] == "fewer than two implementations could run"
    assert record["unavailable"]["broken"].startswith("failed: FileNotFoundError")


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown implementation 'vllm-9'"):
        registry.select("vllm-9")
    assert [i.name for i in registry.select("transformers")] == [f"transformers-{v}" for v in registry.TRANSFORMERS_RELEASES]


def test_a_fork_keeps_only_the_parser_files_of_its_wheel(tmp_path):
    import zipfile

    from conformance.audit.implementations import setup

    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/parser/chat_parsing/__init__.py", "X = 1\n")
        archive.writestr("pkg/parser/chat_parsing/data.bin", "no")
        archive.writestr("pkg/engine.py", "import torch\n")
    setup._extract(wheel, "pkg/parser/chat_parsing/", tmp_path / "out")
    assert [p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file()] == [
        "pkg/parser/chat_parsing/__init__.py"]
    with pytest.raises(setup.SetupError, match="has no pkg/other/"):
        setup._extract(wheel, "pkg/other/", tmp_path / "out2")


def test_a_cached_release_is_not_installed_again(tmp_path, monkeypatch):
    from conformance.audit.implementations import setup

    calls = []
    monkeypatch.setattr(setup, "pip", lambda arguments, hint="": calls.append(arguments))
    target = setup.ensure_transformers("5.17.0", cache=tmp_path)
    assert calls[0][-2:] == ["transformers==5.17.0", setup.OLD_HUB_REQUIREMENT] and (target / setup.COMPLETE).is_file()
    setup.ensure_transformers("5.17.0", cache=tmp_path)
    assert len(calls) == 1


def test_an_implementation_that_hangs_is_cut_off():
    """A checkpoint's regex is untrusted: an implementation stuck in it is unavailable, not a hang."""
    template = {"start_anchor": "A", "fields": {"content": {"close_pattern": "(a|aa)+$"}}}
    stuck = [{"prompt": "", "raw": "a" * 40 + "b", "tools": [], "origin": "test"}]
    outcome = matrix.run_implementation(registry.IMPLEMENTATIONS["vllm-0.32"], template, stuck, timeout=2.0)
    assert outcome == "did not answer within 2 s"


def test_only_inputs_that_exercise_the_checkpoints_own_template_are_probes():
    """The shipped forced outputs are Hermes texts: a Gemma 4 template reads them as plain content, on which every
    parser agrees, so they are left out; the format-independent cases' turns are rendered in Gemma 4's own
    delimiters. A Hermes checkpoint keeps the Hermes forced outputs."""
    from conformance.formats.registry import FORMATS
    from conformance.suite.format_cases import subject_of_format

    gemma = subject_of_format(FORMATS["gemma4"])
    probes, left_out = case_probes(gemma)
    forced = [probe for probe in probes if "raw" in probe]
    turns = [rendered for probe in probes if "message" in probe and (rendered := render_probe(gemma, probe))]
    assert left_out > 50 and not [probe for probe in forced if "<tool_call>" in probe["raw"]]
    assert turns and all("<tool_call>" not in item["raw"] for item in turns)
    assert any("<|tool_call>call:" in item["raw"] for item in turns)  # its own call syntax
    hermes_probes, hermes_left_out = case_probes(tiny_subject())
    assert sum("<tool_call>" in probe.get("raw", "") for probe in hermes_probes) > 20
    assert hermes_left_out < left_out
