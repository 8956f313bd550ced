"""The test session's server pool (tests/server_pool.py): a first wave limited to what memory holds, in
order of first use, and each server stopped after its last test (no real server: stand-in processes)."""

from __future__ import annotations

from pathlib import Path

from tests.server_pool import SERVER_MEMORY_BYTES, ServerPool, available_memory

HF, LEGACY, CLOSER = ("hf", "full"), ("legacy", "full"), ("hf", "closer-ends-with-anchor")


class StandInProcess:
    def __init__(self) -> None:
        self.stops = 0

    def stop(self) -> None:
        self.stops += 1


def pool_of(capacity: int) -> ServerPool:
    return ServerPool(Path("/nonexistent"), Path("/nonexistent"), {HF, LEGACY, CLOSER},
                      first_use={HF: 0, LEGACY: 3, CLOSER: 8}, last_use={HF: 9, LEGACY: 5, CLOSER: 9},
                      capacity=capacity)


def test_the_first_wave_takes_the_asked_server_then_others_by_first_use_up_to_the_capacity() -> None:
    assert pool_of(2)._next_wave(HF) == [HF, LEGACY]
    assert pool_of(3)._next_wave(LEGACY) == [LEGACY, HF, CLOSER]
    assert pool_of(1)._next_wave(CLOSER) == [CLOSER]


def test_each_server_stops_after_its_last_test_and_makes_room_for_the_next_wave() -> None:
    pool = pool_of(2)
    pool.processes = {HF: StandInProcess(), LEGACY: StandInProcess()}
    pool.outcomes = {HF: object(), LEGACY: object()}
    pool.stop_unused_after(4)
    assert [pool.processes[key].stops for key in (HF, LEGACY)] == [0, 0]
    pool.stop_unused_after(5)
    pool.stop_unused_after(6)  # stopped once, not again
    assert [pool.processes[key].stops for key in (HF, LEGACY)] == [0, 1] and pool.stopped == {LEGACY}
    assert pool._next_wave(CLOSER) == [CLOSER]  # HF still runs: one place left of two


def test_the_capacity_follows_the_available_memory() -> None:
    memory = available_memory()
    assert memory > 0  # Linux: /proc/meminfo
    assert ServerPool(Path("."), Path("."), {HF}, {}, {}).capacity == max(1, memory // SERVER_MEMORY_BYTES)
