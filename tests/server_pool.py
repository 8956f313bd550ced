"""The real-server pool of the test session (tests/conftest.py): which servers start together, and when each stops."""

from __future__ import annotations

import importlib.util
from collections.abc import Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from conformance.formats.format import Format
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.launch import Server, ServerProcess, ServerStartError, descendant_pids, pid_alive, start
from conformance.servers.profile import Profile
from conformance.servers.profiles import served_profile

# (profile, fixture variant): a variant of another format than the tiny checkpoint's is "FORMAT:VARIANT"
ServerKey = tuple[str, str]
# What one pooled server takes (measured: seven at once 14.7 GB above the idle machine, 2.1 GB each), with room for
# their peaks: at 2.5 GB, a first wave of nine (the formats' servers among them) had the kernel kill a vLLM worker.
SERVER_MEMORY_BYTES = 3 * 2**30


def available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 when unknown: then every server counts as fitting)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def servers_that_fit(wanted: int) -> int:
    """How many servers the available memory holds at once (all `wanted` where it is unknown)."""
    memory = available_memory()
    return max(1, memory // SERVER_MEMORY_BYTES) if memory else max(1, wanted)


Key = TypeVar("Key", bound=Hashable)


def start_together(attempts: Mapping[Key, tuple[Profile | str, Path]], log_dir: Path,
                   ) -> tuple[dict[Key, ServerProcess], dict[Key, Server | ServerStartError]]:
    """Start each (profile, model) of `attempts` in this (the main) thread (see conformance.servers.launch.start),
    then wait for all of them at once: (the processes started, each key's healthy server or start
    error). If anything else goes wrong, the processes started are stopped before it is raised."""
    processes: dict[Key, ServerProcess] = {}
    outcomes: dict[Key, Server | ServerStartError] = {}
    try:
        for key, (profile, model) in attempts.items():
            try:
                processes[key] = start(profile, model, log_dir=log_dir)
            except ServerStartError as error:  # its set-up failed: the others still start
                outcomes[key] = error
        if processes:
            with ThreadPoolExecutor(len(processes)) as pool:
                outcomes.update(zip(processes, pool.map(_healthy_or_error, processes.values())))
    except BaseException:
        for process in processes.values():
            process.stop()
        raise
    return processes, outcomes


def _healthy_or_error(process: ServerProcess) -> Server | ServerStartError:
    try:
        return process.wait_until_healthy()
    except ServerStartError as error:
        return error


def served_format(variant: str) -> Format:
    """The response format of a pool variant ("FORMAT:VARIANT", else the tiny checkpoint's)."""
    return FORMATS[variant.partition(":")[0]] if ":" in variant else DEFAULT_FORMAT


def started_at(pid: int) -> str | None:
    """When process `pid` started (its /proc stat start time, in clock ticks since boot; None: gone). A long
    session wraps pid numbers (pid_max is 32768 here): the same pid with another start is another process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


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
        self.capacity = capacity or servers_that_fit(len(profiles))
        self.processes: dict[ServerKey, ServerProcess] = {}
        self.outcomes: dict[ServerKey, Server | ServerStartError] = {}
        self.stopped: set[ServerKey] = set()
        self.pids: set[tuple[int, str | None]] = set()  # (pid, its start time): a pid the system reuses is not ours

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
        processes, outcomes = start_together(
            {key: (served_profile(key[0], served_format(key[1])), self.checkpoint_for(key[1])) for key in keys},
            self.log_dir)
        self.processes.update(processes)
        self.outcomes.update(outcomes)
        for key, outcome in outcomes.items():
            if isinstance(outcome, Server):
                self.pids |= {(pid, started_at(pid)) for pid in (outcome.pid, *descendant_pids(outcome.pid))}
                self.started.append((key, outcome))

    def checkpoint_for(self, variant: str) -> Path:
        """The tiny checkpoint in `variant` ("FORMAT:VARIANT": of that format), built once."""
        folder = self.checkpoints / variant.replace(":", "-")
        if (folder / "config.json").exists():
            return folder
        return build_fixture(folder, variant.rpartition(":")[2], served_format(variant))

    def close(self) -> None:
        for process in self.processes.values():
            process.stop()
        left = sorted(pid for pid, started in self.pids if pid_alive(pid) and started_at(pid) == started)
        assert not left, f"server processes still alive after stopping: {left}"
