"""Installing the parser implementations side by side, once, into the suite's cache.

transformers: each release with `pip install --no-deps --target <cache>/transformers/<version>`
(5.16 and 5.17 also get `huggingface_hub>=1.5,<2` there: they import its 1.x API); vLLM 0.33 and
SGLang 0.5.23: their wheel with `pip download --no-deps`, of which only the parser files are kept
under <cache>/forks/<name>/ (the wheel is dropped). A finished entry holds a `.complete` file, so
an interrupted set-up is redone, and `exclusive()` keeps parallel set-ups from racing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from conformance.runtimes import cache_root, exclusive

PIP_TIMEOUT_SECONDS = 1800.0
COMPLETE = ".complete"
OLD_HUB_RELEASES = frozenset({"5.16.1", "5.17.0"})  # they import huggingface_hub 1.x
OLD_HUB_REQUIREMENT = "huggingface_hub>=1.5,<2"


class SetupError(RuntimeError):
    """An implementation could not be installed (pip failed, a wheel without the parser files)."""


def transformers_dir(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "transformers" / version


def ensure_transformers(version: str, cache: Path | None = None) -> Path:
    """The folder to put on PYTHONPATH for transformers `version` (installed the first time)."""
    target = transformers_dir(version, cache)
    if (target / COMPLETE).is_file():
        return target
    with exclusive(target.parent / f".{version}"):
        if (target / COMPLETE).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        requirements = [f"transformers=={version}"]
        if version in OLD_HUB_RELEASES:
            requirements.append(OLD_HUB_REQUIREMENT)
        _pip(["install", "--quiet", "--no-deps", "--only-binary=:all:", "--target", str(target), *requirements])
        target.mkdir(parents=True, exist_ok=True)
        (target / COMPLETE).write_text("")
    return target


def fork_dir(name: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "forks" / name


def ensure_fork(name: str, requirement: str, members: str, cache: Path | None = None) -> Path:
    """The folder holding the files of `requirement`'s wheel under the package path `members`
    (e.g. `vllm/parser/chat_parsing/`), extracted the first time."""
    target = fork_dir(name, cache)
    if (target / COMPLETE).is_file():
        return target
    with exclusive(target.parent / f".{name}"):
        if (target / COMPLETE).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as download:
            _pip(["download", "--quiet", "--no-deps", "--only-binary=:all:", requirement, "--dest", download])
            wheels = sorted(Path(download).glob("*.whl"))
            if not wheels:
                raise SetupError(f"pip download {requirement} left no wheel")
            _extract(wheels[0], members, target)
        (target / COMPLETE).write_text("")
    return target


def _extract(wheel: Path, members: str, target: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [name for name in archive.namelist() if name.startswith(members) and name.endswith(".py")]
            if not names:
                raise SetupError(f"{wheel.name} has no {members}*.py")
            for name in names:
                destination = target / name
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(archive.read(name))
    except zipfile.BadZipFile as error:
        raise SetupError(f"{wheel.name} is not a readable wheel: {error}") from None


def _pip(arguments: list[str]) -> None:
    command = [sys.executable, "-m", "pip", *arguments]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise SetupError(f"pip {' '.join(arguments)} did not finish in {PIP_TIMEOUT_SECONDS:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SetupError(f"pip {' '.join(arguments[:1])} {' '.join(a for a in arguments if '==' in a)} failed: {last}")
