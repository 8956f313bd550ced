"""Gate a vLLM upgrade on real servers (vllm tier): hf (vLLM 0.32) -> hf-0.33, attached to the pool's
servers, on the tiny checkpoint's default variant and on `closer-ends-with-anchor` (the cases that
need it). It finds the known 0.33 differences and exits 1 without expectations; `compare` of its
recordings exits 0 with the shipped file (the pair's default); on each side the cases of that
variant pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.compare.expectations import shipped_expectations

CLOSER_VARIANT = "closer-ends-with-anchor"
UPGRADE_FILE = shipped_expectations("hf", "hf-0.33")


def _gate(baseline: Any, candidate: Any, out: Path, *options: str) -> tuple[int, dict]:
    code = main(["gate", "--baseline", baseline.base_url, "--baseline-model", baseline.model, "--baseline-profile",
                 "hf", "--candidate", candidate.base_url, "--candidate-model", candidate.model,
                 "--candidate-profile", "hf-0.33", *options, "--out", str(out)])
    return code, json.loads((out / "gate.json").read_text())


def _found(gate: dict) -> dict[tuple[str, str, str, str | None], dict]:
    return {(d["case_id"], d["mode"], d["kind"], d["field"]): d for d in gate["differences"]}


def _all_judged_cases_pass(gate: dict) -> bool:
    return all(side["summary"]["counts"]["fail"] == side["summary"]["counts"]["error"] == 0
               for side in gate["sides"].values())


def _live_then_shipped(baseline: Any, candidate: Any, out: Path, *options: str) -> dict[str, tuple[int, dict]]:
    """The live gate without expectations, then `compare` of its recordings (no server) with no
    --expect: the default for the recordings' profiles hf -> hf-0.33, the shipped upgrade file."""
    bare = _gate(baseline, candidate, out / "bare", *options, "--no-expect")
    code = main(["compare", str(out / "bare" / "baseline"), str(out / "bare" / "candidate"), "--out",
                 str(out / "shipped")])
    return {"bare": bare, "shipped": (code, json.loads((out / "shipped" / "gate.json").read_text()))}


@pytest.fixture(scope="module")
def upgrade_gates(hf_server, hf_033_server, tmp_path_factory) -> dict[str, tuple[int, dict]]:
    return _live_then_shipped(hf_server, hf_033_server, tmp_path_factory.mktemp("upgrade-gate"))


@pytest.fixture(scope="module")
def closer_gates(hf_closer_server, hf_033_closer_server, tmp_path_factory) -> dict[str, tuple[int, dict]]:
    return _live_then_shipped(hf_closer_server, hf_033_closer_server, tmp_path_factory.mktemp("upgrade-gate-closer"),
                              "--fixture-variant", CLOSER_VARIANT)


def test_the_upgrade_gate_finds_the_known_033_differences_and_fails_without_expectations(upgrade_gates):
    code, gate = upgrade_gates["bare"]
    assert code == 1 and gate["verdict"]["newly_failing"] == 0 and _all_judged_cases_pass(gate)
    assert gate["sides"]["candidate"]["stamp"]["server_version"] == "0.33.0"
    found = _found(gate)
    counted = "usage.completion_tokens_details.reasoning_tokens"
    for case in ("reasoning-tokens-counted", "reasoning-tokens-counted-with-include-reasoning-false"):
        usage = found[(case, "non-stream", "usage", counted)]
        assert usage["baseline"] == 0 and usage["candidate"] > 0, case  # 0.33 counts them, hidden or not
    cut = found[("complete-call-then-text-cut-by-max-tokens", "non-stream", "finish_reason", "finish_reason")]
    assert (cut["baseline"], cut["candidate"]) == ("tool_calls", "length")
    # tool_choice null: 0.32 dropped the call only when not streaming, 0.33 drops it in the stream too
    lost = [d for d in gate["differences"] if d["case_id"] == "tool-choice-null-with-tools" and d["kind"] == "message"]
    assert [(d["mode"], d["field"], len(d["baseline"]), d["candidate"]) for d in lost] == [("stream", "tool_calls", 1, [])]
    cast = found[("whole-float-string-for-integer-parameter", "non-stream", "message", "tool_calls[0].arguments")]
    assert cast["candidate"]["json"]["days"] == 3 and cast["baseline"]["json"]["days"] != 3


def test_the_shipped_upgrade_expectations_acknowledge_every_difference(upgrade_gates):
    bare_code, bare = upgrade_gates["bare"]
    code, gate = upgrade_gates["shipped"]
    assert code == 0 and gate["verdict"]["unacknowledged"] == 0
    assert gate["expectations"]["file"] == UPGRADE_FILE.name
    assert gate["verdict"]["acknowledged"] == len(bare["differences"]) > 0


def test_on_the_closer_variant_033_completes_the_closer_and_keeps_the_call(closer_gates):
    code, gate = closer_gates["bare"]
    assert code == 1 and _all_judged_cases_pass(gate)
    assert all(side["summary"]["counts"]["pass"] >= 2 for side in gate["sides"].values())  # the variant's cases
    calls = [d for d in gate["differences"] if d["case_id"] == "call-stopped-inside-closer-before-anchor"
             and d["kind"] == "message" and d["field"] == "tool_calls"]
    assert {d["mode"] for d in calls} == {"non-stream", "stream"}
    for difference in calls:
        assert difference["baseline"] == [] and [c["name"] for c in difference["candidate"]] == ["get_weather"]
    shipped_code, shipped = closer_gates["shipped"]
    assert shipped_code == 0 and shipped["verdict"]["unacknowledged"] == 0


def test_the_audit_predicts_that_hf_starts_on_the_closer_variant(hf_closer_server):
    from conformance.audit.template_worker import predict_vllm_startup

    config = json.loads((Path(hf_closer_server.model) / "tokenizer_config.json").read_text())
    assert predict_vllm_startup(config)["both"].starts and hf_closer_server.version == "0.32.0"


def test_the_upgrade_file_is_the_default_for_the_pair_and_names_only_known_cases_and_features():
    from conformance.compare.expectations import load_expectations, unknown_selectors
    from conformance.suite.cases import load_features, load_suite

    assert UPGRADE_FILE is not None and UPGRADE_FILE.name == "vllm-0.32-to-0.33-hf.yaml"
    entries = load_expectations(UPGRADE_FILE)
    assert unknown_selectors(entries, {case.id for case in load_suite()}, set(load_features())) == []
    assert {entry.kind for entry in entries} >= {"usage", "finish_reason", "message", "stream_shape"}
