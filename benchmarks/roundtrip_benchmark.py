"""Benchmark: round-trip examples per second on the tiny checkpoint's templates, on one core.

    .venv/bin/python benchmarks/roundtrip_benchmark.py [--examples 1000] [--seed 0] [--variant full|corrected]

Runs the round trip in this process (what the audit's worker runs) and prints examples per second of
CPU time, for its search (generation, rendering, the whole parse and a chunked parse of each example;
the time spent shrinking included, its calls not counted as examples). `full` is the tiny checkpoint as
shipped (its two counterexamples get shrunk, so its rate reads lower);
`corrected` is the same pair with both bugs fixed, so every example is a passing one. Goal: >= 200/s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from roundtrip_helpers import corrected_subject, tiny_subject  # noqa: E402

from conformance.audit.roundtrip.roundtrip import run_roundtrip  # noqa: E402

GOAL_PER_SECOND = 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", choices=("full", "corrected"), default="corrected")
    args = parser.parse_args()
    subject = corrected_subject() if args.variant == "corrected" else tiny_subject()
    run_roundtrip(subject, 20, args.seed + 1)  # imports and first compilations out of the measure
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    result = run_roundtrip(subject, args.examples, args.seed)
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started_wall
    rate = result.examples / cpu
    print(f"round trip ({args.variant}, seed {args.seed}): {result.examples} examples in {cpu:.2f} s CPU "
          f"({wall:.2f} s wall): {rate:.0f} examples/s (goal >= {GOAL_PER_SECOND}); "
          f"counterexamples: {', '.join(result.failures) or 'none'}")
    return 0 if rate >= GOAL_PER_SECOND else 1


if __name__ == "__main__":
    sys.exit(main())
