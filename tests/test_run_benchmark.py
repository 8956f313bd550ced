"""benchmarks/run_benchmark.py reports the tool's CPU against a bare openai client and against its
own sending, with the goals, here against the loopback fake server (real vLLM: README)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_server import fake_server

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "run_benchmark.py"


def test_the_benchmark_prints_both_ratios_with_their_goals_and_exits_by_them(tmp_path: Path) -> None:
    with fake_server() as server:
        completed = subprocess.run(
            [sys.executable, str(BENCHMARK), "--base-url", server.base_url, "--model", "fake", "--runs", "3",
             "--json", str(tmp_path / "bench.json")],
            capture_output=True, text=True, timeout=300,
        )
    assert completed.returncode in (0, 1), completed.stderr
    measured = json.loads((tmp_path / "bench.json").read_text())
    tool, bare, sending = (measured[key] for key in ("tool_cpu_seconds", "bare_client_cpu_seconds",
                                                      "sending_alone_cpu_seconds"))
    vs_bare, vs_sending = measured["tool_vs_bare_client"], measured["tool_vs_sending_alone"]
    assert vs_bare == pytest.approx(tool / bare, rel=0.02) and vs_sending == pytest.approx(tool / sending, rel=0.02)
    assert (measured["goal_vs_bare_client"], measured["goal_vs_sending_alone"]) == (1.0, 1.5)
    assert (f"tool CPU / bare client CPU: {vs_bare:.2f} (goal <= 1.0); "
            f"tool CPU / its sending alone: {vs_sending:.2f} (goal <= 1.5)") in completed.stdout
    assert completed.returncode == (0 if vs_bare <= 1.0 and vs_sending <= 1.5 else 1)
    own, allowed = measured["tool_own_cpu_seconds"], measured["goals_allow_own_cpu_seconds"]
    assert own == pytest.approx(tool - sending, abs=0.002)
    assert allowed == pytest.approx(min(bare, 1.5 * sending) - sending, abs=0.002)
    assert f"the tool's own work beyond its sending: {own:.2f} s of CPU; the goals leave it {allowed:.2f} s" \
        in completed.stdout
    # each measurement goes first in turn, and the verdict's medians come with the per-run spread
    assert [line.split(":")[0] for line in completed.stderr.splitlines() if line.startswith("run ")] == [
        "run 1 (tool, bare, sending)", "run 2 (bare, sending, tool)", "run 3 (sending, tool, bare)"]
    per_run = measured["per_run_tool_vs_sending_alone"]
    assert len(per_run) == 2 and min(per_run) <= vs_sending * 1.02 and max(per_run) >= vs_sending * 0.98
    assert (f"run by run (the noise the medians take out): tool / bare client "
            f"{min(measured['per_run_tool_vs_bare_client']):.2f}-{max(measured['per_run_tool_vs_bare_client']):.2f}, "
            f"tool / sending alone {min(per_run):.2f}-{max(per_run):.2f}") in completed.stdout


@pytest.mark.parametrize("script", sorted(path.name for path in BENCHMARK.parent.glob("*.py")))
def test_every_benchmark_script_imports_and_explains_itself(script: str) -> None:
    """Each benchmark starts (its imports resolve) and its --help says what it measures: one had
    imported a name its module no longer defined, which nothing ran until someone measured with it."""
    done = subprocess.run([sys.executable, str(BENCHMARK.parent / script), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:") and len(done.stdout.splitlines()) > 3
