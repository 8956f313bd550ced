"""Run a command with its standard error on a pseudo-terminal, as a person at a terminal sees it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
from collections.abc import Sequence
from pathlib import Path


def stderr_on_a_terminal(command: Sequence[str], cwd: Path, environment: dict[str, str],
                         timeout: float = 60) -> tuple[int, str]:
    """(exit status, everything the command wrote to its standard error, a terminal); its standard
    output goes nowhere."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=terminal, cwd=cwd, env=environment)
    os.close(terminal)
    seen = b""
    try:
        while select.select([controller], [], [], timeout)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the process closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        return process.wait(timeout=timeout), seen.decode("utf-8", "replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)
