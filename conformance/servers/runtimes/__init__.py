"""Where a server's executable comes from, when it is not this interpreter: set-up steps that
download, extract or create it once and cache it (`cache_root`), and the `Runtime` records of
`conformance.servers.profiles` that use them."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class SetupError(RuntimeError):
    """A runtime's set-up could not provide the server's executable (download refused, an archive
    without the expected file, a failed install, ...): a launcher reports it as a server that could
    not start, the message saying what and where."""


def cache_root() -> Path:
    """The suite's download cache: $CONFORMANCE_CACHE, else $XDG_CACHE_HOME/hf-parser-conformance
    (~/.cache/... by default). It outlives checkouts, so CI on the same machine downloads once."""
    if explicit := os.environ.get("CONFORMANCE_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hf-parser-conformance"


PIP_TIMEOUT_SECONDS = 1800.0


def pip(arguments: list[str], hint: str = "") -> None:
    """Run this interpreter's pip with `arguments`; SetupError naming the step and pip's last line
    (`hint` says where it fetches from) when it fails or takes longer than PIP_TIMEOUT_SECONDS."""
    step = f"pip {arguments[0]} {' '.join(a for a in arguments[1:] if not a.startswith('-') and '/' not in a)}"
    try:
        done = subprocess.run([sys.executable, "-m", "pip", *arguments], capture_output=True, text=True,
                              timeout=PIP_TIMEOUT_SECONDS)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SetupError(f"{step} did not finish in {PIP_TIMEOUT_SECONDS:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SetupError(f"{step} failed{f' ({hint})' if hint else ''}: {last}")


def download_wheel(requirement: str, folder: Path, hint: str = "") -> Path:
    """The wheel of `requirement` (no dependencies) that pip downloads into `folder`."""
    pip(["download", "--quiet", "--no-deps", "--only-binary=:all:", requirement, "--dest", str(folder)], hint)
    wheels = sorted(Path(folder).glob("*.whl"))
    if not wheels:
        raise SetupError(f"pip download {requirement} left no wheel in {folder}")
    return wheels[0]


@contextlib.contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (created), so parallel set-ups (xdist workers, two CI
    jobs) build one cache entry once instead of racing on it."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Resolved:
    """A runtime made concrete: values for the command template's placeholders, and environment
    variables set over the caller's (e.g. PATH with a virtual environment's bin first)."""

    placeholders: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)
    build_note: str | None = None  # how the server was assembled when that is no release anyone ships (report stamps)


class Runtime(Protocol):
    """Where a server's executable comes from (an interpreter, a virtual environment, a binary a
    set-up step extracts and caches). `python` is the caller's interpreter override (`--python`)."""

    def resolve(self, python: str | Path | None) -> Resolved: ...


@dataclass(frozen=True)
class CurrentInterpreter:
    """The interpreter running this tool, or the one given (`{python}`): it has the server installed."""

    def resolve(self, python: str | Path | None) -> Resolved:
        return Resolved({"python": str(python or sys.executable)})


@dataclass(frozen=True)
class VirtualEnv:
    """A server installed in its own virtual environment at `path`: `{python}` is its interpreter
    (unless overridden), `{bin}` its scripts folder, which also goes first on PATH."""

    path: Path

    def resolve(self, python: str | Path | None) -> Resolved:
        scripts = Path(self.path) / "bin"
        return Resolved({"python": str(python or scripts / "python"), "bin": str(scripts)},
                        {"PATH": os.pathsep.join([str(scripts), os.environ.get("PATH", os.defpath)])})
