"""Progress of `conformance run` on standard error (fast tier, loopback fake server): one line per
result in a log, a bar on a terminal whose labels keep the case names' brackets, and standard
output left to the summary."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.record.results import read_results
from conformance.util import exit_codes
from tests.engine_helpers import load_cases
from tests.fake_server import fake_server
from tests.terminal import stderr_on_a_terminal
from tests.test_verdict import CASES  # passes, skips of three kinds, a refusal as expected


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("cases")
    load_cases(directory, CASES)
    return directory


def run_arguments(base_url: str, cases_dir: Path, out: Path) -> list[str]:
    return ["run", "--base-url", base_url, "--model", "fake", "--profile", "hf", "--cases", str(cases_dir),
            "--out", str(out), "--timeout", "5"]


def test_a_log_gets_one_line_per_result_with_the_reason_of_what_did_not_pass(cases_dir, tmp_path, capsys) -> None:
    with fake_server() as server:
        status = main(run_arguments(server.base_url, cases_dir, tmp_path / "out"))
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("[")]
    results = read_results(tmp_path / "out" / "results.jsonl")
    assert len(lines) == len(results) > 5
    assert [line.split("] ", 1)[0] for line in lines] == [f"[{n}/{len(results)}" for n in range(1, len(results) + 1)]
    by_name = {line.split("] ", 1)[1].split(":")[0]: line for line in lines}
    assert set(by_name) == {f"hf {result.name}" for result in results}
    for result in results:
        line = by_name[f"hf {result.name}"]
        assert line.endswith(f": {result.outcome}" if result.outcome == "pass" else f"({result.reason[:120]})")
        assert f": {result.outcome}" in line
    assert {result.outcome for result in results} >= {"pass", "skip"}
    assert "[1/" not in captured.out
    assert status == exit_codes.ERROR  # skips of kinds not allowed: the verdict the progress lines lead to


def test_a_terminal_gets_a_bar_whose_labels_keep_their_brackets(cases_dir, tmp_path) -> None:
    with fake_server() as server:
        status, text = stderr_on_a_terminal([sys.executable, "-m", "conformance",
                                        *run_arguments(server.base_url, cases_dir, tmp_path / "out")],
                                       tmp_path, {**os.environ, "COLUMNS": "200"})
    assert status == exit_codes.ERROR
    total = len(read_results(tmp_path / "out" / "results.jsonl"))
    assert "━" in text and f"/{total}" in text  # rich's bar and its count
    assert "[non-stream]" in text or "[stream]" in text  # a label is shown as written, not read as markup
    assert f"[1/{total}]" not in text  # no log lines on a terminal
