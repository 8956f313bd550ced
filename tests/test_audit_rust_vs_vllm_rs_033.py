"""Differential test: the audit's `vllm_0_33_rust` verdicts equal what vLLM 0.33's Rust frontend does.

As for 0.32 (tests/test_audit_rust_vs_vllm_rs.py, whose judging this reuses): the frontend part from
the 0.33 binary's engine-free `vllm-rs render` (the `vllm/vllm-rs` of the 0.33 wheel, in the hf-0.33
overlay), one chat request per template of the mutation corpus; the engine part (`--reasoning-parser hf`,
forwarded to the managed Python engine) from 0.33's own engine configuration code, asked for the whole
corpus in one batch in a worker over the overlay (tests/vllm_decides.py). The frontend rules are 0.32's
(conformance/audit/predictors/vllm_033.py); this shows the 0.33 binary keeps them.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.audit.template_rules import analyze_template_unbounded
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.runtimes.vllm_033 import rust_frontend_binary
from tests.test_audit_rust_vs_vllm_rs import (
    CORPUS,
    FLAGS,
    PATTERN_PIECES,
    assert_corpus_agrees,
    assert_pattern_agrees,
    observed,
)
from tests.vllm_decides import ENGINE, overlay_worker
from tests.vllm_rs_render import RenderFrontend

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def render(tmp_path_factory: pytest.TempPathFactory) -> RenderFrontend:
    base = build_fixture(tmp_path_factory.mktemp("tiny") / "full")
    return RenderFrontend(rust_frontend_binary(), base, tmp_path_factory.mktemp("render"))


@pytest.fixture(scope="module")
def engine() -> dict[str, str | None]:
    """Case id -> vLLM 0.33's engine configuration error for the template (None: accepted)."""
    worker = overlay_worker("0.33.0", {})
    try:
        answers = worker.errors([config for _, config in CORPUS])
    finally:
        worker.close()
    return {case_id: answer[ENGINE] for (case_id, _), answer in zip(CORPUS, answers, strict=True)}


def test_corpus_prediction_equals_the_033_rust_frontend(render: RenderFrontend, engine: dict) -> None:
    assert_corpus_agrees(render, "vllm_0_33_rust", lambda case_id, _: engine[case_id])


@pytest.mark.parametrize("configuration", ["tool_call_parser_hf", "reasoning_parser_hf"])
def test_one_hf_flag_is_judged_as_on_033(render: RenderFrontend, engine: dict, configuration: str) -> None:
    for case_id, tokenizer_config in CORPUS[::40]:
        predicted = analyze_template_unbounded(tokenizer_config).vllm_0_33_rust[configuration]
        answer = render.answer(tokenizer_config, FLAGS[configuration])
        assert predicted == observed(engine[case_id], *answer, configuration == "reasoning_parser_hf"), case_id


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(PATTERN_PIECES), min_size=1, max_size=6), anchor=st.sampled_from(["open", "close"]))
def test_generated_delimiter_patterns_equal_the_033_rust_frontend(render: RenderFrontend, pieces: list[str],
                                                                  anchor: str) -> None:
    assert_pattern_agrees(render, pieces, anchor)
