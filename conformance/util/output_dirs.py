"""Output directories written by one process at a time: a default name no other process gets
(`fresh_directory`), and a claim on a directory for the time of the writing (`claimed_directory`): refused
while another process holds it, or when it already holds a record, unless that is to be replaced (--replace).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path


class OutputDirError(Exception):
    """A directory this process may not write to; the message names it and says why."""


def cannot_write(exc: OSError, path: Path) -> str:
    """The message of a failed write: `cannot write PATH: REASON` (the file the error names, else `path`)."""
    return f"cannot write {exc.filename or path}: {exc.strerror or exc}"


def fresh_directory(parent: Path, prefix: str) -> Path:
    """A new directory `parent/prefix-<YYYYmmdd-HHMMSS>` (`-2`, `-3`... after it when that name is taken),
    made here: mkdir is exclusive, so two processes started within the same second get two directories."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(cannot_write(exc, parent)) from exc
    counter = 1
    while True:
        directory = parent / (f"{prefix}-{stamp}" if counter == 1 else f"{prefix}-{stamp}-{counter}")
        try:
            directory.mkdir()
            return directory
        except FileExistsError:
            counter += 1
        except OSError as exc:
            raise OutputDirError(cannot_write(exc, directory)) from exc


@contextlib.contextmanager
def claimed_directory(directory: Path, records: Sequence[str], replace: bool) -> Iterator[None]:
    """Hold `directory` (made if missing) for this process's writing while the block runs. OutputDirError
    when it cannot be a directory, when another process holds it, or when it holds one of `records` (paths
    inside it) and `replace` is false. The lock (flock on the directory itself) ends with the process at the
    latest, and leaves no file behind."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except FileExistsError as exc:
        raise OutputDirError(f"cannot write {directory}: a file, not a directory") from exc
    except OSError as exc:
        raise OutputDirError(cannot_write(exc, directory)) from exc
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputDirError(f"cannot write {directory}: another conformance process is writing to it") from None
        held = next((name for name in records if os.path.lexists(directory / name)), None)
        if held is not None and not replace:
            raise OutputDirError(f"{directory} already holds {held} of an earlier run or gate: "
                                 "give --replace to write over it, or choose another directory")
        yield
    finally:
        os.close(descriptor)
