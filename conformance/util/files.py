"""Files read and written without trusting what is there. `read_bounded` and `open_regular` read a regular
file of at most a size cap (a FIFO would block for ever, `/dev/zero` never ends); `write_atomically` writes a
whole file or nothing, whatever string it is given.

A refusal is an OSError naming the path, with the reason as its `strerror`, so every reader's
"cannot read: ..." message says it: IsADirectoryError, NotARegularFile or FileTooLarge.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

STDOUT = Path("-")  # an output path of `-` means standard output

_SPECIAL_FILES = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                  stat.S_IFSOCK: "a socket"}


class NotARegularFile(OSError):
    """A FIFO, a device or a socket where a file was expected: reading it may block or never end."""


class FileTooLarge(OSError):
    """A file over the size cap of its kind; `size` is what it holds (at least)."""

    def __init__(self, path: Path, size: int, limit: int, what: str) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, over the {limit}-byte limit of {what}", str(path))
        self.size = size


def open_regular(path: Path, limit: int, what: str) -> BinaryIO:
    """`path` opened for binary reading when it is a regular file of at most `limit` bytes, else an OSError
    (`what` names the kind of file in the message: "a recording")."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with no writer would block the open
    try:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(status.st_mode):
            kind = _SPECIAL_FILES.get(stat.S_IFMT(status.st_mode), "a special file")
            raise NotARegularFile(errno.EINVAL, f"not a regular file but {kind}", str(path))
        if status.st_size > limit:
            raise FileTooLarge(path, status.st_size, limit, what)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (see `open_regular`)."""
    with open_regular(path, limit, what) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while it was read
        raise FileTooLarge(path, len(data), limit, what)
    return data


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`: a reader, or a crash, finds
    the old file or the new one, never part of one. Text is UTF-8, a lone surrogate (which a server may send
    in JSON, and UTF-8 cannot hold) written as its escape (`\\ud800`): in a JSON string, the same character.
    An OSError names `path`."""
    raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(exc, OSError):  # a full disk says so on a write, naming no file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
