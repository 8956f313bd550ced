"""The offline prediction of vLLM 0.32 hf's answer to a forced output equals every shipped hf expectation
(the real server's recordings: test_live_conformance.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.audit.predictors.vllm_032_answers import (
    EXPLAINED_DIFFERENCES,
    HfCheckpoint,
    Refusal,
    judge_expectation,
    judge_recording,
    predict,
)
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.record.transcript import ServerStamp, Transcript
from conformance.record.wire import Message
from conformance.suite.cases import load_suite

FORCED = [(case, mode) for case in load_suite() if case.force is not None for mode in case.modes]


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint: Path) -> HfCheckpoint:
    return HfCheckpoint.load(tiny_checkpoint)


@pytest.fixture(scope="module")
def checkpoints(checkpoint: HfCheckpoint, tmp_path_factory: pytest.TempPathFactory) -> dict[str | None, HfCheckpoint]:
    """The tiny checkpoint in each variant a shipped case names (None: the record's, `full`)."""
    variants = {case.fixture_variant for case, _ in FORCED} - {None, "full"}
    folder = tmp_path_factory.mktemp("variants")
    return {None: checkpoint, "full": checkpoint,
            **{variant: HfCheckpoint.load(build_fixture(folder / variant, variant)) for variant in variants}}


def test_every_shipped_forced_output_is_predicted_as_its_hf_expectation(checkpoints: dict) -> None:
    disagreements = {}
    for case, mode in FORCED:
        check = judge_expectation(case, mode, predict(checkpoints[case.fixture_variant], case.request, case.force, mode,
                                                      case.endpoint))
        if check.outcome != "pass":
            disagreements[(case.id, mode)] = check.reason
    assert set(disagreements) == set(EXPLAINED_DIFFERENCES), disagreements
    assert len(FORCED) >= 140 and {case.endpoint for case, _ in FORCED} == {"chat", "responses"}


def _recorded(status: int, response: dict | None = None, error_body: dict | None = None) -> Transcript:
    return Transcript("case", "non-stream", "hf", "chat", ServerStamp("http://127.0.0.1:1", "m", "hf"), {},
                      status=status, response=response, error_body=error_body)


def test_a_recording_that_differs_from_the_prediction_is_judged_a_failure() -> None:
    predicted = Message(reasoning="\nplan\n", content="ok", finish_reason="stop")
    answer = {"choices": [{"message": {"role": "assistant", "reasoning": "\nplan\n", "content": "ok"}, "finish_reason": "stop"}]}
    assert judge_recording(_recorded(200, answer), predicted).outcome == "pass"
    answer["choices"][0]["message"]["content"] = "ok!"
    failed = judge_recording(_recorded(200, answer), predicted)
    assert failed.outcome == "fail" and "content" in failed.reason
    refusal = Refusal(400, "tool_choice", "cannot guarantee required tool choice")
    assert judge_recording(_recorded(200, answer), refusal).outcome == "fail"
    refused = _recorded(400, error_body={"error": {"message": "response_template parsing cannot guarantee required tool "
                                                              "choice without ...", "param": "tool_choice"}})
    assert judge_recording(refused, refusal).outcome == "pass"
    assert judge_recording(refused, predicted).outcome == "fail"
