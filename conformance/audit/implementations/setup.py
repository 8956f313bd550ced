"""Installing the parser implementations side by side, once, into the suite's cache.

transformers: each release with `pip install --no-deps --target <cache>/transformers/<version>`
(5.16 and 5.17 also get `huggingface_hub>=1.5,<2` there: they import its 1.x API); vLLM 0.33: its
wheel with `pip download --no-deps`, of which only the parser files are kept under <cache>/forks/<name>/
(the wheel is dropped); SGLang 0.5.23: its whole wheel (`--no-deps --target`) under
<cache>/packages/sglang-0.5.23/, whose parser folder is the fork and whose serving code the tests call. A finished entry holds a `.complete` file, so
an interrupted set-up is redone, and `exclusive()` keeps parallel set-ups from racing.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path

from conformance.servers.runtimes import SetupError, cache_root, download_wheel, exclusive, pip

COMPLETE = ".complete"
OLD_HUB_RELEASES = frozenset({"5.16.1", "5.17.0"})  # they import huggingface_hub 1.x
OLD_HUB_REQUIREMENT = "huggingface_hub>=1.5,<2"


def transformers_dir(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "transformers" / version


def ensure_transformers(version: str, cache: Path | None = None) -> Path:
    """The folder to put on PYTHONPATH for transformers `version` (installed the first time)."""
    requirements = [f"transformers=={version}"]
    if version in OLD_HUB_RELEASES:
        requirements.append(OLD_HUB_REQUIREMENT)
    return _ensure_target(transformers_dir(version, cache), requirements)


def package_dir(name: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "packages" / name


def ensure_package(name: str, requirement: str, cache: Path | None = None) -> Path:
    """The folder to put on PYTHONPATH for `requirement`'s whole wheel, without its dependencies (e.g.
    SGLang's serving code, whose validation the tests run): installed the first time."""
    return _ensure_target(package_dir(name, cache), [requirement])


def _ensure_target(target: Path, requirements: list[str]) -> Path:
    """`pip install --no-deps --target target requirements`, once (a `.complete` file marks it done)."""
    if (target / COMPLETE).is_file():
        return target
    with exclusive(target.parent / f".{target.name}"):
        if (target / COMPLETE).is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        pip(["install", "--quiet", "--no-deps", "--only-binary=:all:", "--target", str(target), *requirements])
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
            _extract(download_wheel(requirement, Path(download)), members, target)
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
