"""What the verbs write survives hostile recordings and crowded output directories (issue 30, items 3, 6, 8
and 11): an --out that holds a run or a gate is kept unless --replace, one writer per directory at a time,
default directories that never collide, any string a server sends written and printed, a full disk or an
--out that is a file an exit 2 saying "cannot write PATH: REASON", and one rule for every --timeout.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.util.output_dirs import claimed_directory
from tests.engine_helpers import load_cases
from tests.fake_server import fake_server
from tests.test_hostile import assert_clean_error

CASES = """
- id: ok
  description: The fake server answers with reasoning and one whole tool call, streaming or not.
  features: [reasoning, tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "forced <think> text"
  expect:
    hf: &ok
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
    legacy: *ok
"""
NO_SERVER = "http://127.0.0.1:9/v1"  # for verbs refused before any request
ROOT = Path(__file__).resolve().parents[1]


def cli_process(*args: str | Path, preexec: Callable[[], None] | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, `preexec` run in it first (a resource limit), within `timeout` seconds."""
    return subprocess.run([sys.executable, "-m", "conformance", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=False)


def record_runs(root: Path) -> tuple[Path, Path, Path]:
    """(a legacy run, an hf run, their case directory), recorded from a fake server under `root`."""
    cases = root / "cases"
    load_cases(cases, CASES)
    (cases / "features.txt").write_text((Path(__file__).parents[1] / "cases" / "features.txt").read_text())
    with fake_server() as server:
        for profile, name in (("legacy", "a"), ("hf", "b")):
            assert main(run_args(server.base_url, profile, cases, root / name)) == 0
    return root / "a", root / "b", cases


def run_args(url: str, profile: str, cases: Path, out: Path) -> list[str]:
    return ["run", "--base-url", url, "--model", "fake", "--profile", profile, "--cases", str(cases),
            "--forcing", "trust", "--out", str(out)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path, Path]:
    return record_runs(tmp_path_factory.mktemp("recorded"))


def verb_args(verb: str, recorded: tuple[Path, Path, Path], out: Path | None, url: str = NO_SERVER) -> list[str]:
    """The arguments of `verb` writing into `out` (None: its default), run and gate against `url`."""
    a, b, cases = recorded
    args = {
        "run": ["run", "--base-url", url, "--model", "fake", "--profile", "hf", "--forcing", "trust"],
        "gate": ["gate", "--baseline", url, "--baseline-model", "fake", "--baseline-profile", "legacy",
                 "--candidate", url, "--candidate-model", "fake", "--candidate-profile", "hf", "--forcing", "trust",
                 "--no-expect"],
        "compare": ["compare", str(a), str(b), "--no-expect"],
        "recheck": ["recheck", str(a / "transcripts.jsonl")],
        "contract": ["contract", str(a), str(b)],
    }[verb]
    return [*args, "--cases", str(cases), *(["--out", str(out)] if out is not None else [])]


def contents(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


# --- 3. one run or gate per directory, one writer at a time, default names that never collide -------------

@pytest.mark.parametrize("verb", ["run", "recheck", "compare", "gate"])
def test_an_out_that_holds_a_run_is_kept_unless_replace_is_given(recorded, tmp_path, capsys, verb) -> None:
    out = tmp_path / "earlier"
    shutil.copytree(recorded[0], out)
    before = contents(out)
    with fake_server() as server:
        assert main(verb_args(verb, recorded, out, server.base_url)) == 2
        assert f"{out} already holds transcripts.jsonl" in capsys.readouterr().err
        assert contents(out) == before
        assert main([*verb_args(verb, recorded, out, server.base_url), "--replace"]) in (0, 1)
    written = {"run": "transcripts.jsonl", "recheck": "results.jsonl", "compare": "gate.json", "gate": "gate.json"}
    assert (out / written[verb]).stat().st_mtime_ns > (recorded[0] / "run.json").stat().st_mtime_ns


@pytest.mark.parametrize("verb", ["run", "recheck", "compare", "gate", "contract"])
def test_a_second_writer_of_one_out_is_refused_while_the_first_writes(recorded, tmp_path, capsys, verb) -> None:
    out = tmp_path / "busy"
    with claimed_directory(out, (), replace=False):  # what another conformance process holds while it writes
        assert main(verb_args(verb, recorded, out)) == 2
    assert f"cannot write {out}: another conformance process is writing to it" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    if verb == "compare":  # the first writer done, the directory is free
        assert main(verb_args(verb, recorded, out)) == 0


@pytest.mark.parametrize(("verb", "record"), [("compare", "gate.json"), ("recheck", "results.jsonl")])
def test_default_outs_made_in_the_same_second_are_two_directories(recorded, tmp_path, monkeypatch, verb,
                                                                  record) -> None:
    class FrozenClock(datetime):
        @classmethod
        def now(cls, tz=None) -> datetime:
            return datetime(2026, 12, 1, 10, 0, 0)

    monkeypatch.setattr("conformance.util.output_dirs.datetime", FrozenClock)
    a, b = (shutil.copytree(run, tmp_path / run.name) for run in recorded[:2])
    args = verb_args(verb, (a, b, recorded[2]), None)
    assert main(args) == 0 and main(args) == 0
    parent = tmp_path if verb == "compare" else a  # beside the candidate run; beside the transcripts
    made = sorted(path.name for path in parent.iterdir() if path.name.startswith(verb))
    assert made == [f"{verb}-20261201-100000", f"{verb}-20261201-100000-2"]
    assert all((parent / name / record).stat().st_size > 0 for name in made)


# --- 6. any string a server sends: written, printed, and the verdict kept ----------------------------------

def test_a_lone_surrogate_in_an_answer_keeps_the_gates_verdict_and_reports(recorded, tmp_path) -> None:
    a, b, cases = recorded
    candidate = shutil.copytree(b, tmp_path / "candidate")
    recording = candidate / "transcripts.jsonl"
    recording.write_text(recording.read_text().replace("Paris", "Par\\ud800is"))  # legal JSON, no UTF-8 text
    out = tmp_path / "out"
    completed = cli_process("compare", a, candidate, "--cases", cases, "--no-expect", "--out", out)
    assert completed.returncode == 1 and "Traceback" not in completed.stderr, completed.stderr[-2000:]
    assert '{"city": "Par\\ud800is"} under the candidate' in completed.stdout  # printed as its escape
    gate = json.loads((out / "gate.json").read_text("utf-8"))
    assert gate["verdict"]["unacknowledged"] > 0
    assert any("Par\ud800is" in json.dumps(d["candidate"], ensure_ascii=False) for d in gate["differences"])
    assert all((out / name).stat().st_size > 0 for name in ("report.md", "report.html", "junit.xml"))


# --- 8. an --out that is a file, a full disk: "cannot write PATH: REASON", exit 2 --------------------------

@pytest.mark.parametrize("verb", ["run", "recheck", "compare", "gate", "contract"])
def test_an_out_that_is_a_file_cannot_be_written_exit_2(recorded, tmp_path, capsys, verb) -> None:
    out = tmp_path / "a-file"
    out.write_text("taken")
    assert main(verb_args(verb, recorded, out)) == 2
    assert f"cannot write {out}: a file, not a directory" in capsys.readouterr().err
    assert out.read_text() == "taken"


def small_file_limit() -> None:
    """A disk that is full past 4 KiB a file, for the process about to run (a write past it fails, EFBIG)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


@pytest.mark.parametrize("verb", ["run", "recheck", "compare", "gate", "contract"])
def test_a_full_disk_is_an_exit_2_saying_cannot_write(recorded, tmp_path, verb) -> None:
    out = tmp_path / "out"
    with fake_server() as server:
        completed = cli_process(*verb_args(verb, recorded, out, server.base_url), preexec=small_file_limit)
    assert_clean_error(completed, f"cannot write {out}", "File too large")


def test_a_gate_record_that_cannot_be_written_leaves_the_earlier_one_whole(recorded, tmp_path) -> None:
    out = tmp_path / "out"
    assert main(verb_args("compare", recorded, out)) == 0
    earlier = (out / "gate.json").read_bytes()
    completed = cli_process(*verb_args("compare", recorded, out), "--replace", preexec=small_file_limit)
    assert_clean_error(completed, f"cannot write {out}", "File too large")
    assert (out / "gate.json").read_bytes() == earlier
    assert not [path.name for path in out.iterdir() if path.name.endswith(".tmp")]


# --- 11. one rule for every --timeout --------------------------------------------------------------------

@pytest.mark.parametrize("timeout", ["inf", "nan", "0", "-1"])
@pytest.mark.parametrize("verb", ["run", "gate", "audit", "serve"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused_in_every_verb(recorded, tmp_path, capsys,
                                                                                 monkeypatch, verb, timeout) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the audit asks no Hub, whatever it is told
    other = {"audit": ["audit", "a/b@main"], "serve": ["serve", "--profile", "hf", "--model", str(tmp_path / "m")]}
    args = other[verb] if verb in other else verb_args(verb, recorded, tmp_path / "out")
    assert main([*args, "--timeout", timeout]) == 2
    assert "--timeout must be a positive number of seconds" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
