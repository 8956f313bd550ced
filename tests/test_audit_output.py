"""Where `conformance audit` writes: `-` is standard output, progress goes to standard error (a bar on
a terminal, lines otherwise), and the terminal text fits 80 columns (fast tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import jsonschema

from conformance.audit.checkpoint_audit import audit_local
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.report.audit.report import build_report
from conformance.report.audit.terminal import (
    INDENT,
    LEGEND,
    checkpoint_lines,
    checkpoint_state,
    render_terminal,
    wrapped,
)
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
    assert "response_template audit" in completed.stderr  # the terminal text moved to standard error


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
    completed = audit(tmp_path, *locals_of(directories), "--examples", "0")
    progress = [line for line in completed.stderr.splitlines() if line.startswith("[")]
    report = build_report([audit_local(d) for d in directories], started_at=datetime.now(), complete=True)
    states = [checkpoint_state(report["predictors"], checkpoint) for checkpoint in report["checkpoints"]]
    assert progress == [f"[{n}/{len(directories)}] {d}: {state}"
                        for n, (d, state) in enumerate(zip(directories, states), start=1)]
    assert "[1/" not in completed.stdout


def test_progress_is_a_bar_on_a_terminal(tmp_path: Path) -> None:
    directories = local_checkpoints(tmp_path / "models")
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    status, text = stderr_on_a_terminal([sys.executable, "-m", "conformance", "audit", *locals_of(directories)],
                                        tmp_path, environment)
    assert status == exit_codes.OK
    assert f"/{len(directories)}" in text and "━" in text  # rich's bar and its count
    assert f"[1/{len(directories)}]" not in text  # no log lines on a terminal


def _wide_report(tmp_path: Path) -> dict:
    """The fixtures' report, plus a Hub checkpoint with a long id, a timeout, an unmet expectation, a long finding
    and a skipped round trip."""
    directories = local_checkpoints(tmp_path / "a-rather-long-directory-name-for-models")
    report = build_report([audit_local(d) for d in directories], started_at=datetime.now(), complete=True)
    hub = dict(report["checkpoints"][0], id="some-organisation/Some-Checkpoint-With-A-Long-Name-70B", source="hub",
               revision="main", commit="0123456789abcdef0123456789abcdef01234567", status="template_timeout",
               error="the template analysis took longer than 10 s", expect={"both": "starts"},
               unmet_expectations=["both: expected starts, but the checkpoint could not be audited (template_timeout)"],
               findings=[{"code": "slow-regex", "message": "a pattern " + "very " * 40 + "slow"}],
               roundtrip={"status": "skipped", "reason": "no chat template", "seed": 0, "database": None,
                          "examples_asked": 10, "examples": 0, "cuts": {}, "token_cuts_skipped": None, "failures": []},
               **{predictor["key"]: None for predictor in report["predictors"]})
    report["checkpoints"].append(hub)
    return report


def test_the_terminal_lines_fit_80_columns_and_break_between_words(tmp_path: Path) -> None:
    report = _wide_report(tmp_path)
    text = render_terminal(report)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    # nothing breaks mid-word: every word of the legend and of an unmet expectation is whole on some line
    words = set(text.split())
    for message in [LEGEND, *report["checkpoints"][-1]["unmet_expectations"]]:
        assert set(message.split()) <= words
    assert "some-organisation/Some-Checkpoint-With-A-Long-Name-70B@main → 0123456789ab" in text
    assert "error: the template analysis took longer than 10 s" in text
    finding = next(line for line in lines if "finding slow-regex" in line)
    assert finding.endswith("…") and "very" in finding  # one short line, cut at a word


def test_a_path_wider_than_a_line_breaks_after_a_slash() -> None:
    path = "/" + "/".join(f"directory-{index}" for index in range(12)) + "/tokenizer_config.json"
    lines = wrapped(f"error: {path}: cannot read", INDENT)
    assert len(lines) > 1 and max(len(line) for line in lines) <= 80
    assert all(line.endswith("/") for line in lines[:-1])
    assert "".join(line.strip() for line in lines) == f"error: {path}: cannot read"


def test_every_predicted_server_is_on_the_terminal(tmp_path: Path) -> None:
    report = _wide_report(tmp_path)
    labels = [predictor["label"] for predictor in report["predictors"]]
    assert {"vLLM 0.32", "vLLM 0.33", "vllm-rs 0.32", "vllm-rs 0.33", "SGLang 0.5.23"} <= set(labels)
    for checkpoint in report["checkpoints"][:-1]:
        block = "\n".join(checkpoint_lines(report, checkpoint))
        flat = " ".join(block.split())
        for predictor in report["predictors"]:
            verdicts = checkpoint[predictor["key"]]
            codes = ["y" if verdict.get("starts", verdict.get("outcome") == "starts")
                     else "n" if verdict.get("outcome", "refuses_to_start") == "refuses_to_start"
                     else str(verdict["http_status"]) for verdict in verdicts.values()]
            assert f"{predictor['label']} {'/'.join(codes)}" in flat, (predictor, block)


def test_the_state_says_what_the_audit_came_to(tmp_path: Path) -> None:
    report = _wide_report(tmp_path)
    states = {checkpoint["id"]: checkpoint_state(report["predictors"], checkpoint)
              for checkpoint in report["checkpoints"]}
    gemma = next(value for key, value in states.items() if "gemma-4" in key)
    assert gemma.startswith("vLLM 0.32 starts")
    refused = [key for key, checkpoint in zip(states, report["checkpoints"])
               if not any(verdict["starts"] for verdict in (checkpoint["vllm_0_32"] or {"x": {"starts": True}}).values())]
    assert refused and all(states[key].startswith("vLLM 0.32 does not start") for key in refused)
    assert "ok" not in " ".join(states.values()).split()  # fetched is no verdict
    assert states["some-organisation/Some-Checkpoint-With-A-Long-Name-70B"] == (
        "template timeout; 1 finding; round trip skipped; expect UNMET")


def test_findings_and_skips_are_on_the_terminal(tmp_path: Path) -> None:
    """A checkpoint whose round trip finds counterexamples says so (exit 0 without --fail-on-findings), and one
    without a chat template says its round trip was skipped and why."""
    tiny = build_fixture(tmp_path / "tiny")
    no_chat_template = tmp_path / "no-chat-template"
    no_chat_template.mkdir()
    (no_chat_template / "tokenizer_config.json").write_text((tiny / "tokenizer_config.json").read_text())
    completed = audit(tmp_path, "--local", str(tiny), "--local", str(no_chat_template), "--examples", "40",
                      "--seed", "1", "--json", "audit.json")
    assert completed.returncode == exit_codes.OK, completed.stderr
    report = json.loads((tmp_path / "audit.json").read_text())
    findings = report["checkpoints"][0]["findings"]
    assert findings  # the tiny checkpoint's two known bugs
    lines = completed.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    # a long temporary path wraps the heading (after a `/`, or between words): compare without the breaks
    flat = "".join(completed.stdout.split())
    assert "".join(f"{tiny} (local): vLLM 0.32 starts; {len(findings)} finding".split()) in flat
    for finding in findings:
        assert any(line.startswith(f"  finding {finding['code']}: ") for line in lines)
    assert "".join(f"{no_chat_template} (local): vLLM 0.32 starts; round trip skipped".split()) in flat
    assert "  round trip skipped: no chat template" in lines
    progress = [line for line in completed.stderr.splitlines() if line.startswith("[") and str(tiny) in line]
    assert len(progress) == 1 and progress[0].endswith(f"finding{'s' if len(findings) > 1 else ''}")


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
