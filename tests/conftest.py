"""Shared fixtures for the real-vLLM tier.

- `tiny_checkpoint`: path of the `full` fixture checkpoint (built once per session).
- `hf_server`, `legacy_server`, `hf_rust_server`: real vLLM 0.32 servers (hf-rust: its Rust frontend) (`conformance.server.Server`: `.base_url`
  ending in /v1, `.root_url`, `.model`, `.profile`, `.version`, `.args`, `.log_path`, `.pid`,
  `.startup_seconds`) serving the tiny checkpoint; `transformers_serve_server`: `transformers serve`
  5.23 (its virtual environment made on first use) on the record's variant of it; `hf_033_server`:
  vLLM 0.33's Python frontend over the 0.32 CPU kernels (its overlay built on first use), and
  `legacy_033_server` the same with hermes + qwen3; `hf_rust_033_server`: vLLM 0.33's Rust frontend over
  that overlay's engine; `hf_closer_server`, `hf_033_closer_server`: hf and hf-0.33 on the
  `closer-ends-with-anchor` variant (the cases that need it). Nothing starts until a test asks for a server;
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

CLOSER_VARIANT = "closer-ends-with-anchor"
# fixture name -> profile, or (profile, fixture variant) for a server on another variant than its record's
SERVER_FIXTURES: dict[str, str | tuple[str, str]] = {
    "hf_server": "hf", "legacy_server": "legacy", "hf_rust_server": "hf-rust",
    "transformers_serve_server": "transformers-serve", "hf_033_server": "hf-0.33",
    "legacy_033_server": "legacy-0.33", "hf_rust_033_server": "hf-rust-0.33",
    "hf_closer_server": ("hf", CLOSER_VARIANT), "hf_033_closer_server": ("hf-0.33", CLOSER_VARIANT),
}
ServerKey = tuple[str, str]  # (profile, fixture variant)
_profiles_needed: set[ServerKey] = set()
_started_servers: list[tuple[ServerKey, Server]] = []


def server_key(entry: str | tuple[str, str]) -> ServerKey:
    """(profile, the fixture variant it serves) of a SERVER_FIXTURES entry."""
    return entry if isinstance(entry, tuple) else (entry, PROFILES[entry].fixture_variant)


def _profiles_used_by(item: pytest.Item) -> set[ServerKey]:
    return {server_key(SERVER_FIXTURES[name]) for name in getattr(item, "fixturenames", ()) if name in SERVER_FIXTURES}


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
        for (_, variant), server in _started_servers:
            terminalreporter.write_line(
                f"{server.profile.name} ({variant}): {server.profile.server_name} {server.version} healthy after "
                f"{server.startup_seconds:.1f} s "
                f"(log: {server.log_path})"
            )


class ServerPool:
    """On the first request, starts every needed profile and waits for all of them at once (so each
    start-up time is its own); hands out healthy servers; stops them all at the end."""

    def __init__(self, checkpoints: Path, log_dir: Path, profiles: set[ServerKey]) -> None:
        self.checkpoints = checkpoints  # one folder per fixture variant, built when a server needs it
        self.log_dir = log_dir
        self.profiles = profiles
        self.processes: dict[ServerKey, ServerProcess] = {}
        self.outcomes: dict[ServerKey, Server | ServerStartError] = {}
        self.pids: set[int] = set()

    def get(self, key: ServerKey) -> Server:
        if importlib.util.find_spec("vllm") is None:
            pytest.fail("vLLM is not installed: run scripts/bootstrap, or deselect this tier with -m 'not vllm'")
        if key not in self.outcomes:
            self._start_and_wait(sorted((self.profiles | {key}) - set(self.outcomes)))
        outcome = self.outcomes[key]
        if isinstance(outcome, ServerStartError):
            raise outcome
        return outcome

    def _start_and_wait(self, keys: list[ServerKey]) -> None:
        for key in keys:  # in this (the main) thread: see conformance.server.start
            try:
                self.processes[key] = start(key[0], self.checkpoint_for(key[1]), log_dir=self.log_dir)
            except ServerStartError as error:  # its set-up failed: the others still start
                self.outcomes[key] = error
        keys = [key for key in keys if key in self.processes]
        if not keys:
            return
        with ThreadPoolExecutor(len(keys)) as pool:
            for key, outcome in zip(keys, pool.map(self._wait, keys)):
                self.outcomes[key] = outcome
                if isinstance(outcome, Server):
                    self.pids |= {outcome.pid, *descendant_pids(outcome.pid)}
                    _started_servers.append((key, outcome))

    def checkpoint_for(self, variant: str) -> Path:
        """The tiny checkpoint in `variant`, built once."""
        folder = self.checkpoints / variant
        return folder if (folder / "config.json").exists() else build_fixture(folder, variant)

    def _wait(self, key: ServerKey) -> Server | ServerStartError:
        try:
            return self.processes[key].wait_until_healthy()
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


def _server_fixture(name: str, key: ServerKey):
    @pytest.fixture(scope="session", name=name)
    def server(server_pool: ServerPool) -> Server:
        return server_pool.get(key)

    server.__doc__ = f"The real {key[0]} server of the pool, serving the tiny checkpoint's {key[1]} variant."
    return server


# hf_server, legacy_server, ...: one session fixture per entry of SERVER_FIXTURES
for _name, _entry in SERVER_FIXTURES.items():
    globals()[_name] = _server_fixture(_name, server_key(_entry))
