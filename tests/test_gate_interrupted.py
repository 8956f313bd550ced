"""An interrupted gate (Ctrl-C or SIGTERM) writes its record and reports from what both sides recorded,
stamped interrupted, and exits 130 (SIGINT) or 143 (SIGTERM); a gate whose servers are still starting stops them
at once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conformance.run import gate_sides
from conformance.run.gate_sides import GateSide
from conformance.servers.launch import ServerStartError
from tests.engine_helpers import case_directory
from tests.fake_server import fake_server
from tests.test_gate import CASES, _gate_args

STALLING = CASES + """\
- id: stall
  description: The fake server sends the role chunk of this answer and then nothing for minutes.
  features: [reasoning]
  request:
    messages: [{role: user, content: stall}]
  expect:
    hf: {message: {content: "never"}, finish_reason: stop}
    legacy: {message: {content: "never"}, finish_reason: stop}
"""


@pytest.fixture(scope="module")
def stalling_cases(tmp_path_factory) -> Path:
    return case_directory(tmp_path_factory.mktemp("stalling"), STALLING)


def results_of(path: Path) -> int:
    """Result lines written so far (the header aside)."""
    return max(0, len(path.read_text().splitlines()) - 1) if path.is_file() else 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_gate_interrupted_midway_writes_the_gate_of_what_was_recorded(stalling_cases, tmp_path, stop):
    out = tmp_path / "g"
    with fake_server(stall_seconds=300) as one, fake_server(stall_seconds=300) as other:
        command = [sys.executable, "-m", "conformance", *_gate_args(one, other, stalling_cases, out, "--no-expect",
                                                                    "--timeout", "600")]
        gate = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while results_of(out / "candidate" / "results.jsonl") < 4 or results_of(out / "baseline" / "results.jsonl") < 4:
            assert time.monotonic() < deadline and gate.poll() is None, "the two answered cases were not recorded"
            time.sleep(0.2)
        gate.send_signal(stop)
        stdout, stderr = gate.communicate(timeout=60)
    assert gate.returncode == 128 + stop, stderr  # the shell's code for a process the signal stopped
    record = json.loads((out / "gate.json").read_text())
    name = signal.Signals(stop).name
    assert record["verdict"]["exit_code"] == gate.returncode
    assert record["interrupted"] == name and record["verdict"]["outcome"] == "error"
    assert record["verdict"]["line"].startswith(f"interrupted ({name})")
    # the stalled case's non-streaming answer came back, its stream did not: it was never judged on either side
    assert record["missing"] == {"baseline": ["stall[non-stream]"], "candidate": ["stall[non-stream]"]}
    assert record["sides"]["candidate"]["stamp"]["completion"] == "interrupted after 4 results"
    for report in ("report.md", "report.html", "junit.xml", "baseline/report.md", "candidate/report.html"):
        assert (out / report).is_file(), report
    assert f"interrupted ({name})" in (out / "report.md").read_text() and f"interrupted ({name})" in stdout


class NeverHealthy:
    """A started server that never answers its readiness path: its wait ends only when it is stopped."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def wait_until_healthy(self) -> None:
        if self.stopped.wait(30):
            raise ServerStartError("stopped while starting", server_error=None, log_path=Path("server.log"))
        raise AssertionError("nobody stopped the starting server")

    def stop(self) -> None:
        self.stopped.set()


def test_ctrl_c_while_the_servers_start_stops_them_at_once(tmp_path, monkeypatch):
    """Before, the gate waited for each start to end (its 300 s timeout) before stopping anything."""
    started: list[NeverHealthy] = []
    monkeypatch.setattr(gate_sides, "start", lambda *args, **kwargs: started.append(NeverHealthy()) or started[-1])

    def ctrl_c() -> None:  # the user presses Ctrl-C while both servers boot
        raise KeyboardInterrupt

    sides = [GateSide("baseline", "legacy", checkpoint=tmp_path), GateSide("candidate", "hf", checkpoint=tmp_path)]
    begun = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with gate_sides.targets_for(sides, tmp_path, api_key="k", timeout=1.0, forcing={}, meanwhile=ctrl_c):
            pass
    assert time.monotonic() - begun < 10 and len(started) == 2 and all(s.stopped.is_set() for s in started)
