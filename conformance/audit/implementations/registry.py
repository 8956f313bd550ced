"""The implementations the matrix can run, by name, and where each one's code comes from.

A transformers release is imported as `transformers.utils.chat_parsing` with its own install first on
PYTHONPATH; a fork is the `chat_parsing` folder of vLLM or SGLang (from its whole wheel, installed without
dependencies) loaded as a stand-alone package
(its imports are relative), so neither engine (nor torch) is imported.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from conformance.audit.implementations import setup

TRANSFORMERS_RELEASES = ("5.16.1", "5.17.0", "5.18.0", "5.19.0", "5.20.2", "5.21.1", "5.22.2", "5.23.0", "5.24.0")
Kind = Literal["package", "folder"]


@dataclass(frozen=True)
class Implementation:
    name: str
    kind: Kind  # "package": import `transformers.utils.chat_parsing` from `locate()` first on PYTHONPATH;
    # "folder": load the `chat_parsing` folder `locate()` returns as a package
    locate: Callable[[], Path]  # installs on first use; raises setup.SetupError


def _venv_vllm_fork() -> Path:
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it (and torch)
    if spec is None or not spec.submodule_search_locations:
        raise setup.SetupError("vLLM is not installed in this environment")
    folder = Path(list(spec.submodule_search_locations)[0]) / "parser" / "chat_parsing"
    if not (folder / "response_parser.py").is_file():
        raise setup.SetupError(f"{folder} has no response_parser.py (not vLLM 0.32?)")
    return folder


def _fork(name: str, requirement: str, package_path: str) -> Callable[[], Path]:
    def locate() -> Path:
        return setup.ensure_fork(name, requirement, package_path) / package_path

    return locate


def sglang_install() -> Path:
    """SGLang 0.5.23's whole wheel, installed without dependencies (its parser folder is the fork; the
    tests also call its serving validation from here)."""
    return setup.ensure_package("sglang-0.5.23", "sglang==0.5.23")


def _sglang_fork() -> Path:
    return sglang_install() / "sglang" / "srt" / "parser" / "chat_parsing"


def _transformers(release: str) -> Callable[[], Path]:
    return lambda: setup.ensure_transformers(release)


IMPLEMENTATIONS: dict[str, Implementation] = {
    **{f"transformers-{release}": Implementation(f"transformers-{release}", "package", _transformers(release))
       for release in TRANSFORMERS_RELEASES},
    "vllm-0.32": Implementation("vllm-0.32", "folder", _venv_vllm_fork),
    "vllm-0.33": Implementation("vllm-0.33", "folder", _fork("vllm-0.33.0", "vllm==0.33.0", "vllm/parser/chat_parsing/")),
    "sglang-0.5.23": Implementation("sglang-0.5.23", "folder", _sglang_fork),
}


def select(spec: str) -> list[Implementation]:
    """`all` or comma-separated names (a `transformers` entry stands for every release); ValueError names
    an unknown one."""
    if spec.strip() == "all":
        return list(IMPLEMENTATIONS.values())
    chosen: list[Implementation] = []
    for name in (part.strip() for part in spec.split(",") if part.strip()):
        matches = [impl for key, impl in IMPLEMENTATIONS.items() if key == name or key.startswith(name + "-")]
        if not matches:
            raise ValueError(f"--implementations: unknown implementation {name!r}; choose from all, "
                             + ", ".join(IMPLEMENTATIONS))
        chosen += [impl for impl in matches if impl not in chosen]
    if not chosen:
        raise ValueError("--implementations: no implementation named")
    return chosen


def install_all() -> None:
    """Install every implementation into the cache (what `scripts/bootstrap` runs), saying where."""
    for implementation in IMPLEMENTATIONS.values():
        print(f"{implementation.name}: {implementation.locate()}", flush=True)


if __name__ == "__main__":
    install_all()
