"""The template analysis in a worker process, bounded in time and memory (`template.analyze_template`
runs it here): a plain child interpreter speaking length-prefixed pickles over its stdin/stdout, its
address space capped at WORKER_MEMORY_BYTES, killed and replaced when an analysis overruns its time
limit. Unlike multiprocessing's spawn, it never re-imports the caller's __main__, so any script can
call `analyze_template`."""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from typing import Any

from conformance.audit.predictors.vllm_032 import StartupVerdict
from conformance.audit.template_rules import (
    ANALYSIS_TIMEOUT_S,
    TemplateAnalysis,
    TemplateAnalysisTimeout,
    TemplateTooExpensive,
    analyze_template_unbounded,
)
from conformance.util.limits import limit_memory
from conformance.util.package_paths import SOURCE_ROOT

WORKER_MEMORY_BYTES = 1024 * 1024 * 1024  # the worker's address space (a regex can ask for gigabytes)
_FRAME_HEADER = struct.Struct(">I")


def _write_frame(stream: Any, payload: object) -> None:
    data = pickle.dumps(payload)
    stream.write(_FRAME_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream: Any) -> Any:
    header = stream.read(_FRAME_HEADER.size)
    if len(header) < _FRAME_HEADER.size:
        raise EOFError
    (length,) = _FRAME_HEADER.unpack(header)
    return pickle.loads(stream.read(length))


def serve_worker() -> None:
    """Worker process loop: analyse each tokenizer_config received on stdin until it closes.

    Ctrl-C reaches the whole process group; the parent decides when the worker ends (it closes stdin or kills
    it), so the worker ignores SIGINT rather than dying with a traceback on the user's terminal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_memory(WORKER_MEMORY_BYTES)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            tokenizer_config, model_type = _read_frame(requests)
        except EOFError:
            return
        try:
            _write_frame(answers, ("ok", analyze_template_unbounded(tokenizer_config, model_type)))
        except MemoryError:  # the regex compiler's request was refused: this process is still usable
            _write_frame(answers, ("too_expensive", f"analysing the response_template needed more than "
                                   f"{WORKER_MEMORY_BYTES // 2**20} MiB (a regex too expensive to compile)"))
        except Exception as exc:  # report, never die: the next template deserves an answer
            _write_frame(answers, ("error", f"{type(exc).__name__}: {exc}"))


class BoundedWorker:
    """One long-lived worker process; killed and replaced when an analysis overruns its time limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        source_root = str(SOURCE_ROOT)
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
        return subprocess.Popen(
            [sys.executable, "-c", "from conformance.audit.template_worker import serve_worker; serve_worker()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environment,
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            process.stdin.close()
            process.stdout.close()

    def run(self, tokenizer_config: dict, model_type: str | None, timeout: float) -> TemplateAnalysis:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self.stop()
                self._process = self._start()
            try:
                _write_frame(self._process.stdin, (tokenizer_config, model_type))
                ready, _, _ = select.select([self._process.stdout], [], [], timeout)
                if not ready:
                    self.stop()
                    raise TemplateAnalysisTimeout(
                        f"analysing the response_template took longer than {timeout:g}s "
                        "(a regex too expensive to compile or search)"
                    )
                kind, payload = _read_frame(self._process.stdout)
            except (OSError, EOFError) as exc:
                self.stop()
                raise RuntimeError(f"template analysis worker died: {exc}") from exc
        if kind == "too_expensive":
            raise TemplateTooExpensive(payload)
        if kind == "error":
            raise RuntimeError(f"template analysis failed: {payload}")
        return payload


WORKER = BoundedWorker()
atexit.register(WORKER.stop)


def analyze_template(tokenizer_config: dict, timeout: float = ANALYSIS_TIMEOUT_S,
                     model_type: str | None = None) -> TemplateAnalysis:
    """Analyse the metadata of one tokenizer_config.json (and config.json's `model_type`), bounded in time
    (raises TemplateAnalysisTimeout) and memory (raises TemplateTooExpensive), in a worker process
    (`conformance.audit.template_worker`)."""

    return WORKER.run(tokenizer_config, model_type, timeout)


def predict_vllm_startup(tokenizer_config: dict) -> dict[str, StartupVerdict]:
    """vLLM 0.32's startup outcome for each configuration in CONFIGURATIONS, with vLLM's own message."""
    return analyze_template(tokenizer_config).vllm_0_32
