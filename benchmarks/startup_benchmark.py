"""Measure how long real vLLM takes to become healthy per profile, one at a time and both at once.

    .venv/bin/python benchmarks/startup_benchmark.py [--model DIR] [--profiles hf legacy] [--repeat N]

Prints one JSON line per measurement: {"mode", "profile", "seconds"}. Without --model it builds the
tiny `full` fixture in a temporary directory. The project's goal: both profiles healthy within 90 s
on 2 cores when started together (the way tests/conftest.py starts them).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.launch import start
from conformance.servers.profiles import PROFILES


def measure(profiles: list[str], model: Path, log_dir: Path) -> dict[str, float]:
    """Start `profiles` together; seconds until each is healthy."""
    processes = {name: start(name, model, log_dir=log_dir) for name in profiles}  # main thread: see start()
    try:
        with ThreadPoolExecutor(len(processes)) as pool:  # wait for all at once, so each time is its own
            servers = pool.map(lambda process: process.wait_until_healthy(), processes.values())
            return {server.profile.name: server.startup_seconds for server in servers}
    finally:
        for process in processes.values():
            process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="checkpoint directory (default: the tiny fixture)")
    parser.add_argument("--profiles", nargs="+", choices=sorted(PROFILES), default=["hf", "legacy"])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or build_fixture(Path(scratch) / "full")
        for _ in range(args.repeat):
            for name in args.profiles:
                for profile, seconds in measure([name], model, Path(scratch)).items():
                    print(json.dumps({"mode": "alone", "profile": profile, "seconds": round(seconds, 1)}), flush=True)
            for profile, seconds in measure(args.profiles, model, Path(scratch)).items():
                print(json.dumps({"mode": "together", "profile": profile, "seconds": round(seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
