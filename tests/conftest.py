"""Shared fixtures for the real-vLLM tier.

- `tiny_checkpoint`: path of the `full` fixture checkpoint (built once per session).
- `hf_server`, `legacy_server`: real vLLM 0.32 servers (`conformance.server.Server`: `.base_url`
  ending in /v1, `.model`, `.profile`, `.version`, `.log_path`, `.pid`, `.startup_seconds`) serving
  the tiny checkpoint. Each starts on first use, both can run at once, and they stop at session end.

Tests using either server fixture are marked `vllm` automatically, so `pytest -m "not vllm"` runs
the fast tier alone. The terminal summary lists each server's measured start-up time.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.fixture import build_fixture
from conformance.server import Server, launch

SERVER_FIXTURES = ("hf_server", "legacy_server")
_started_servers: list[Server] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in SERVER_FIXTURES):
            item.add_marker(pytest.mark.vllm)


def pytest_terminal_summary(terminalreporter) -> None:
    if _started_servers:
        terminalreporter.section("vLLM servers")
        for server in _started_servers:
            terminalreporter.write_line(
                f"{server.profile.name}: vLLM {server.version} healthy after {server.startup_seconds:.1f} s "
                f"(log: {server.log_path})"
            )


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture(tmp_path_factory.mktemp("tiny-checkpoint") / "full")


@pytest.fixture(scope="session")
def vllm_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-logs")


@contextlib.contextmanager
def _session_server(profile: str, model: Path, log_dir: Path) -> Iterator[Server]:
    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vLLM is not installed: run scripts/bootstrap, or deselect this tier with -m 'not vllm'")
    with launch(profile, model, log_dir=log_dir) as server:
        _started_servers.append(server)
        yield server


@pytest.fixture(scope="session")
def hf_server(tiny_checkpoint: Path, vllm_log_dir: Path) -> Iterator[Server]:
    with _session_server("hf", tiny_checkpoint, vllm_log_dir) as server:
        yield server


@pytest.fixture(scope="session")
def legacy_server(tiny_checkpoint: Path, vllm_log_dir: Path) -> Iterator[Server]:
    with _session_server("legacy", tiny_checkpoint, vllm_log_dir) as server:
        yield server
