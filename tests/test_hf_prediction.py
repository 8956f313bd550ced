"""The offline prediction of vLLM 0.32 hf's answer to a forced output equals every shipped hf expectation
(the real server's recordings: test_live_conformance.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cases import load_suite
from conformance.hf_prediction import EXPLAINED_DIFFERENCES, HfCheckpoint, judge_expectation, predict

FORCED_CHAT = [(case, mode) for case in load_suite() if case.force is not None and case.endpoint == "chat"
               for mode in case.modes]


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint: Path) -> HfCheckpoint:
    return HfCheckpoint.load(tiny_checkpoint)


def test_every_shipped_forced_chat_output_is_predicted_as_its_hf_expectation(checkpoint: HfCheckpoint) -> None:
    disagreements = {}
    for case, mode in FORCED_CHAT:
        check = judge_expectation(case, mode, predict(checkpoint, case.request, case.force, mode))
        if check.outcome != "pass":
            disagreements[(case.id, mode)] = check.reason
    assert set(disagreements) == set(EXPLAINED_DIFFERENCES), disagreements
    assert len(FORCED_CHAT) >= 130
