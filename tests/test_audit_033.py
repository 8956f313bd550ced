"""The audit's vLLM 0.33 verdicts in its reports and expectations (fast tier; against vLLM 0.33 itself:
test_template_vs_vllm_033.py and test_audit_rust_vs_vllm_rs_033.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import jsonschema

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.predictors.vllm_032 import StartupVerdict
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.report.audit.report import build_report, render_markdown
from conformance.util import exit_codes
from conformance.util.markdown_text import code_span
from conformance.util.package_paths import load_schema

# vLLM 0.33's texts for a checkpoint without a response_template (as its own functions and its real
# server give them: the vllm-tier tests above).
ENGINE_033 = "Parsing with a response template requires `response_template` metadata in the tokenizer configuration"
TOOLS_033 = "--tool-call-parser hf requires `response_template` metadata in the tokenizer configuration"
MISSING_032 = "The hf parser requires `response_template` metadata in the tokenizer configuration"


def test_the_reports_carry_each_releases_own_verdicts(tmp_path: Path) -> None:
    model = build_fixture(tmp_path / "no-template", "no-template")
    markdown = tmp_path / "audit.md"
    completed = subprocess.run([sys.executable, "-m", "conformance", "audit", "--local", str(model), "--json", "-",
                                "--markdown", str(markdown)], capture_output=True, text=True)
    assert completed.returncode == exit_codes.OK, completed.stderr
    report = json.loads(completed.stdout)
    jsonschema.validate(report, load_schema("audit-report.schema.json"))
    (checkpoint,) = report["checkpoints"]
    assert {verdict["error"] for verdict in checkpoint["vllm_0_32"].values()} == {MISSING_032}  # unchanged
    assert checkpoint["vllm_0_33"] == {"tool_call_parser_hf": {"starts": False, "error": TOOLS_033},
                                       "reasoning_parser_hf": {"starts": False, "error": ENGINE_033},
                                       "both": {"starts": False, "error": ENGINE_033}}
    assert checkpoint["vllm_0_33_rust"]["both"] == {"outcome": "refuses_to_start", "error": ENGINE_033,
                                                    "http_status": None}
    assert checkpoint["vllm_0_32_rust"]["both"]["error"] == MISSING_032
    text = markdown.read_text()
    assert "| 0.33 | vllm-rs | vllm-rs 0.33 | sglang | expect |" in text
    assert "| fails | fails | fails | fails/fails/fails | 500/no start/no start | 500/no start/no start |" in text
    assert f"- vLLM 0.33: `--enable-auto-tool-choice --tool-call-parser hf` fails: {code_span(TOOLS_033)}" in text
    assert f"- `--enable-auto-tool-choice --tool-call-parser hf` fails: {code_span(MISSING_032)}" in text
    assert (f"- vLLM 0.33: `vllm-rs serve --tool-call-parser hf --reasoning-parser hf` does not start "
            f"(its Python engine refuses): {code_span(ENGINE_033)}") in text


def test_expect_is_judged_on_each_release(tmp_path: Path) -> None:
    audit = audit_local(build_fixture(tmp_path / "full"))
    audit.expect = {"both": "starts"}
    assert audit.unmet_expectations == []
    refused = {**audit.template.vllm_0_33, "both": StartupVerdict(starts=False, error="refused by 0.33")}
    audit.template = dataclasses.replace(audit.template, vllm_0_33=refused)
    assert audit.unmet_expectations == ["both: expected starts, vLLM 0.33 predicted fails: refused by 0.33"]


def test_a_report_written_before_033_was_predicted_still_renders(tmp_path: Path) -> None:
    report = build_report([audit_local(build_fixture(tmp_path / "full"))], started_at=datetime.now(), complete=True)
    for checkpoint in report["checkpoints"]:
        del checkpoint["vllm_0_33"], checkpoint["vllm_0_33_rust"]
    assert "| starts | starts | starts | n/a | 500/500/starts | n/a |" in render_markdown(report)
