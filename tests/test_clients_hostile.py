"""Faults of the client replay (issue 30): an answer holding a lone surrogate reaches each client as the
server sent it, and a Node batch that hangs or dies is reported, its calls `not_run`, without losing the
other clients' findings or an earlier good report. The Node project is a fake one
($CONFORMANCE_NODE_CLIENTS) whose replay.mjs sleeps forever or exits at once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from client_samples import REQUEST, samples, write_recording
from engine_helpers import response_transcript

from conformance.cli import main
from conformance.clients import node_ai_sdk
from conformance.clients.idioms import REQUIRED
from conformance.clients.jobs import Job
from conformance.clients.record import CLIENTS_FILE, ClientFinding, read_findings, read_recording
from conformance.clients.replay_server import Answer, answer_of, running
from conformance.report.clients import markdown as clients_markdown
from conformance.util.package_paths import NODE_PROJECT_DIR

ROOT = Path(__file__).resolve().parents[1]
LOG_START = 'import { appendFileSync } from "node:fs";\n' \
            'appendFileSync(new URL("./started", import.meta.url), `${process.pid}\\n`);\n'
SLEEPS_FOREVER = LOG_START + "setInterval(() => {}, 1000);\n"
DIES_AT_START = LOG_START + ('console.error("starting");\n'
                             'console.error("Fatal process out of memory: Failed to reserve virtual memory");\n'
                             "process.exit(7);\n")
# The real replay.mjs the first time, dying at start from the second time on.
DIES_THE_SECOND_TIME = ('import { readFileSync, existsSync } from "node:fs";\n'
                        'const started = new URL("./started", import.meta.url);\n'
                        "const before = existsSync(started) ? readFileSync(started, 'utf8') : '';\n"
                        + LOG_START + 'if (before) { console.error("second start refused"); process.exit(7); }\n'
                        'await import("./real.mjs");\n')
TWO_MODES = [t for t in samples() if t.case_id == "reasoning-field"]  # a stream and a non-streaming answer


def fake_node_project(directory: Path, script: str, *, real_packages: bool = False) -> Path:
    """A Node project whose replay.mjs is `script`: beside version files of the pinned packages, or the
    real packages and the real replay.mjs as real.mjs."""
    directory.mkdir()
    if real_packages:
        (directory / "node_modules").symlink_to(NODE_PROJECT_DIR / "node_modules")
        shutil.copy(NODE_PROJECT_DIR / "replay.mjs", directory / "real.mjs")
    else:
        for package in ("ai", "@ai-sdk/openai-compatible"):
            (directory / "node_modules" / package).mkdir(parents=True)
            (directory / "node_modules" / package / "package.json").write_text('{"version": "7.0.0"}')
    (directory / "replay.mjs").write_text(script)
    return directory


def started_pids(project: Path) -> list[int]:
    """The process id of each Node start of the fake project."""
    started = project / "started"
    return [int(line) for line in started.read_text().split()] if started.exists() else []


def killed(pid: int) -> bool:
    """Whether `pid` was still running (it is killed)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def by_client(path: Path) -> dict[str, list[ClientFinding]]:
    findings: dict[str, list[ClientFinding]] = {}
    for finding in read_findings(path)[1]:
        findings.setdefault(finding.client, []).append(finding)
    return findings


def test_a_lone_surrogate_reaches_the_ai_sdk_as_the_servers_escaped_bytes_would():
    transcript = response_transcript({"content": "a\ud800b"}, "stop", request=REQUEST)
    served = b"".join(answer_of(transcript).pieces)
    as_sent = json.dumps(transcript.response).encode()  # a server's JSON: the surrogate as its escape
    assert b'"a\\ud800b"' in served and json.loads(served) == json.loads(as_sent)
    with running() as server:
        slots = [server.register(answer_of(transcript)), server.register(Answer(200, "application/json", (as_sent,)))]
        results = node_ai_sdk.run_batch([Job(str(slot), "ai-sdk.generateText", server.base_url(slot), "tiny",
                                             REQUEST["messages"]) for slot in slots])
    assert results["0"].message == results["1"].message and results["0"].message.content == "a\ud800b"


def test_a_lone_surrogate_in_a_non_streaming_answer_is_the_same_for_every_client(tmp_path):
    answer = response_transcript({"content": "a\ud800b"}, "stop", case_id="lone-surrogate", request=REQUEST)
    run_dir = write_recording(tmp_path, [answer])
    assert main(["clients", str(run_dir)]) == 0
    findings = read_findings(run_dir / CLIENTS_FILE)[1]
    assert len(findings) == 4 and {(f.api, f.outcome) for f in findings} == {(f.api, "same") for f in findings}


def test_a_node_batch_that_never_answers_is_killed_its_calls_not_run_and_the_rest_written(tmp_path):
    project = fake_node_project(tmp_path / "node", SLEEPS_FOREVER)
    run_dir = write_recording(tmp_path / "run", TWO_MODES)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CONFORMANCE_NODE_CLIENTS": str(project),
           "CONFORMANCE_NODE_BATCH_TIMEOUT": "2"}
    try:
        done = subprocess.run([sys.executable, "-m", "conformance", "clients", str(run_dir), "--client",
                               "openai-python", "--client", "ai-sdk"],
                              capture_output=True, text=True, timeout=60, env=env, check=False)
    finally:
        left_running = [pid for pid in started_pids(project) if killed(pid)]
    assert not left_running
    assert done.returncode == 2, done.stderr
    assert "ai-sdk could not run: the Node batch timed out after 2 s and was killed (0 of 2 jobs done)" in done.stderr
    findings = by_client(run_dir / CLIENTS_FILE)
    assert [f.outcome for f in findings["openai-python"]] == ["same"] * 3
    assert [f.outcome for f in findings["ai-sdk"]] == ["not_run"] * 2
    assert all("timed out after 2 s" in f.reason for f in findings["ai-sdk"])
    assert len(started_pids(project)) == 1


def test_a_node_batch_that_dies_at_start_is_exit_2_naming_its_status_and_last_stderr_line(tmp_path, monkeypatch,
                                                                                           capsys):
    monkeypatch.setenv("CONFORMANCE_NODE_CLIENTS", str(fake_node_project(tmp_path / "node", DIES_AT_START)))
    run_dir = write_recording(tmp_path / "run", TWO_MODES)
    assert main(["clients", str(run_dir), "--client", "openai-python", "--client", "ai-sdk"]) == 2
    why = ("the Node batch exited with status 7 (0 of 2 jobs done): "
           "last stderr line: 'Fatal process out of memory: Failed to reserve virtual memory'")
    assert f"ai-sdk could not run: {why}" in capsys.readouterr().err
    findings = by_client(run_dir / CLIENTS_FILE)
    assert [f.outcome for f in findings["openai-python"]] == ["same"] * 3
    assert [(f.outcome, f.reason) for f in findings["ai-sdk"]] == [("not_run", why)] * 2


def idiom_recording(directory: Path) -> Path:
    """A run holding the non-streaming answer (one call) of the AI SDK's and LiteLLM's tool_choice idiom case."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    answer = response_transcript({"content": None, "tool_calls": [call]}, "tool_calls", case_id=REQUIRED,
                                 request={**REQUEST, "tool_choice": "required"})
    return write_recording(directory, [answer])


def test_a_failed_node_batch_is_not_started_again_for_the_idioms_or_the_gates_other_side(tmp_path, monkeypatch,
                                                                                          capsys):
    project = fake_node_project(tmp_path / "node", DIES_AT_START)
    monkeypatch.setenv("CONFORMANCE_NODE_CLIENTS", str(project))
    for side in ("baseline", "candidate"):
        idiom_recording(tmp_path / "gate" / side)
    assert main(["clients", str(tmp_path / "gate"), "--client", "ai-sdk"]) == 2
    assert "ai-sdk could not run: the Node batch exited with status 7" in capsys.readouterr().err
    assert len(started_pids(project)) == 1
    _, baseline, _ = read_recording(tmp_path / "gate" / "baseline" / CLIENTS_FILE)
    _, candidate, idioms = read_recording(tmp_path / "gate" / "candidate" / CLIENTS_FILE)
    assert [f.outcome for f in baseline + candidate] == ["not_run", "not_run"] and not idioms
    assert candidate[0].reason.startswith("the client cannot run here: its batch failed earlier in this command: "
                                          "the Node batch exited with status 7")


def test_an_idiom_batch_that_dies_keeps_the_calls_and_the_other_clients_idioms(tmp_path, monkeypatch, capsys):
    project = fake_node_project(tmp_path / "node", DIES_THE_SECOND_TIME, real_packages=True)
    monkeypatch.setenv("CONFORMANCE_NODE_CLIENTS", str(project))
    run_dir = idiom_recording(tmp_path / "run")
    assert main(["clients", str(run_dir), "--client", "litellm", "--client", "ai-sdk"]) == 2
    assert ("ai-sdk could not run: the Node batch exited with status 7 (0 of 1 jobs done): "
            "last stderr line: 'second start refused'") in capsys.readouterr().err
    _, findings, idioms = read_recording(run_dir / CLIENTS_FILE)
    assert {(f.api, f.outcome) for f in findings} == {("litellm.completion", "same"), ("ai-sdk.generateText", "same")}
    assert [idiom.client for idiom in idioms] == ["litellm"] and len(started_pids(project)) == 2


def test_a_command_in_which_no_call_ran_keeps_the_earlier_report(tmp_path, monkeypatch, capsys):
    run_dir = write_recording(tmp_path / "run", TWO_MODES)
    assert main(["clients", str(run_dir), "--client", "openai-python"]) == 0
    good = {name: (run_dir / name).read_bytes() for name in (CLIENTS_FILE, "clients.md")}
    monkeypatch.setenv("CONFORMANCE_NODE_CLIENTS", str(fake_node_project(tmp_path / "node", DIES_AT_START)))
    capsys.readouterr()
    assert main(["clients", str(run_dir), "--client", "ai-sdk"]) == 2
    err = capsys.readouterr().err
    assert "ai-sdk could not run: the Node batch exited with status 7" in err
    assert "no client call ran: nothing written, the earlier report is kept" in err
    assert {name: (run_dir / name).read_bytes() for name in good} == good


def test_the_report_of_a_command_in_which_no_call_ran_does_not_say_every_call_rebuilt_the_message():
    finding = ClientFinding("c", "stream", "hf", 0, "ai-sdk", "ai-sdk.streamText", "not_run", "the Node batch died")
    header = {"profile": "hf", "clients": {"ai-sdk": {"version": "ai 7.0.0", "unavailable": None}}}
    report = clients_markdown.render([header], [finding])
    assert "every client call" not in report and "no client call ran" in report
