"""vLLM 0.32's Rust frontend without an engine: `vllm-rs render` answers /v1/chat/completions/render.

The render server loads the checkpoint's files as `vllm-rs serve` does and builds the output parser
for every request (the same `DefaultChatOutputProcessor` path), so a refused template shows on the
first request in about 0.1 s instead of after an engine's start-up. Its answer is 400 with the
frontend's message, where `serve` answers 500 with "failed to submit chat request: " before it
(tests/test_audit_rust_vs_vllm_rs.py shows both on real servers).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from conformance.servers.launch import free_port, stop_process_tree

START_TIMEOUT_S = 30.0
REQUEST = {"messages": [{"role": "user", "content": "hi"}]}
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RenderFrontend:
    """Writes each tokenizer_config into a copy of `base` (the tiny checkpoint) and asks `vllm-rs render`."""

    def __init__(self, binary: Path, base: Path, work: Path) -> None:
        self.binary, self.checkpoint = binary, work / "checkpoint"
        shutil.copytree(base, self.checkpoint)
        base_config = json.loads((base / "tokenizer_config.json").read_text())
        base_config.pop("response_template", None)
        self.base_config = base_config

    def answer(self, tokenizer_config: dict, flags: tuple[str, ...]) -> tuple[int, str | None]:
        """(HTTP status, error.message or None) of one chat render request."""
        config = {**self.base_config, **tokenizer_config}
        (self.checkpoint / "tokenizer_config.json").write_text(json.dumps(config))
        port = free_port()
        process = subprocess.Popen([str(self.binary), "render", str(self.checkpoint), "--port", str(port),
                                    "--served-model-name", "m", *flags],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait(process, port)
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions/render", data=json.dumps({"model": "m", **REQUEST}).encode(),
                headers={"content-type": "application/json"})
            try:
                with _LOOPBACK.open(request, timeout=30) as response:
                    return response.status, None
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())["error"]["message"]
        finally:
            stop_process_tree(process, grace=2.0)

    @staticmethod
    def _wait(process: subprocess.Popen, port: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"vllm-rs render exited with {process.returncode}")
            try:
                with _LOOPBACK.open(f"http://127.0.0.1:{port}/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"vllm-rs render not healthy in {START_TIMEOUT_S:g} s")
