"""Every shipped format vLLM 0.32 serves, gated live (vllm tier): legacy (the format's own parsers) -> hf on
the format's tiny checkpoint, the format-independent cases rendered in it and judged against its own parse.

For each format: the gate fails without expectations and passes with the file shipped for it (`compare
--strict` of the same recordings: no stale entry either); each side passes every case the format can
express, a declared deviation (`deviations` in the format's record) showing as the known bug it is; a case
written in the tiny checkpoint's format is skipped as such, never judged in another.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.compare.expectations import shipped_expectations
from conformance.formats.registry import FORMATS
from conformance.suite.cases import load_suite


def _gate(form: str, legacy, hf, out: Path) -> tuple[int, dict, Path]:
    code = main(["gate", "--format", form, "--baseline", legacy.base_url, "--baseline-model", legacy.model,
                 "--baseline-profile", "legacy", "--candidate", hf.base_url, "--candidate-model", hf.model,
                 "--candidate-profile", "hf", "--no-expect", "--out", str(out)])
    return code, json.loads((out / "gate.json").read_text()), out


def _results(side_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (side_dir / "results.jsonl").read_text().splitlines()[1:]]


def _judged_as_the_format_means(form: str, live: tuple[int, dict, Path], tmp_path: Path) -> None:
    code, gate, out = live
    assert code == 1 and gate["verdict"]["unacknowledged"] > 0 and gate["verdict"]["newly_failing"] == 0
    assert main(["compare", str(out / "baseline"), str(out / "candidate"), "--strict", "--out",
                 str(tmp_path / "shipped")]) == 0  # the file shipped for (format, legacy, hf), nothing stale
    shipped = json.loads((tmp_path / "shipped" / "gate.json").read_text())
    assert shipped["expectations"]["file"] == shipped_expectations("legacy", "hf", form).name
    record = FORMATS[form]
    turns = {case.id: case for case in load_suite(form=record) if case.turn is not None}
    expressible = {case_id for case_id, case in turns.items() if case.reference.skip is None}
    assert len(expressible) >= len(turns) - 1  # Gemma 4: transformers cannot parse a call cut at its own closer
    for profile, side in (("legacy", "baseline"), ("hf", "candidate")):
        results = _results(out / side)
        granular = {result["mode"] for result in results if result["mode"].startswith("stream@")}  # its granularities
        assert granular == {"stream@3", "stream@whole"}
        # a deviation of the stream holds at every granularity (the stream's expectation applies there)
        declared = {(d.case, mode) for d in record.deviations if d.profile == profile
                    for mode in (*d.modes, *(granular if "stream" in d.modes else ()))}
        stream_bugs = {(bug.case, mode) for bug in record.stream_bugs if bug.profile == profile for mode in bug.modes}
        for result in results:
            if result["case_id"] not in turns:  # written in the tiny checkpoint's format: skipped as such
                assert result["outcome"] == "skip" and result["skip_kind"] == "other_format", result
            elif result["case_id"] not in expressible:  # a turn the format cannot express: a skip saying why
                assert result["outcome"] == "skip" and "format cannot express this turn" in result["reason"], result
            elif (result["case_id"], result["mode"]) in stream_bugs:  # its failures are the declared bug's findings
                assert result["outcome"] == "pass" and any(c["name"] == "known_stream_bug" for c in result["checks"])
            elif (result["case_id"], result["mode"]) not in declared:
                assert result["outcome"] == "pass", (profile, result["case_id"], result["mode"], result["checks"])
            else:  # the declared bug's answer is expected; the contract checks it breaks still fail
                failed = {check["name"] for check in result["checks"] if check["outcome"] in ("fail", "error")}
                assert failed <= {"arguments_json", "arguments_schema", "known_deviation"}, (result["case_id"], failed)
        shown = {(r["case_id"], r["mode"]) for r in results
                 for check in r["checks"] if check["name"] == "known_deviation"}
        assert shown == declared  # each declared bug still happens, reported as one, and nothing else is one
        split = {(r["case_id"], r["mode"]) for r in results
                 for check in r["checks"] if check["name"] == "split_invariance" and check["outcome"] == "fail"}
        assert split == stream_bugs  # likewise at several tokens per delta


@pytest.fixture(scope="module")
def gemma4_gate(legacy_gemma4_server, hf_gemma4_server, tmp_path_factory) -> tuple[int, dict, Path]:
    return _gate("gemma4", legacy_gemma4_server, hf_gemma4_server, tmp_path_factory.mktemp("gemma4"))


@pytest.fixture(scope="module")
def qwen3_xml_gate(legacy_qwen3_xml_server, hf_qwen3_xml_server, tmp_path_factory) -> tuple[int, dict, Path]:
    return _gate("qwen3-xml", legacy_qwen3_xml_server, hf_qwen3_xml_server, tmp_path_factory.mktemp("qwen3-xml"))


@pytest.fixture(scope="module")
def glm45_gate(legacy_glm45_server, hf_glm45_server, tmp_path_factory) -> tuple[int, dict, Path]:
    return _gate("glm45", legacy_glm45_server, hf_glm45_server, tmp_path_factory.mktemp("glm45"))


def test_gemma4_is_judged_as_its_own_parse_and_its_legacy_bugs_are_declared(gemma4_gate, tmp_path):
    _judged_as_the_format_means("gemma4", gemma4_gate, tmp_path)
    _, gate, _ = gemma4_gate
    nested = {(d["mode"], d["field"]): d for d in gate["differences"] if d["case_id"] == "turn-nested-arguments"}
    arguments = nested[("non-stream", "tool_calls[0].arguments")]
    assert arguments["baseline"]["json"]["passengers"][0]["count"] == "2"  # gemma4's parser: a string
    assert arguments["candidate"]["json"]["passengers"][0]["count"] == 2


def test_qwen3_xml_is_judged_as_its_own_parse(qwen3_xml_gate, tmp_path):
    _judged_as_the_format_means("qwen3-xml", qwen3_xml_gate, tmp_path)


def test_glm45_is_judged_as_its_own_parse_with_its_strict_tool_grammar_off(glm45_gate, legacy_glm45_server, tmp_path):
    _judged_as_the_format_means("glm45", glm45_gate, tmp_path)
    # the legacy side runs GLM's own parsers, its strict tool grammar turned off by the format's record (with
    # it on, the parser's required-tool grammar beats the forced text: ../shared/facts/formats.md)
    assert legacy_glm45_server.args[legacy_glm45_server.args.index("--tool-call-parser") + 1] == "glm45"
    environment = Path(f"/proc/{legacy_glm45_server.pid}/environ").read_bytes().split(b"\0")
    assert b"VLLM_ENFORCE_STRICT_TOOL_CALLING=0" in environment
