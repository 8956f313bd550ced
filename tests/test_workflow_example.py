"""The shipped GitHub Actions workflow (examples/github-actions/gate.yml), run here step by step as a
runner would: every `run:` step after the set-up, with its environment, the `${{ }}` expressions it
uses filled in from the inputs, GITHUB_STEP_SUMMARY and GITHUB_OUTPUT pointing at files, against
the real vLLM servers of the session (vllm tier)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from conformance.compare.expectations import DEFAULT_PAIR_FILE

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "examples" / "github-actions" / "gate.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def _evaluate(expression: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """The few expression forms the workflow uses: `inputs.x`, `inputs.x || 'default'`,
    `steps.<id>.outputs.<name>`, `env.X` (left for the shell)."""
    value, _, default = (part.strip() for part in expression.partition("||"))
    if value.startswith("inputs."):
        return inputs.get(value.removeprefix("inputs."), "") or default.strip("'")
    if value.startswith("steps."):
        return outputs.get(value.split(".")[-1], "")
    raise AssertionError(f"an expression the test does not know: {expression}")


def run_workflow(inputs: dict[str, str], tmp_path: Path) -> tuple[list[subprocess.CompletedProcess], Path]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["gate"]
    summary, output = tmp_path / "summary.md", tmp_path / "github_output"
    summary.touch()
    output.touch()
    wrapper = tmp_path / "conformance"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m conformance "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, **{k: str(v) for k, v in job["env"].items()}, "GATE_OUT": str(tmp_path / "gate"),
           "PYTHON": sys.executable, "CONFORMANCE": str(wrapper), "GITHUB_STEP_SUMMARY": str(summary),
           "GITHUB_OUTPUT": str(output), "PYTHONPATH": str(REPO)}
    completed = []
    for step in job["steps"]:
        if "run" not in step or step["name"].startswith("Set up"):
            continue  # actions (checkout, upload) are GitHub's; the set-up is what this machine already did
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        step_env = {k: EXPRESSION.sub(lambda m: _evaluate(m.group(1), inputs, outputs), str(v))
                    for k, v in (step.get("env") or {}).items()}
        completed.append(subprocess.run(["bash", "-e", "-c", step["run"]], cwd=REPO, env={**env, **step_env},
                                        capture_output=True, text=True, timeout=600))
    return completed, summary


def _inputs(legacy_server, hf_server, **more: str) -> dict[str, str]:
    return {"baseline": legacy_server.base_url, "baseline_model": legacy_server.model, "baseline_profile": "legacy",
            "candidate": hf_server.base_url, "candidate_model": hf_server.model, "candidate_profile": "hf", **more}


def test_the_workflow_passes_with_the_shipped_expectations_and_writes_the_job_summary(legacy_server, hf_server, tmp_path):
    steps, summary = run_workflow(_inputs(legacy_server, hf_server, expect=str(DEFAULT_PAIR_FILE)), tmp_path)
    gate, summary_step, annotations, verdict = steps
    assert "exit_code=0" in (tmp_path / "github_output").read_text(), gate.stderr[-2000:]
    assert verdict.returncode == 0
    text = summary.read_text()
    assert text.startswith("# ") and "PASS" in text.splitlines()[0] and "What clients must change" in text
    assert "::error" not in annotations.stdout


def test_the_workflow_fails_and_annotates_every_unacknowledged_difference(legacy_server, hf_server, tmp_path):
    steps, summary = run_workflow(_inputs(legacy_server, hf_server), tmp_path)
    *_, annotations, verdict = steps
    assert verdict.returncode == 1 and "exit_code=1" in (tmp_path / "github_output").read_text()
    errors = [line for line in annotations.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 10 and "more" in errors[-1]  # GitHub keeps 10 per step: the tenth counts the rest
    assert all(line.startswith("::error title=Unacknowledged") for line in errors[:9])
    assert any("tool_choice" in line for line in errors)  # the refused required tool choice comes first
    assert "FAIL" in summary.read_text().splitlines()[0]
