"""checkpoints.yaml: schema validation and its error messages (file, entry index + repo, field)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.audit.checkpoint_list import CheckpointsError, load_checkpoints, parse_spec, revision_warning
from conformance.util import exit_codes
from tests.audit_helpers import FIXTURES, fixture_commit

REPO_ROOT = Path(__file__).resolve().parents[1]
SHA = "ca24ee48c0532a014ddea4c32437a6f4be981ab2"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "checkpoints.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("- repo: a/b\n", "entry 0 (a/b): field 'revision' is required"),
    (f"- repo: a/b\n  revision: {SHA}\n- revision: main\n", "entry 1: field 'repo' is required"),
    ("- notes: x\n", "entry 0: fields 'repo', 'revision' are required"),
    ("- repo: a/b\n  revision: main\n  expects: {both: fails}\n",
     "entry 0 (a/b): unknown field(s) 'expects' (allowed: repo, revision, expect, notes)"),
    ("- repo: a/b\n  revision: 123\n", "entry 0 (a/b): field 'revision': expected string, got a number"),
    ("- repo: [a, b]\n  revision: main\n", "entry 0: field 'repo': expected string, got a list"),
    ("- repo: a-b\n  revision: main\n", "entry 0 (a-b): field 'repo': 'a-b' is not a Hub repo id (owner/name)"),
    ("- repo: a/b\n  revision: main\n  expect: {both: start}\n",
     "entry 0 (a/b): field 'expect.both': 'start' is not one of starts, fails"),
    ("- repo: a/b\n  revision: main\n  expect: {tool_parser: fails}\n",
     "entry 0 (a/b): field 'expect': unknown key(s) 'tool_parser' (allowed: both, reasoning_parser_hf, tool_call_parser_hf)"),
    ("- repo: a/b\n  revision: main\n  expect: fails\n", "entry 0 (a/b): field 'expect': expected object, got a string"),
    ("- repo: a/b\n  revision: main\n  notes: 5\n", "entry 0 (a/b): field 'notes': expected string, got a number"),
    ("- just-a-string\n", "entry 0: expected a mapping with fields repo, revision, expect, notes, got a string"),
    ("repo: a/b\nrevision: main\n", "expected a list of checkpoint entries, got a mapping"),
    ("", "expected a list of checkpoint entries, got nothing (null)"),
    ("- repo: a/b\n  revision: main\n   notes: x\n", "invalid YAML at line 3, column 9"),
    ("- repo: a/b\n  revision: [main\n", "invalid YAML at line 3, column 1"),
])
def test_bad_checkpoint_lists_give_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(CheckpointsError) as raised:
        load_checkpoints(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)


def test_every_problem_is_listed_once(tmp_path: Path) -> None:
    path = write(tmp_path, "- repo: a/b\n  revision: 1\n- repo: c/d\n  revision: main\n  extra: x\n")
    with pytest.raises(CheckpointsError) as raised:
        load_checkpoints(path)
    assert str(raised.value).splitlines() == [
        f"{path}: entry 0 (a/b): field 'revision': expected string, got a number",
        f"{path}: entry 1 (c/d): unknown field(s) 'extra' (allowed: repo, revision, expect, notes)",
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointsError, match="missing.yaml: cannot read: No such file or directory"):
        load_checkpoints(tmp_path / "missing.yaml")


def test_branch_revisions_warn_commits_and_version_tags_do_not() -> None:
    assert "not a commit SHA; if it is a branch, results are not reproducible" in revision_warning(parse_spec("a/b@main"))
    assert revision_warning(parse_spec("a/b")) == revision_warning(parse_spec("a/b@main"))
    assert revision_warning(parse_spec(f"a/b@{SHA}")) is None
    assert revision_warning(parse_spec("a/b@v1.2.0")) is None
    assert revision_warning(parse_spec("a/b@2.0-rc1")) is None


def test_a_long_revision_that_is_no_tag_is_judged_at_once() -> None:
    """The version-tag check must not backtrack exponentially (a 40-character run took minutes)."""
    started = time.monotonic()
    assert revision_warning(parse_spec("a/b@1" + "a" * 40 + "_x")) is not None
    assert time.monotonic() - started < 0.5


def test_command_line_specs_are_validated_like_the_file() -> None:
    with pytest.raises(CheckpointsError, match="command line: entry 0 \\(nope\\): field 'repo'"):
        parse_spec("nope@main")


def test_shipped_list_is_valid_and_pins_what_the_fixtures_know() -> None:
    entries = {entry.repo: entry for entry in load_checkpoints(REPO_ROOT / "checkpoints.yaml")}
    assert {"google/gemma-4-12B-it", "allenai/AstaBrief_8B", "Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM3-3B",
            "meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
            "ConicCat/Gemma4-GarnetV2-31B"} <= set(entries)
    for folder in (path.name for path in FIXTURES.iterdir() if path.is_dir()):
        repo = folder.replace("__", "/", 1)
        assert repo in entries
        if commit := fixture_commit(folder):
            assert entries[repo].revision == commit


def test_cli_reports_a_bad_list_with_exit_code_2(tmp_path: Path) -> None:
    path = write(tmp_path, "- repo: a/b\n  revision: main\n  expect: {both: maybe}\n")
    completed = subprocess.run([sys.executable, "-m", "conformance", "audit", "--checkpoints", str(path)],
                               capture_output=True, text=True, cwd=tmp_path)
    assert completed.returncode == exit_codes.ERROR
    assert f"{path}: entry 0 (a/b): field 'expect.both': 'maybe' is not one of starts, fails" in completed.stderr


def test_cli_without_anything_to_audit_is_a_usage_error(tmp_path: Path) -> None:
    completed = subprocess.run([sys.executable, "-m", "conformance", "audit"], capture_output=True, text=True, cwd=tmp_path)
    assert completed.returncode == exit_codes.ERROR
    assert "nothing to audit" in completed.stderr
