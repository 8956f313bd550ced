"""`conformance audit --examples / --implementations`: the offline records in the JSON and Markdown reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema

from conformance.formats.tiny_checkpoint import build_fixture
from conformance.util.package_paths import load_schema


def audit(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "conformance", "audit", *args], capture_output=True, text=True,
                          cwd=cwd, env=environment, timeout=300)


def _report(path: Path) -> dict:
    report = json.loads(path.read_text())
    jsonschema.Draft202012Validator(load_schema("audit-report.schema.json")).validate(report)
    return report


def test_the_round_trip_and_the_matrix_are_in_both_reports(tmp_path, tiny_checkpoint):
    no_chat_template = tmp_path / "no-chat-template"
    no_chat_template.mkdir()
    config = json.loads((tiny_checkpoint / "tokenizer_config.json").read_text())
    (no_chat_template / "tokenizer_config.json").write_text(json.dumps(config))  # the template lives in the .jinja
    done = audit(tmp_path, "--local", str(tiny_checkpoint), "--local", str(no_chat_template), "--examples", "40",
                 "--seed", "1", "--implementations", "transformers-5.19.0,vllm-0.32",
                 "--json", "audit.json", "--markdown", "audit.md")
    assert done.returncode == 0, done.stderr  # findings, like the audit's others, do not fail it
    assert "round trip: seed 1" in done.stdout
    tiny, other = _report(tmp_path / "audit.json")["checkpoints"]
    roundtrip = tiny["roundtrip"]
    assert roundtrip["status"] == "ran" and roundtrip["seed"] == 1 and roundtrip["examples"] >= 40
    codes = {failure["code"] for failure in roundtrip["failures"]}  # seed 1 reaches both known kinds in 40
    assert "roundtrip-parse-error" in codes
    assert codes <= {finding["code"] for finding in tiny["findings"]}
    matrix = tiny["implementations"]
    assert matrix["implementations"] == ["transformers-5.19.0", "vllm-0.32"] and matrix["inputs"] > 40
    assert [entry["mode"] for entry in matrix["disagreements"]] == ["stream"]  # the malformed-call difference
    assert other["roundtrip"] == {"status": "skipped", "reason": "no chat template", "seed": 1, "database": None, "examples_asked": 40,
                                  "examples": 0, "failures": []}
    assert other["implementations"]["status"] == "skipped"
    markdown = (tmp_path / "audit.md").read_text()
    assert "- round trip: " in markdown and "**1 counterexample" not in markdown
    assert "`<tool_call>\\n{\"name\": " in markdown  # the raw output, escaped in a code span
    assert "- round trip **skipped**: no chat template" in markdown


def test_examples_zero_runs_no_round_trip(tmp_path, tiny_checkpoint):
    done = audit(tmp_path, "--local", str(tiny_checkpoint), "--examples", "0", "--json", "audit.json")
    assert done.returncode == 0, done.stderr
    checkpoint = _report(tmp_path / "audit.json")["checkpoints"][0]
    assert checkpoint["roundtrip"] is None and checkpoint["implementations"] is None
    assert not any(finding["code"].startswith("roundtrip") for finding in checkpoint["findings"])


def test_the_hypothesis_database_is_kept_only_when_asked(tmp_path):
    checkpoint = build_fixture(tmp_path / "tiny")
    done = audit(tmp_path, "--local", str(checkpoint), "--examples", "60", "--hypothesis-db")
    assert done.returncode == 0, done.stderr
    database = tmp_path / "reports" / "hypothesis-db"
    assert any(path.is_file() for path in database.rglob("*"))  # the counterexamples, kept for the next run
    assert sorted(path.name for path in tmp_path.iterdir()) == ["reports", "tiny"]  # nothing else written
    done = audit(tmp_path, "--local", str(checkpoint), "--examples", "5")  # without the option: no database
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["reports", "tiny"]


def test_bad_offline_options_are_usage_errors(tmp_path, tiny_checkpoint):
    done = audit(tmp_path, "--local", str(tiny_checkpoint), "--implementations", "nope")
    assert done.returncode == 2 and "unknown implementation 'nope'" in done.stderr
    done = audit(tmp_path, "--local", str(tiny_checkpoint), "--examples", "-1")
    assert done.returncode == 2 and "--examples must be 0 or more" in done.stderr


def test_the_matrix_alone_reads_the_shipped_cases_and_probes(tmp_path, tiny_checkpoint):
    done = audit(tmp_path, "--local", str(tiny_checkpoint), "--examples", "0", "--implementations",
                 "transformers-5.19.0,transformers-5.20.2", "--json", "audit.json")
    assert done.returncode == 0, done.stderr
    checkpoint = _report(tmp_path / "audit.json")["checkpoints"][0]
    assert checkpoint["roundtrip"] is None
    matrix = checkpoint["implementations"]
    assert matrix["status"] == "ran" and matrix["inputs"] > 50  # every forced chat case, and the probes
    assert {entry["explained"] for entry in matrix["disagreements"]} == {
        'documented: from transformers 5.20 an integer parameter\'s "3.0" is cast to 3'}
