"""`transformers serve` in a virtual environment of its own, made once in the suite's cache.

vLLM 0.32 pins transformers below 5.20, so `transformers serve` 5.23 cannot share its interpreter:
the set-up creates `<cache>/venvs/<name>` with this interpreter's `venv` module and installs the
requirements into it with its own pip (the caller's environment passes through, so
PIP_FIND_LINKS / PIP_INDEX_URL decide where wheels come from: torch's `+cpu` build from a local
wheel folder, the rest from PyPI). A file `installed.json` naming the requirements is written last:
a venv without it (an install that failed or was interrupted) is removed and made again, one with
it is used as it is, so a second resolve installs nothing. Concurrent set-ups (xdist workers, two
CI jobs) wait on one lock and the second finds the work done. A failed install raises `SetupError`
with pip's last line and the log that holds the rest.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance.servers.runtimes import Resolved, SetupError, VirtualEnv, cache_root, exclusive

INSTALL_TIMEOUT_SECONDS = 1800.0
MARKER_FILE = "installed.json"


def venv_path(name: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "venvs" / name


def _is_complete(venv: Path, requirements: tuple[str, ...]) -> bool:
    try:
        recorded = json.loads((venv / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return recorded.get("requirements") == list(requirements) and (venv / "bin" / "python").exists()


def ensure_venv(name: str, requirements: tuple[str, ...], cache: Path | None = None,
                announce: Callable[[str], None] = print) -> Path:
    """The cached virtual environment `name` with `requirements` installed, made the first time."""
    venv = venv_path(name, cache)
    if _is_complete(venv, requirements):
        return venv
    with exclusive(venv.parent / f"{name}.setup"):
        if _is_complete(venv, requirements):  # another process made it while we waited
            return venv
        announce(f"setting up {name}: a virtual environment in {venv} with {' '.join(requirements)} "
                 f"(once; a few minutes)")
        started = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)  # what a failed or older set-up left
        log = venv.parent / f"{name}.install.log"
        _run([sys.executable, "-m", "venv", str(venv)], log, f"creating the virtual environment {venv}")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
              "--no-input", *requirements], log, f"pip install {' '.join(requirements)}")  # fmt: skip
        seconds = time.monotonic() - started
        marker = venv / MARKER_FILE
        marker.with_suffix(".partial").write_text(
            json.dumps({"requirements": list(requirements), "setup_seconds": round(seconds, 1)}), encoding="utf-8")
        marker.with_suffix(".partial").replace(marker)
        announce(f"{name} set up in {seconds:.0f} s")
    return venv


def _run(command: list[str], log: Path, what: str) -> None:
    """Run a set-up step, its output appended to `log`; SetupError naming the step and pip's last line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=INSTALL_TIMEOUT_SECONDS)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise SetupError(f"{what} did not finish in {INSTALL_TIMEOUT_SECONDS:.0f} s (log: {log})") from None
        except OSError as error:
            raise SetupError(f"{what} could not run: {error}") from None
    if done.returncode != 0:
        lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR:")]
        last = (errors or lines or ["(no output)"])[-1].strip()
        raise SetupError(f"{what} failed (exit {done.returncode}): {last} (log: {log})")


@dataclass(frozen=True)
class ManagedVirtualEnv:
    """A `VirtualEnv` the set-up makes (`ensure_venv`) under the cache on first use: `{python}` is
    its interpreter (unless overridden), `{bin}` its scripts folder, first on PATH."""

    name: str
    requirements: tuple[str, ...]

    def resolve(self, python: str | Path | None) -> Resolved:
        venv = ensure_venv(self.name, self.requirements,
                           announce=lambda line: print(line, file=sys.stderr, flush=True))
        return VirtualEnv(venv).resolve(python)


TRANSFORMERS_SERVE = ManagedVirtualEnv(
    "transformers-serve-5.23.0", ("torch==2.13.0+cpu", "transformers[serving]==5.23.0"))
