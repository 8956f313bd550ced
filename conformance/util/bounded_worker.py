"""A function run on untrusted input in a worker process, bounded in time and memory: a plain child
interpreter speaking length-prefixed pickles over its stdin/stdout, its address space capped, killed and
replaced when a call overruns its time limit. Unlike multiprocessing's spawn, it never re-imports the
caller's __main__, so any script can use it. The function is named by `module:function`; it and its
arguments' types are imported in the child."""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from typing import IO, Any

from conformance.util.limits import limit_memory
from conformance.util.package_paths import SOURCE_ROOT

_FRAME_HEADER = struct.Struct(">I")


class CallTimeout(Exception):
    """The call overran its time limit (the worker was killed)."""


class CallTooExpensive(Exception):
    """The call asked for more memory than the worker's cap."""


class CallFailed(Exception):
    """The called function raised, or the worker died; the message says what."""


def _write_frame(stream: IO[bytes], payload: object) -> None:
    data = pickle.dumps(payload)
    stream.write(_FRAME_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> Any:
    header = stream.read(_FRAME_HEADER.size)
    if len(header) < _FRAME_HEADER.size:
        raise EOFError
    (length,) = _FRAME_HEADER.unpack(header)
    return pickle.loads(stream.read(length))


def serve(memory_bytes: int) -> None:
    """Worker process loop: answer each (function, arguments) received on stdin until it closes.

    Ctrl-C reaches the whole process group; the parent decides when the worker ends (it closes stdin or kills
    it), so the worker ignores SIGINT rather than dying with a traceback on the user's terminal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_memory(memory_bytes)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            target, arguments = _read_frame(requests)
        except EOFError:
            return
        try:
            module, name = target.split(":")
            _write_frame(answers, ("ok", getattr(importlib.import_module(module), name)(*arguments)))
        except MemoryError:  # the request was refused: this process is still usable
            _write_frame(answers, ("too_expensive", f"more than {memory_bytes // 2**20} MiB"))
        except Exception as exc:  # report, never die: the next call deserves an answer
            _write_frame(answers, ("error", f"{type(exc).__name__}: {exc}"))


class BoundedWorker:
    """One long-lived worker process capped at `memory_bytes`; killed and replaced when a call overruns."""

    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        atexit.register(self.stop)

    def _start(self) -> subprocess.Popen[bytes]:
        source_root = str(SOURCE_ROOT)
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
        return subprocess.Popen(
            [sys.executable, "-c", f"from conformance.util.bounded_worker import serve; serve({self.memory_bytes})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environment,
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            assert process.stdin is not None and process.stdout is not None
            process.stdin.close()
            process.stdout.close()

    def call(self, target: str, arguments: tuple[Any, ...], timeout: float) -> Any:
        """`module:function`(*arguments) in the worker: its answer, or CallTimeout, CallTooExpensive, CallFailed."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self.stop()
                self._process = self._start()
            assert self._process.stdin is not None and self._process.stdout is not None
            try:
                _write_frame(self._process.stdin, (target, arguments))
                ready, _, _ = select.select([self._process.stdout], [], [], timeout)
                if not ready:
                    self.stop()
                    raise CallTimeout(f"took longer than {timeout:g}s")
                kind, payload = _read_frame(self._process.stdout)
            except (OSError, EOFError) as exc:
                self.stop()
                raise CallFailed(f"the worker died: {exc}") from exc
        if kind == "too_expensive":
            raise CallTooExpensive(payload)
        if kind == "error":
            raise CallFailed(payload)
        return payload
