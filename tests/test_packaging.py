"""The package installed the ordinary way: a built wheel in a fresh virtual environment (fast tier).

The wheel is built from a copy of the repository's files (so no stale `build/` can leak in) and
installed with `--no-deps`; the heavy dependencies come from the test run's own environment through a
`.pth` line, as `--system-site-packages` would give them. Nothing of the source tree is importable
from there: the commands run in an empty directory, with no PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.util import exit_codes
from tests.audit_helpers import GEMMA4, fixture_tokenizer_configs

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE", "conformance", "cases", "docs")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCE_FILES:
        copy = shutil.copytree if (REPO_ROOT / name).is_dir() else shutil.copy2
        copy(REPO_ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                                 if (REPO_ROOT / name).is_dir() else {}))
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(out), str(source)], check=True, capture_output=True, text=True)
    [built] = out.glob("hf_parser_conformance-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--quiet", str(wheel)], check=True, capture_output=True, text=True, env=clean_environment())
    # after the install: pip would otherwise take the test environment's (editable) copy for this one
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield root


def clean_environment() -> dict[str, str]:
    """This environment without PYTHONPATH (which may name the source tree) or COLUMNS."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "COLUMNS")}


def run_installed(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd,
                          env=clean_environment(), timeout=300)


def test_the_wheel_carries_cases_contract_and_licence_and_test_tools_only_as_an_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    shipped = {p.name for p in (REPO_ROOT / "cases").iterdir()}
    assert {f"conformance/shipped_cases/{name}" for name in shipped} <= names
    assert "conformance/shipped_docs/vllm-0.32-contract.md" in names
    assert "conformance/shipped_expectations/vllm-0.32-legacy-to-hf.yaml" in names
    assert {f"conformance/schemas/{n}.schema.json" for n in ("expectations", "transcripts", "results")} <= names
    formats = {f"conformance/formats/shipped/{path.relative_to(REPO_ROOT / 'conformance/formats/shipped')}"
               for path in (REPO_ROOT / "conformance" / "formats" / "shipped").rglob("*") if path.is_file()}
    assert formats and formats <= names  # every format record's files: the registry reads them at import
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    requirements = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    for tool in ("pytest",):
        assert f'{tool}; extra == "test"' in requirements
        assert not any(r.split(";")[0].strip() == tool for r in requirements if "extra ==" not in r)
    assert 'hypothesis; extra == "audit"' in requirements  # the audit's round trip generates its examples with it
    assert 'transformers>=5.16.1; extra == "audit"' in requirements  # no upper bound: a newer one installs beside it
    assert not any(r.startswith(("transformers", "matplotlib", "openai")) for r in requirements if "extra ==" not in r)
    assert 'matplotlib; extra == "live"' in requirements
    assert "Project-URL: vLLM, https://github.com/vllm-project/vllm" in metadata
    assert "Classifier: Framework :: Pytest" in metadata


def test_the_installed_commands_find_the_shipped_cases(venv: Path, tmp_path: Path) -> None:
    completed = run_installed(venv, tmp_path, "conformance", "cases", "check")
    assert completed.returncode == exit_codes.OK, completed.stderr
    cases = sum(1 for path in (REPO_ROOT / "cases").glob("*.yaml") if path.name != "tools.yaml")
    assert f"in {cases} files checked in {venv}" in completed.stdout and "0 errors" in completed.stdout
    run = run_installed(venv, tmp_path, "conformance", "run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                        "--profile", "hf", "--case", "content-only", "--out", "out", "--timeout", "2")
    assert "running 1 cases against http://127.0.0.1:9/v1" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_the_installed_audit_reads_a_local_checkpoint(venv: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps(fixture_tokenizer_configs()[GEMMA4]))
    completed = run_installed(venv, tmp_path, "conformance", "audit", "--local", str(model), "--json", "-")
    assert completed.returncode == exit_codes.OK, completed.stderr
    report = json.loads(completed.stdout)
    assert report["checkpoints"][0]["vllm_0_32"]["both"] == {"starts": True, "error": None}


def test_the_installed_gate_reads_its_shipped_expectations(venv: Path, tmp_path: Path) -> None:
    check = "from conformance.compare.expectations import DEFAULT_PAIR_FILE, load_expectations; print(len(load_expectations(DEFAULT_PAIR_FILE)))"
    completed = run_installed(venv, tmp_path, "python", "-c", check)
    assert completed.returncode == 0 and int(completed.stdout) > 5, completed.stderr  # its references resolve too
    compare = run_installed(venv, tmp_path, "conformance", "compare", "no-run-a", "no-run-b")
    assert compare.returncode == exit_codes.ERROR and "Traceback" not in compare.stderr


def test_the_pytest_plugin_loads_from_the_installed_entry_point(venv: Path, tmp_path: Path) -> None:
    completed = run_installed(venv, tmp_path, "python", "-m", "pytest", "--help")
    assert completed.returncode == 0, completed.stderr
    assert "--conformance-base-url" in completed.stdout


def test_missing_shipped_cases_are_a_clear_exit_2(venv: Path, tmp_path: Path) -> None:
    site = Path(next((venv / "lib").glob("python*/site-packages")))
    shutil.rmtree(site / "conformance" / "shipped_cases")
    completed = run_installed(venv, tmp_path, "conformance", "cases", "check")
    assert completed.returncode == exit_codes.ERROR
    assert "the shipped cases are missing from this installation" in completed.stderr
    run = run_installed(venv, tmp_path, "conformance", "run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                        "--profile", "hf")
    assert run.returncode == exit_codes.ERROR and "Traceback" not in run.stderr
    assert "the shipped cases are missing from this installation" in run.stderr
