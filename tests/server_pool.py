"""The real-server pool of the test session (tests/conftest.py): which servers start together, and when each stops."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conformance.fixture import build_fixture
from conformance.server import Server, ServerProcess, ServerStartError, descendant_pids, pid_alive, start

ServerKey = tuple[str, str]  # (profile, fixture variant)
# What one pooled server takes (measured: seven at once 14.7 GB above the idle machine, 2.1 GB each).
SERVER_MEMORY_BYTES = int(2.5 * 2**30)


def available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 when unknown: then every server counts as fitting)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class ServerPool:
    """On the first request, starts every needed server that fits in memory and waits for all of them at
    once (so each start-up time is its own); hands out healthy servers; stops each after the last test
    that uses it, and all at the end. A server that did not fit starts when a test asks for it, by then
    in the memory of the ones stopped (tests needing other variants run last for that)."""

    def __init__(self, checkpoints: Path, log_dir: Path, profiles: set[ServerKey], first_use: dict[ServerKey, int],
                 last_use: dict[ServerKey, int], capacity: int | None = None) -> None:
        self.checkpoints = checkpoints  # one folder per fixture variant, built when a server needs it
        self.log_dir = log_dir
        self.profiles = profiles
        self.first_use, self.last_use = first_use, last_use  # positions of the first and last test using each
        self.started: list[tuple[ServerKey, Server]] = []
        memory = available_memory()
        self.capacity = capacity or (max(1, memory // SERVER_MEMORY_BYTES) if memory else len(profiles) or 1)
        self.processes: dict[ServerKey, ServerProcess] = {}
        self.outcomes: dict[ServerKey, Server | ServerStartError] = {}
        self.stopped: set[ServerKey] = set()
        self.pids: set[int] = set()

    def get(self, key: ServerKey) -> Server:
        if importlib.util.find_spec("vllm") is None:
            pytest.fail("vLLM is not installed: run scripts/bootstrap, or deselect this tier with -m 'not vllm'")
        if key not in self.outcomes:
            self._start_and_wait(self._next_wave(key))
        outcome = self.outcomes[key]
        if isinstance(outcome, ServerStartError):
            raise outcome
        if key in self.stopped:
            pytest.fail(f"the pool stopped {key} after what it took for its last test; "
                        "a test asked for it later (request.getfixturevalue?)")
        return outcome

    def _next_wave(self, key: ServerKey) -> list[ServerKey]:
        """`key` and, in order of first use, the other servers not started yet that fit beside the running ones."""
        running = len(set(self.processes) - self.stopped)
        waiting = sorted(self.profiles - set(self.outcomes) - {key}, key=lambda other: self.first_use.get(other, 0))
        return [key, *waiting[:max(0, self.capacity - running - 1)]]

    def stop_unused_after(self, position: int) -> None:
        """Stop the servers whose last selected test is at `position` or before."""
        for key, process in self.processes.items():
            if key not in self.stopped and self.last_use.get(key, -1) <= position:
                process.stop()
                self.stopped.add(key)

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
                    self.started.append((key, outcome))

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
