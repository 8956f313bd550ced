"""The gate against real vLLM 0.32 (vllm tier): legacy (hermes + qwen3) -> hf on the tiny checkpoint.

It must find the known differences, fail without expectations and pass with the shipped file, and
`compare` of its two recordings must give exactly the live gate's differences. The README's main
command (`conformance gate`, no arguments: it launches both servers itself) is run as it is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.compare.expectations import DEFAULT_PAIR_FILE
from tests.engine_helpers import modes_not_sent

REFUSED_PATTERNS = {"tool-choice-required", "tool-choice-named", "strict-tool", "parallel-tool-calls-false"}


def _by(gate: dict) -> dict[tuple[str, str, str, str | None], dict]:
    return {(d["case_id"], d["mode"], d["kind"], d["field"]): d for d in gate["differences"]}


@pytest.fixture(scope="module")
def live_gate(legacy_server, hf_server, tmp_path_factory) -> tuple[int, dict, Path]:
    out = tmp_path_factory.mktemp("gate")
    code = main(["gate", "--baseline", legacy_server.base_url, "--baseline-model", legacy_server.model,
                 "--baseline-profile", "legacy", "--candidate", hf_server.base_url, "--candidate-model",
                 hf_server.model, "--candidate-profile", "hf", "--no-expect", "--out", str(out)])
    return code, json.loads((out / "gate.json").read_text()), out


def test_the_gate_finds_the_known_legacy_to_hf_differences_and_fails_without_expectations(live_gate):
    code, gate, _ = live_gate
    assert code == 1 and gate["verdict"]["outcome"] == "fail" and gate["verdict"]["newly_failing"] == 0
    for side in gate["sides"].values():  # not sent: another variant's cases, turns the format cannot express
        not_sent = len(modes_not_sent(side["stamp"]["profile"]))
        assert (side["summary"]["counts"]["pass"], side["summary"]["counts"]["skip"]) == (side["summary"]["total"] - not_sent, not_sent)
    found = _by(gate)
    refused = {d["case_id"] for d in gate["differences"] if d["kind"] == "request_refused"}
    assert REFUSED_PATTERNS <= refused
    required = found[("tool-choice-required", "non-stream", "request_refused", "status")]
    assert required["baseline"] == {"status": 200}
    assert required["candidate"]["status"] == 400 and required["candidate"]["param"] == "tool_choice"
    streaming = found[("reasoning-then-one-call", "stream", "stream_shape", "tool_call_streaming")]
    assert (streaming["baseline"], streaming["candidate"]) == ("incremental", "whole")
    deltas = found[("reasoning-then-one-call", "stream", "stream_shape", "tool_call_deltas")]
    assert deltas["baseline"][0] > 1 and deltas["candidate"] == [1]
    cast = found[("string-values-cast-to-integer-and-boolean", "non-stream", "message", "tool_calls[0].arguments")]
    assert cast["baseline"]["json"]["days"] == "3" and cast["candidate"]["json"]["days"] == 3
    after = found[("content-after-call", "non-stream", "message", "content")]
    assert after["baseline"] is None and after["candidate"].endswith("Done.")
    usage = found[("reasoning-then-one-call", "non-stream", "usage", "usage.completion_tokens_details.reasoning_tokens")]
    assert usage["baseline"] > 0 and usage["candidate"] == 0  # contract 7.2: hf counts no reasoning tokens
    named = found[("reasoning-then-one-call", "stream", "stream_shape", "first_name_chunk")]
    assert named["candidate"][0] > named["baseline"][0]  # hf names the call only once its region closed
    timing = {case["case_id"]: case for case in gate["timing"]["cases"]}["reasoning-then-one-call"]
    assert timing["candidate"]["first_tool_name"] == timing["candidate"]["tool_call_complete"]
    assert timing["baseline"]["first_tool_name"] < timing["baseline"]["tool_call_complete"]
    assert gate["timing"]["summary"]["first_tool_name_line_delay"]["p50"] > 0  # later under hf, in data lines
    assert gate["cors"]["baseline"]["status"] == gate["cors"]["candidate"]["status"] == 400
    assert gate["cors"]["candidate"]["headers"]["access-control-allow-origin"] is None


def test_compare_of_the_recordings_gives_exactly_the_live_differences_and_the_shipped_file_passes(live_gate, tmp_path):
    code, gate, out = live_gate
    assert main(["compare", str(out / "baseline"), str(out / "candidate"), "--no-expect", "--out",
                 str(tmp_path / "again")]) == code
    again = json.loads((tmp_path / "again" / "gate.json").read_text())
    assert again["differences"] == gate["differences"] and again["timing"] == gate["timing"]
    assert main(["compare", str(out / "baseline"), str(out / "candidate"), "--expect", str(DEFAULT_PAIR_FILE),
                 "--strict", "--out", str(tmp_path / "shipped")]) == 0
    shipped = json.loads((tmp_path / "shipped" / "gate.json").read_text())
    assert shipped["verdict"]["unacknowledged"] == 0 and shipped["stale"] == []
    assert shipped["verdict"]["acknowledged"] == len(gate["differences"])


@pytest.mark.vllm
def test_the_readme_main_command_launches_both_servers_and_gates_the_switch(tmp_path):
    """`conformance gate` with no arguments, from an empty directory, as the README says."""
    completed = subprocess.run([sys.executable, "-m", "conformance", "gate"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert completed.returncode == 0, completed.stdout[:3000] + completed.stderr[-1000:]
    [gate_dir] = (tmp_path / "reports").glob("gate-*")
    gate = json.loads((gate_dir / "gate.json").read_text())
    assert gate["verdict"]["outcome"] == "pass" and gate["verdict"]["acknowledged"] > 100
    assert gate["sides"]["baseline"]["stamp"]["server_version"] == gate["sides"]["candidate"]["stamp"]["server_version"] == "0.32.0"
    assert "--reasoning-parser" in gate["sides"]["candidate"]["stamp"]["server_args"]
    assert {p.name for p in gate_dir.iterdir()} >= {"gate.json", "report.md", "report.html", "timing.png", "junit.xml",
                                                    "baseline", "candidate", "checkpoint"}
    assert gate["verdict"]["line"] in completed.stdout


@pytest.mark.vllm
def test_a_launched_gate_interrupted_midway_writes_its_record_and_leaves_no_server(tmp_path):
    """Ctrl-C once real vLLM answers: both servers (and their engines) stop, and the gate of what was
    recorded is written, stamped interrupted, with exit 130."""
    from conformance.servers.launch import descendant_pids, pid_alive

    gate = subprocess.Popen([sys.executable, "-m", "conformance", "gate", "--out", str(tmp_path / "g")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    results = tmp_path / "g" / "candidate" / "results.jsonl"
    deadline = time.monotonic() + 600
    while not (results.is_file() and len(results.read_text().splitlines()) > 3):
        assert gate.poll() is None and time.monotonic() < deadline, gate.stderr.read() if gate.poll() else "no result"
        time.sleep(0.5)
    servers = descendant_pids(gate.pid)
    gate.send_signal(signal.SIGINT)
    stdout, stderr = gate.communicate(timeout=120)
    assert gate.returncode == 130, stderr[-3000:]
    record = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert record["interrupted"] == "SIGINT" and record["verdict"]["outcome"] == "error"
    assert record["sides"]["candidate"]["stamp"]["completion"].startswith("interrupted after ")
    assert "interrupted (SIGINT)" in stdout and (tmp_path / "g" / "report.html").is_file()
    assert servers and [pid for pid in servers if pid_alive(pid)] == []
