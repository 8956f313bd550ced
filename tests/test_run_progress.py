"""Progress of `conformance run` on standard error (fast tier, loopback fake server): one line per
result in a log, a bar on a terminal whose labels keep the case names' brackets, and standard
output left to the summary."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from conformance import exit_codes
from conformance.cli import main
from conformance.results import read_results
from tests.engine_helpers import load_cases
from tests.fake_server import fake_server

CASES = """
- id: forced-ok
  description: A forced output with reasoning and one call, answered exactly as expected.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "x"
  expect:
    hf:
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
- id: broken
  description: The server answers HTTP 500 to this request, an error of the run.
  features: [content]
  modes: [non-stream]
  request:
    messages: [{role: user, content: http-500}]
  force: "x"
  expect:
    hf: {message: {content: a}, finish_reason: stop}
"""


def run_arguments(base_url: str, cases_dir: Path, out: Path) -> list[str]:
    return ["run", "--base-url", base_url, "--model", "fake", "--profile", "hf", "--cases", str(cases_dir),
            "--out", str(out), "--timeout", "5", "--forcing", "trust"]


def test_a_log_gets_one_line_per_result_with_the_reason_of_what_did_not_pass(tmp_path: Path, capsys) -> None:
    load_cases(tmp_path / "cases", CASES)
    with fake_server() as server:
        assert main(run_arguments(server.base_url, tmp_path / "cases", tmp_path / "out")) == exit_codes.ERROR
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("[")]
    results = read_results(tmp_path / "out" / "results.jsonl")
    assert len(lines) == len(results) == 3
    assert [line.split("] ", 1)[0] for line in lines] == ["[1/3", "[2/3", "[3/3"]
    by_name = {line.split("] ", 1)[1].split(":")[0]: line for line in lines}
    assert set(by_name) == {f"hf {r.name}" for r in results}
    assert by_name["hf broken[non-stream]"].endswith("error (transport: HTTP 500: boom)")
    assert by_name["hf forced-ok[stream]"].endswith(": pass")
    assert "[1/3]" not in captured.out


def test_a_terminal_gets_a_bar_whose_labels_keep_their_brackets(tmp_path: Path) -> None:
    load_cases(tmp_path / "cases", CASES)
    controller, terminal = pty.openpty()
    with fake_server() as server:
        process = subprocess.Popen([sys.executable, "-m", "conformance",
                                    *run_arguments(server.base_url, tmp_path / "cases", tmp_path / "out")],
                                   stdout=subprocess.DEVNULL, stderr=terminal, cwd=tmp_path,
                                   env={**os.environ, "COLUMNS": "200"})
        os.close(terminal)
        seen = b""
        while select.select([controller], [], [], 60)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the process closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(timeout=60) == exit_codes.ERROR
    os.close(controller)
    text = seen.decode("utf-8", "replace")
    assert "━" in text and "/3" in text  # rich's bar and its count
    assert "[non-stream]" in text or "[stream]" in text  # a label is shown as written, not read as markup
    assert "[1/3]" not in text  # no log lines on a terminal
