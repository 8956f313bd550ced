"""Start-ups of real servers that tests judge only by how they start and stop: a module's attempts all
start together the first time one of its tests asks, as many at a time as the available memory holds
(tests/server_pool.py's measure and start-up), and each test then judges its own outcome. One start-up leaves the
second core mostly idle: the four of tests/test_template_vs_vllm_033.py took 82 s one by one, 61 s together."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path

from conformance.audit.predictors.vllm_032 import StartupVerdict
from conformance.servers.launch import Server, descendant_pids, pid_alive
from conformance.servers.profile import Profile
from tests.server_pool import servers_that_fit, start_together


@dataclass(frozen=True)
class StartupOutcome:
    started: bool
    server_error: str | None  # the server's own error line, when it did not start
    tree: tuple[int, ...] = ()  # the server and its descendants while it was up
    left_alive: tuple[int, ...] = ()  # those still alive once it was stopped
    answer: object = None  # what `while_up` got from it, when it started (or the exception it raised)

    def asked(self) -> object:
        """What `while_up` got from the server; the exception it raised is raised here, in this key's test."""
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class StartupAttempts:
    """`attempts`: key -> (profile, model); `outcome(key)` starts them all on first use (each stopped
    again as `conformance.servers.launch.launch` stops it) and gives that key's outcome. `while_up`, if given,
    is asked of each server that started, before it is stopped (its answer is the outcome's)."""

    def __init__(self, attempts: Mapping[Hashable, tuple[Profile, Path]], log_dir: Path,
                 while_up: Callable[[Server], object] | None = None) -> None:
        self.attempts, self.log_dir, self.while_up = dict(attempts), log_dir, while_up
        self.outcomes: dict[Hashable, StartupOutcome] = {}
        self.attempted = False

    def outcome(self, key: Hashable) -> StartupOutcome:
        """Raises KeyError for a key whose wave was cut short by an error (that error failed a test before)."""
        if not self.attempted:
            self.attempted = True
            keys = list(self.attempts)
            wave = servers_that_fit(len(keys))
            for first in range(0, len(keys), wave):
                self._start_and_judge(keys[first:first + wave])
        return self.outcomes[key]

    def _ask(self, server: Server) -> object:
        """`while_up(server)`, or the exception it raised (one server's trouble fails its own test only)."""
        if self.while_up is None:
            return None
        try:
            return self.while_up(server)
        except Exception as error:
            return error

    def _start_and_judge(self, keys: list[Hashable]) -> None:
        processes, waited = start_together({key: self.attempts[key] for key in keys}, self.log_dir)
        try:
            for key, healthy in waited.items():
                if isinstance(healthy, Server):
                    tree = (healthy.pid, *descendant_pids(healthy.pid))
                    answer = self._ask(healthy)
                    processes[key].stop()
                    self.outcomes[key] = StartupOutcome(True, None, tree, tuple(pid for pid in tree if pid_alive(pid)),
                                                        answer)
                else:
                    self.outcomes[key] = StartupOutcome(False, healthy.server_error)
        finally:  # whatever went wrong, no server of the wave outlives it (stop is idempotent)
            for process in processes.values():
                process.stop()


def assert_started_as_predicted(outcome: StartupOutcome, predicted: StartupVerdict) -> None:
    """The server started (and stopped, engine included) or failed with the predicted message."""
    if predicted.starts:
        assert (outcome.started, outcome.server_error) == (True, None)
        assert len(outcome.tree) > 1  # the API server and its engine core ...
        assert outcome.left_alive == ()  # ... are all gone once it was stopped
    else:
        assert not outcome.started
        assert predicted.error and predicted.error in (outcome.server_error or ""), (predicted.error, outcome.server_error)
