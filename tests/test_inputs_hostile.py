"""Input files the verbs read, made hostile (issue 30, items 5 and 12, and the depth of a checkpoint file): each
is read only as a regular file within the size cap of its kind, else an exit 2 naming it (a FIFO would block
for ever, a symlink to /dev/zero would be read until memory ran out); an expectations file gives no key twice;
JSON nested past the depth limit has an audit status of its own.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.compare.gate import MAX_GATE_BYTES
from conformance.formats import checkpoint_files
from conformance.record.run_dir import MAX_RUN_FILE_BYTES
from conformance.record.transcript import MAX_RECORDING_BYTES
from conformance.util import safe_yaml
from conformance.util.package_paths import load_schema
from tests.test_hostile import DEEP, MEMORY_LIMIT, assert_clean_error, checkpoint
from tests.test_outputs_hostile import NO_SERVER, cli_process, record_runs


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path, Path]:
    return record_runs(tmp_path_factory.mktemp("recorded"))


def bounded_memory() -> None:
    """What the CLI may take (a reader of /dev/zero would otherwise take the machine's memory)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def reading(kind: str, recorded: tuple[Path, Path, Path], work: Path) -> tuple[Path, int, list[str | Path]]:
    """(the file of `kind` to make hostile, the size cap of its kind, the command line that reads it), the
    inputs copied into `work`."""
    a, b, cases = (shutil.copytree(path, work / path.name) for path in recorded)
    gate = work / "gate"
    shutil.copytree(a, gate / "baseline")
    shutil.copytree(b, gate / "candidate")
    compare: list[str | Path] = ["compare", a, b, "--cases", cases, "--no-expect", "--out", work / "out"]
    model = checkpoint(work, b"{}")
    files = {
        "--expect": (work / "expect.yaml", safe_yaml.MAX_FILE_BYTES,
                     ["compare", a, b, "--cases", cases, "--expect", work / "expect.yaml", "--out", work / "out"]),
        "--checkpoints": (work / "checkpoints.yaml", safe_yaml.MAX_FILE_BYTES,
                          ["audit", "--checkpoints", work / "checkpoints.yaml"]),
        "features.txt": (cases / "features.txt", safe_yaml.MAX_FILE_BYTES,
                         ["run", "--base-url", NO_SERVER, "--model", "m", "--profile", "hf", "--cases", cases,
                          "--out", work / "out"]),
        "transcripts.jsonl": (a / "transcripts.jsonl", MAX_RECORDING_BYTES,
                              ["recheck", a / "transcripts.jsonl", "--cases", cases, "--out", work / "out"]),
        "results.jsonl": (a / "results.jsonl", MAX_RECORDING_BYTES, compare),
        "run.json": (b / "run.json", MAX_RUN_FILE_BYTES, compare),
        "gate.json beside the runs": (gate / "gate.json", MAX_GATE_BYTES,
                                      ["compare", gate / "baseline", gate / "candidate", "--cases", cases,
                                       "--no-expect", "--out", work / "out"]),
        "tokenizer_config.json": (model / "tokenizer_config.json", checkpoint_files.MAX_FILE_BYTES,
                                  ["run", "--base-url", NO_SERVER, "--model", "m", "--profile", "hf", "--cases", cases,
                                   "--checkpoint", model, "--out", work / "out"]),
        "tokenizer_config.json of an audited directory": (
            model / "tokenizer_config.json", checkpoint_files.MAX_FILE_BYTES, ["audit", "--local", model, "--examples", "0"]),
    }
    return files[kind]


def as_fifo(path: Path, cap: int) -> str:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return "not a regular file but a FIFO"


def as_dev_zero(path: Path, cap: int) -> str:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")
    return "not a regular file but a character device"


def over_the_cap(path: Path, cap: int) -> str:
    with open(path, "wb") as sparse:  # no block written: the size alone is over the cap
        sparse.truncate(cap + 1)
    return f"over the {cap}-byte limit"


MADE_HOSTILE: dict[str, Callable[[Path, int], str]] = {"fifo": as_fifo, "dev-zero": as_dev_zero,
                                                       "over-the-cap": over_the_cap}


@pytest.mark.parametrize("hostile", MADE_HOSTILE)
@pytest.mark.parametrize("kind", ["--expect", "--checkpoints", "features.txt", "transcripts.jsonl", "results.jsonl",
                                  "run.json", "gate.json beside the runs", "tokenizer_config.json"])
def test_an_input_that_is_not_a_regular_file_within_its_cap_is_an_exit_2_naming_it(recorded, tmp_path, kind,
                                                                                     hostile) -> None:
    path, cap, command = reading(kind, recorded, tmp_path)
    reason = MADE_HOSTILE[hostile](path, cap)
    assert_clean_error(cli_process(*command, preexec=bounded_memory, timeout=60), str(path), reason)


@pytest.mark.parametrize("hostile", ["fifo", "dev-zero"])  # one over the cap is a broken checkpoint: exit 1
def test_an_audited_directorys_config_that_is_no_regular_file_is_unreadable_not_missing(recorded, tmp_path,
                                                                                      hostile) -> None:
    path, cap, command = reading("tokenizer_config.json of an audited directory", recorded, tmp_path)
    reason = MADE_HOSTILE[hostile](path, cap)
    assert_clean_error(cli_process(*command, preexec=bounded_memory, timeout=60), str(path), reason)


# --- 12. no key given twice in an expectations file ----------------------------------------------------

@pytest.mark.parametrize(("text", "where"), [
    ("acknowledge:\n  - case: ok\n    kind: message\n    reason: first\n    reason: second\n",
     ":5: acknowledge[0].reason: duplicate key 'reason'"),
    ("acknowledge: []\nacknowledge:\n  - {case: ok, kind: message, reason: the one kept}\n",
     ":2: acknowledge: duplicate key 'acknowledge'"),
], ids=["in-an-entry", "at-the-top"])
def test_a_key_given_twice_in_an_expectations_file_is_refused_naming_file_line_and_key(recorded, tmp_path, capsys,
                                                                                       text, where) -> None:
    a, b, cases = recorded
    expect = tmp_path / "expect.yaml"
    expect.write_text(text)
    assert main(["compare", str(a), str(b), "--cases", str(cases), "--expect", str(expect),
                 "--out", str(tmp_path / "out")]) == 2
    assert f"{expect}{where}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- a checkpoint file nested past the depth limit is named for what it is ------------------------------

def test_json_nested_past_the_depth_limit_is_too_deep_a_fault_of_the_checkpoint(tmp_path) -> None:
    import jsonschema

    directory = checkpoint(tmp_path, DEEP)
    completed = cli_process("audit", "--local", directory, "--json", tmp_path / "audit.json", "--examples", "0")
    assert completed.returncode == 1 and "Traceback" not in completed.stderr, completed.stderr[-2000:]
    report = json.loads((tmp_path / "audit.json").read_text())
    jsonschema.validate(report, load_schema("audit-report.schema.json"))
    (audit,) = report["checkpoints"]
    assert audit["status"] == "too_deep"
    assert "tokenizer_config.json: JSON nested 901 levels deep, over the 100-level limit" in audit["error"]
