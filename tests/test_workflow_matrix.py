"""The shipped matrix workflow (examples/github-actions/gate-matrix.yml): its shape (fast tier), and its steps run
as a runner would for two matrix entries against the session's real vLLM servers, then the merge job over the
two gates they left (vllm tier), as tests/test_workflow_example.py runs gate.yml."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from conformance.compare.expectations import DEFAULT_PAIR_FILE

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "examples" / "github-actions" / "gate-matrix.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def _workflow() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _evaluate(expression: str, context: dict[str, dict[str, str]]) -> str:
    """The expression forms the workflow's `run` steps use: `matrix.x`, `secrets.X`, `steps.<id>.outputs.<name>`."""
    scope, _, rest = expression.partition(".")
    if scope not in context:
        raise AssertionError(f"an expression the test does not know: {expression}")
    return context[scope].get(rest.rsplit(".", 1)[-1] if scope == "steps" else rest, "")


def run_job(job: dict[str, Any], env: dict[str, str], context: dict[str, dict[str, str]], cwd: Path,
            before: dict[str, Any] | None = None) -> list[subprocess.CompletedProcess]:
    """Every `run:` step but the set-up, with its env's expressions filled in; `before` maps a step name (an
    action GitHub runs, such as a download) to what stands for it here."""
    output = Path(env["GITHUB_OUTPUT"])
    completed = []
    for step in job["steps"]:
        if step.get("name") in (before or {}):
            before[step["name"]]()
        if "run" not in step or step["name"].startswith("Set up"):
            continue
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        step_env = {k: EXPRESSION.sub(lambda m: _evaluate(m.group(1), {**context, "steps": outputs}), str(v))
                    for k, v in (step.get("env") or {}).items()}
        completed.append(subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, env={**env, **step_env},
                                        capture_output=True, text=True, timeout=600))
    return completed


def _runner_env(tmp_path: Path, job: dict[str, Any], name: str) -> dict[str, str]:
    (tmp_path / f"{name}.summary.md").touch()
    (tmp_path / f"{name}.output").touch()
    wrapper = tmp_path / "conformance"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m conformance "$@"\n')
    wrapper.chmod(0o755)
    return {**os.environ, **{k: str(v) for k, v in job["env"].items()}, "PYTHON": sys.executable,
            "CONFORMANCE": str(wrapper), "GITHUB_STEP_SUMMARY": str(tmp_path / f"{name}.summary.md"),
            "GITHUB_OUTPUT": str(tmp_path / f"{name}.output"), "PYTHONPATH": str(REPO)}


def test_the_matrix_recipe_has_unique_artifacts_caches_a_concurrency_group_a_paths_filter_and_a_merge_job():
    workflow = _workflow()
    gate, summary = workflow["jobs"]["gate"], workflow["jobs"]["summary"]
    entries = gate["strategy"]["matrix"]["include"]
    assert len({entry["name"] for entry in entries}) == len(entries) > 1
    assert gate["strategy"]["fail-fast"] is False
    uploads = [step for step in gate["steps"] if str(step.get("uses", "")).startswith("actions/upload-artifact")]
    assert [step["with"]["name"] for step in uploads] == ["gate-${{ matrix.name }}"]
    [cache] = [step for step in gate["steps"] if str(step.get("uses", "")).startswith("actions/cache")]
    assert "~/.cache/hf-parser-conformance" in cache["with"]["path"] and "~/.cache/huggingface" in cache["with"]["path"]
    assert workflow["concurrency"]["group"].startswith("gate-matrix-") and workflow["concurrency"]["cancel-in-progress"]
    assert workflow[True]["pull_request"]["paths"]  # yaml reads the key `on` as True
    assert summary["needs"] == "gate" and summary["if"] == "always()"
    [download] = [step for step in summary["steps"] if str(step.get("uses", "")).startswith("actions/download-artifact")]
    assert download["with"]["pattern"] == "gate-*"
    [gate_step] = [step for step in gate["steps"] if step.get("id") == "gate"]
    assert gate_step["env"]["BASELINE_API_KEY"] == "${{ secrets.BASELINE_API_KEY }}"
    assert "--baseline-api-key-env BASELINE_API_KEY" in gate_step["run"]


def test_two_matrix_entries_and_the_merge_job_as_a_runner_runs_them(legacy_server, hf_server, tmp_path):
    workflow = _workflow()
    gate_job, summary_job = workflow["jobs"]["gate"], workflow["jobs"]["summary"]
    expect = tmp_path / "expect.yaml"  # the entries' expectations file, in "the repository"
    shutil.copy(DEFAULT_PAIR_FILE, expect)
    sides = {"baseline": legacy_server.base_url, "baseline_model": legacy_server.model, "baseline_profile": "legacy",
             "candidate": hf_server.base_url, "candidate_model": hf_server.model, "candidate_profile": "hf"}
    entries = [{"name": "acknowledged", **sides, "expect": str(expect)}, {"name": "unacknowledged", **sides}]
    artifacts = tmp_path / "artifacts"
    for entry in entries:
        env = _runner_env(tmp_path, gate_job, entry["name"])
        env["GATE_OUT"] = str(tmp_path / entry["name"] / "gate")
        steps = run_job(gate_job, env, {"matrix": entry, "secrets": {"CANDIDATE_API_KEY": "a-key"}}, REPO)
        gate, summary, annotations, verdict = steps
        assert verdict.returncode == (0 if entry["name"] == "acknowledged" else 1), gate.stderr[-2000:]
        errors = [line for line in annotations.stdout.splitlines() if line.startswith("::error")]
        if entry["name"] == "unacknowledged":  # no --expect file: nothing in the repository to point at
            assert errors and all(line.startswith("::error title=") for line in errors)
        else:
            assert errors == []
        assert "a-key" not in gate.stdout + gate.stderr
        # upload-artifact's name: gate-<entry>, holding the gate's directory
        shutil.copytree(env["GATE_OUT"], artifacts / f"gate-{entry['name']}")

    env = _runner_env(tmp_path, summary_job, "merge")
    work = tmp_path / "merge"
    work.mkdir()
    steps = run_job(summary_job, env, {}, work,
                    before={"Download every gate": lambda: shutil.copytree(artifacts, work / env["GATES"])})
    merge, verdict = steps
    assert verdict.returncode == 1, merge.stderr  # one gate needs acknowledging
    page = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "2 gates and runs: 1 passed, 1 needs acknowledging, 0 broke" in page
    assert "](../../gates/gate-acknowledged/report.md)" in page
    assert (work / env["SUMMARY_OUT"] / "summary.html").is_file()


def test_an_entry_with_an_expect_file_annotates_on_its_acknowledge_line(legacy_server, hf_server, tmp_path):
    """An entry whose expectations acknowledge nothing yet: each unacknowledged difference is annotated on the
    file, where the pull request shows it."""
    gate_job = _workflow()["jobs"]["gate"]
    expect = tmp_path / "expect.yaml"
    expect.write_text("# this switch's known differences\n\nacknowledge: []\n")
    entry = {"name": "empty", "baseline": legacy_server.base_url, "baseline_model": legacy_server.model,
             "baseline_profile": "legacy", "candidate": hf_server.base_url, "candidate_model": hf_server.model,
             "candidate_profile": "hf", "expect": str(expect)}
    env = _runner_env(tmp_path, gate_job, "empty")
    env["GATE_OUT"] = str(tmp_path / "gate")
    *_, annotations, verdict = run_job(gate_job, env, {"matrix": entry, "secrets": {}}, REPO)
    assert verdict.returncode == 1
    errors = [line for line in annotations.stdout.splitlines() if line.startswith("::error")]
    assert errors and all(line.startswith(f"::error file={expect},line=3,title=") for line in errors)
