"""Against real vLLM 0.32 (vllm tier): the gate launches legacy -> hf on the tiny checkpoint with its
response_template edited. A template naming its reasoning `reasoning_content` is refused by hf at start-up: the
gate's verdict is exit 1 with vLLM's own line first in every report. A template without a `thinking` field gets hf
launched with the tool parser only (vLLM 0.32 refuses `--reasoning-parser hf` there), and the gate runs.
Each gate starts two servers (about a minute on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.formats.tiny_checkpoint import build_fixture

pytestmark = pytest.mark.vllm

VLLM_REFUSAL = ("response_template contains unsupported semantic fields: ['reasoning_content']. Supported fields are: "
                "['content', 'thinking', 'tool_calls']")


def edited_checkpoint(folder: Path, edit: Any) -> Path:
    """The tiny checkpoint with its response_template's fields passed through `edit`."""
    build_fixture(folder)
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["response_template"]["fields"] = edit(config["response_template"]["fields"])
    path.write_text(json.dumps(config, indent=1))
    return folder


def gate(checkpoint: Path, out: Path, *cases: str) -> int:
    return main(["gate", "--model", str(checkpoint), "--no-expect", "--granularities", "none", "--out", str(out),
                 *(arg for case in cases for arg in ("--case", case))])


def test_hf_refusing_a_reasoning_content_template_is_the_gates_verdict(tmp_path, capsys):
    checkpoint = edited_checkpoint(tmp_path / "ckpt", lambda fields: {
        ("reasoning_content" if name == "thinking" else name): field for name, field in fields.items()})
    assert gate(checkpoint, tmp_path / "out", "reasoning-then-one-call") == 1
    record = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert record["refused_to_start"]["message"] == VLLM_REFUSAL and record["refused_to_start"]["server"] == "vLLM"
    assert record["verdict"]["line"] == f"the candidate hf refuses to start this checkpoint: {VLLM_REFUSAL}"
    assert record["sides"]["baseline"]["stamp"]["server_version"].startswith("0.32.0")  # legacy started
    report = [line for line in (tmp_path / "out" / "report.md").read_text().splitlines() if line]
    assert "refuses to start" in report[0] and report[1] == f"**vLLM said**: `{VLLM_REFUSAL}`"
    assert "predicted to refuse this checkpoint" in capsys.readouterr().err  # the audit said so before the start


def test_hf_on_a_template_without_thinking_is_launched_with_the_tool_parser_only(tmp_path, capsys):
    checkpoint = edited_checkpoint(tmp_path / "ckpt", lambda fields: {
        name: field for name, field in fields.items() if name != "thinking"})
    code = gate(checkpoint, tmp_path / "out", "reasoning-then-one-call", "content-only")
    record = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert code in (0, 1) and record["verdict"]["outcome"] != "error" and record["verdict"]["compared"] > 0
    stamp = record["sides"]["candidate"]["stamp"]
    assert "--tool-call-parser" in stamp["server_args"] and "--reasoning-parser" not in stamp["server_args"]
    assert stamp["launch_note"].startswith("--reasoning-parser hf left out: vLLM 0.32 refuses it on this checkpoint "
                                           "(--reasoning-parser hf requires a response_template with a thinking field)")
    assert stamp["launch_note"] in capsys.readouterr().err
    assert "flags chosen" in (tmp_path / "out" / "report.md").read_text()
