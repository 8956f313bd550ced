"""Where `conformance audit` writes: `-` is standard output, progress goes to standard error (a bar on
a terminal, lines otherwise), and the table fits 80 columns (fast tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import jsonschema
from rich.console import Console

from conformance.audit.checkpoint_audit import audit_local
from conformance.report.audit.report import _table_row, build_report, render_table
from conformance.util import exit_codes
from conformance.util.package_paths import load_schema
from tests.audit_helpers import fixture_tokenizer_configs
from tests.terminal import stderr_on_a_terminal

REPORT_SCHEMA = load_schema("audit-report.schema.json")


def local_checkpoints(root: Path) -> list[Path]:
    """One directory per real fixture, each with its tokenizer_config.json."""
    directories = []
    for repo, config in fixture_tokenizer_configs().items():
        directory = root / repo.replace("/", "__")
        directory.mkdir(parents=True)
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
        directories.append(directory)
    return directories


def audit(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"} | env
    return subprocess.run([sys.executable, "-m", "conformance", "audit", *args], capture_output=True, text=True,
                          cwd=cwd, env=environment)


def locals_of(directories: list[Path]) -> list[str]:
    return [argument for directory in directories for argument in ("--local", str(directory))]


def test_json_dash_is_standard_output_and_nothing_else_is(tmp_path: Path) -> None:
    directories = local_checkpoints(tmp_path / "models")
    completed = audit(tmp_path, *locals_of(directories), "--json", "-")
    assert completed.returncode == exit_codes.OK, completed.stderr
    report = json.loads(completed.stdout)  # the whole of standard output is the report
    jsonschema.validate(report, REPORT_SCHEMA)
    assert [c["id"] for c in report["checkpoints"]] == [str(d) for d in directories] and report["complete"]
    assert not (tmp_path / "-").exists() and not list(tmp_path.glob("-*"))
    assert "response_template audit" in completed.stderr  # the table moved to standard error


def test_markdown_dash_is_standard_output_next_to_a_json_file(tmp_path: Path) -> None:
    directories = local_checkpoints(tmp_path / "models")
    completed = audit(tmp_path, *locals_of(directories), "--markdown", "-", "--json", "out/audit.json")
    assert completed.returncode == exit_codes.OK, completed.stderr
    assert completed.stdout.startswith("# Checkpoint audit: `response_template`")
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["checkpoints"][0]["id"] in completed.stdout
    assert not (tmp_path / "-").exists() and not (tmp_path / "out" / "audit.json.partial.jsonl").exists()


def test_both_reports_on_standard_output_is_a_usage_error(tmp_path: Path) -> None:
    completed = audit(tmp_path, "--local", str(tmp_path), "--json", "-", "--markdown", "-")
    assert completed.returncode == exit_codes.ERROR and completed.stdout == ""
    assert "would both write to standard output" in completed.stderr


def test_progress_lines_in_a_log_one_per_checkpoint(tmp_path: Path) -> None:
    directories = local_checkpoints(tmp_path / "models")
    completed = audit(tmp_path, *locals_of(directories))
    progress = [line for line in completed.stderr.splitlines() if line.startswith("[")]
    assert progress == [f"[{n}/{len(directories)}] {d}: ok" for n, d in enumerate(directories, start=1)]
    assert "[1/" not in completed.stdout


def test_progress_is_a_bar_on_a_terminal(tmp_path: Path) -> None:
    directories = local_checkpoints(tmp_path / "models")
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    status, text = stderr_on_a_terminal([sys.executable, "-m", "conformance", "audit", *locals_of(directories)],
                                        tmp_path, environment)
    assert status == exit_codes.OK
    assert f"/{len(directories)}" in text and "━" in text  # rich's bar and its count
    assert f"[1/{len(directories)}]" not in text  # no log lines on a terminal


def test_the_table_fits_80_columns_and_loses_nothing(tmp_path: Path) -> None:
    directories = local_checkpoints(tmp_path / "a-rather-long-directory-name-for-models")
    report = build_report([audit_local(d) for d in directories], started_at=datetime.now(), complete=True)
    hub = dict(report["checkpoints"][0], id="some-organisation/Some-Checkpoint-With-A-Long-Name-70B", source="hub",
               revision="main", commit="0123456789abcdef0123456789abcdef01234567", status="template_timeout",
               expect={"both": "starts"}, unmet_expectations=["both: expected starts"], vllm_0_32=None)
    report["checkpoints"].append(hub)
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    console.print(render_table(report))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    for whole in ("checkpoint", "expect", "UNMET", "yes/yes/yes", "no/no/no", "main→01234567"):  # never folded
        assert whole in text
    # long cells fold, nothing is cropped: every character of every cell is on the screen
    cells = [cell for checkpoint in report["checkpoints"] for cell in _table_row(checkpoint)]
    assert not Counter("".join(cells).replace(" ", "")) - Counter(text.replace(" ", "").replace("\n", ""))
    assert "…" not in text


def test_the_command_honours_columns(tmp_path: Path) -> None:
    directories = local_checkpoints(tmp_path / "models")
    completed = audit(tmp_path, *locals_of(directories), COLUMNS="80")
    assert completed.returncode == exit_codes.OK
    assert max(len(line) for line in completed.stdout.splitlines()) <= 80


def test_an_output_directory_given_as_dash_is_a_usage_error(tmp_path: Path) -> None:
    for verb in (["run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--profile", "hf"],
                 ["recheck", str(tmp_path / "transcripts.jsonl")]):
        completed = subprocess.run([sys.executable, "-m", "conformance", *verb, "--out", "-"], capture_output=True,
                                   text=True, cwd=tmp_path)
        assert completed.returncode == exit_codes.ERROR, completed.stderr
        assert "`-` (standard output) cannot hold them" in completed.stderr
        assert not (tmp_path / "-").exists()
