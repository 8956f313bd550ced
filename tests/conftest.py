"""Shared fixtures for the real-vLLM tier.

- `tiny_checkpoint`: path of the `full` fixture checkpoint (built once per session).
- `hf_server`, `legacy_server`, `hf_rust_server`: real vLLM 0.32 servers (hf-rust: its Rust frontend) (`conformance.server.Server`: `.base_url`
  ending in /v1, `.root_url`, `.model`, `.profile`, `.version`, `.args`, `.log_path`, `.pid`,
  `.startup_seconds`) serving the tiny checkpoint; `transformers_serve_server`: `transformers serve`
  5.23 (its virtual environment made on first use) on the record's variant of it; `hf_033_server`:
  vLLM 0.33's Python frontend over the 0.32 CPU kernels (its overlay built on first use), and
  `legacy_033_server` the same with hermes + qwen3; `hf_rust_033_server`: vLLM 0.33's Rust frontend over
  that overlay's engine. Nothing starts until a test asks for a server;
  then every profile that some selected test needs starts at once (both start together, which
  halves the wait on 2 cores), and all stop at session end, which fails loudly if a process of
  theirs is still alive.

Tests using a server fixture are marked `vllm` automatically, so `pytest -m "not vllm"` runs the
fast tier alone. The terminal summary lists each server's measured start-up time.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.fixture import build_fixture
from conformance.profiles import PROFILES
from conformance.server import Server, ServerProcess, ServerStartError, descendant_pids, pid_alive, start

SERVER_FIXTURES = {"hf_server": "hf", "legacy_server": "legacy", "hf_rust_server": "hf-rust",
                   "transformers_serve_server": "transformers-serve", "hf_033_server": "hf-0.33",
                   "legacy_033_server": "legacy-0.33", "hf_rust_033_server": "hf-rust-0.33"}
_profiles_needed: set[str] = set()
_started_servers: list[Server] = []


def _profiles_used_by(item: pytest.Item) -> set[str]:
    return {SERVER_FIXTURES[name] for name in getattr(item, "fixturenames", ()) if name in SERVER_FIXTURES}


@pytest.hookimpl(tryfirst=True)  # before -m deselection, so `-m "not vllm"` leaves these out
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _profiles_used_by(item):
            item.add_marker(pytest.mark.vllm)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Only the selected tests decide which servers the session will need."""
    for item in session.items:
        _profiles_needed.update(_profiles_used_by(item))


def pytest_terminal_summary(terminalreporter) -> None:
    if _started_servers:
        terminalreporter.section("servers")
        for server in _started_servers:
            terminalreporter.write_line(
                f"{server.profile.name}: {server.profile.server_name} {server.version} healthy after {server.startup_seconds:.1f} s "
                f"(log: {server.log_path})"
            )


class ServerPool:
    """On the first request, starts every needed profile and waits for all of them at once (so each
    start-up time is its own); hands out healthy servers; stops them all at the end."""

    def __init__(self, checkpoints: Path, log_dir: Path, profiles: set[str]) -> None:
        self.checkpoints = checkpoints  # one folder per fixture variant, built when a profile needs it
        self.log_dir = log_dir
        self.profiles = profiles
        self.processes: dict[str, ServerProcess] = {}
        self.outcomes: dict[str, Server | ServerStartError] = {}
        self.pids: set[int] = set()

    def get(self, profile: str) -> Server:
        if importlib.util.find_spec("vllm") is None:
            pytest.fail("vLLM is not installed: run scripts/bootstrap, or deselect this tier with -m 'not vllm'")
        if profile not in self.outcomes:
            self._start_and_wait(sorted((self.profiles | {profile}) - set(self.outcomes)))
        outcome = self.outcomes[profile]
        if isinstance(outcome, ServerStartError):
            raise outcome
        return outcome

    def _start_and_wait(self, profiles: list[str]) -> None:
        for name in profiles:  # in this (the main) thread: see conformance.server.start
            try:
                self.processes[name] = start(name, self.checkpoint_for(name), log_dir=self.log_dir)
            except ServerStartError as error:  # its set-up failed: the others still start
                self.outcomes[name] = error
        profiles = [name for name in profiles if name in self.processes]
        if not profiles:
            return
        with ThreadPoolExecutor(len(profiles)) as pool:
            for name, outcome in zip(profiles, pool.map(self._wait, profiles)):
                self.outcomes[name] = outcome
                if isinstance(outcome, Server):
                    self.pids |= {outcome.pid, *descendant_pids(outcome.pid)}
                    _started_servers.append(outcome)

    def checkpoint_for(self, profile: str) -> Path:
        """The tiny checkpoint in the variant the profile's record is launched on."""
        variant = PROFILES[profile].fixture_variant
        folder = self.checkpoints / variant
        return folder if (folder / "config.json").exists() else build_fixture(folder, variant)

    def _wait(self, profile: str) -> Server | ServerStartError:
        try:
            return self.processes[profile].wait_until_healthy()
        except ServerStartError as error:
            return error

    def close(self) -> None:
        for process in self.processes.values():
            process.stop()
        left = sorted(pid for pid in self.pids if pid_alive(pid))
        assert not left, f"server processes still alive after stopping: {left}"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture(tmp_path_factory.mktemp("tiny-checkpoint") / "full")


@pytest.fixture(scope="session")
def server_pool(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tiny_checkpoint.parent, tmp_path_factory.mktemp("vllm-logs"), _profiles_needed)
    try:
        yield pool
    finally:
        pool.close()


def _server_fixture(name: str, profile: str):
    @pytest.fixture(scope="session", name=name)
    def server(server_pool: ServerPool) -> Server:
        return server_pool.get(profile)

    server.__doc__ = f"The real {profile} server of the pool, serving the tiny checkpoint."
    return server


# hf_server, legacy_server, ...: one session fixture per entry of SERVER_FIXTURES
for _name, _profile in SERVER_FIXTURES.items():
    globals()[_name] = _server_fixture(_name, _profile)
