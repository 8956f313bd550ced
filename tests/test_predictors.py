"""The predictor table: one record per predicted server release, and the audit report as its view."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import datetime
from pathlib import Path

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.predictors.registry import PREDICTOR_KEYS, PREDICTORS
from conformance.audit.template_rules import analyze_template_unbounded
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.report.audit.report import build_report
from conformance.util.package_paths import load_schema
from tests.audit_helpers import QWEN3_STYLE


def test_the_report_holds_one_key_per_predictor_in_the_registrys_order_and_the_schema_requires_each(
        tmp_path: Path) -> None:
    report = build_report([audit_local(build_fixture(tmp_path / "full"))], started_at=datetime.now(), complete=True)
    keys = list(report["checkpoints"][0])
    first = keys.index(PREDICTOR_KEYS[0])
    assert tuple(keys[first:first + len(PREDICTOR_KEYS)]) == PREDICTOR_KEYS
    schema = load_schema("audit-report.schema.json")["properties"]["checkpoints"]["items"]
    assert set(PREDICTOR_KEYS) <= set(schema["required"]) and set(PREDICTOR_KEYS) <= set(schema["properties"])


def test_every_prediction_is_the_predictors_own_verdict_for_the_template() -> None:
    analysis = analyze_template_unbounded({"response_template": QWEN3_STYLE})
    assert list(analysis.predictions) == list(PREDICTOR_KEYS)
    for predictor in PREDICTORS:
        assert getattr(analysis, predictor.key) is analysis.predictions[predictor.key]
        assert set(analysis.predictions[predictor.key]) == {"tool_call_parser_hf", "reasoning_parser_hf", "both"}


def test_a_prediction_replaced_by_key_keeps_the_others_and_an_unknown_key_is_refused() -> None:
    analysis = analyze_template_unbounded({"response_template": QWEN3_STYLE})
    changed = dataclasses.replace(analysis, vllm_0_33={})
    assert changed.vllm_0_33 == {} and changed.vllm_0_32 == analysis.vllm_0_32
    try:
        dataclasses.replace(analysis, vllm_9_99={})
    except TypeError as error:
        assert "vllm_9_99" in str(error)
    else:
        raise AssertionError("an unknown prediction key was accepted")


def test_an_analysis_crosses_the_worker_boundary_whole() -> None:
    analysis = analyze_template_unbounded({"response_template": QWEN3_STYLE})
    assert pickle.loads(pickle.dumps(analysis)) == analysis
