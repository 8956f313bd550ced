"""The audit's SGLang 0.5.23 verdict in its reports (the proof against SGLang's code:
test_audit_sglang_vs_sglang.py)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from conformance.formats.qwen3_hermes import RESPONSE_TEMPLATE_FULL
from conformance.util import exit_codes
from conformance.util.package_paths import load_schema

# vLLM 0.32 serves this template; SGLang's reasoning-to-answer variant (thinking, `normal`, content,
# tool_calls) has two fields without an opener, which its loader refuses.
TWO_IMPLICIT = ("At most one field may omit 'open'/'open_pattern' (that field becomes the implicit-open / "
                "leftover sink). Found: thinking, normal")


def implicit_thinking_template() -> dict:
    template = copy.deepcopy(RESPONSE_TEMPLATE_FULL)
    template["fields"]["thinking"] = {"close": "</think>"}
    template["fields"]["content"] = {"open": "<answer>", "close": "</answer>"}
    return template


def test_the_reports_carry_the_sglang_verdicts(tmp_path: Path) -> None:
    directory = tmp_path / "implicit-thinking"
    directory.mkdir()
    (directory / "tokenizer_config.json").write_text(json.dumps({"response_template": implicit_thinking_template()}))
    markdown = tmp_path / "audit.md"
    completed = subprocess.run([sys.executable, "-m", "conformance", "audit", "--local", str(directory), "--examples", "0",
                                "--json", "-", "--markdown", str(markdown)], capture_output=True, text=True)
    assert completed.returncode == exit_codes.OK, completed.stderr
    report = json.loads(completed.stdout)
    jsonschema.validate(report, load_schema("audit-report.schema.json"))
    checkpoint = report["checkpoints"][0]
    assert checkpoint["vllm_0_32"]["both"] == {"starts": True, "error": None}
    assert checkpoint["sglang_0_5_23"] == {
        "tool_call_parser_hf": {"outcome": "starts_but_refuses_tool_requests", "error": TWO_IMPLICIT, "http_status": 400},
        "reasoning_parser_hf": {"outcome": "refuses_to_start", "error": TWO_IMPLICIT, "http_status": None},
        "both": {"outcome": "refuses_to_start", "error": TWO_IMPLICIT, "http_status": None},
    }
    assert report["sglang_configurations"]["tool_call_parser_hf"] == "--tool-call-parser response_template"
    text = markdown.read_text()
    assert "| 400 tools/no start/no start |" in text
    assert "SGLang's server cannot run on a machine without CUDA" in text and "predicted from" in text
    assert "would start, but answer chat requests with tools HTTP 400 (predicted from its code): " in text
