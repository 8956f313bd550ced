"""The gate demo from nothing, timed: fixture, two real vLLM servers, every case on both, the reports.

    .venv/bin/python benchmarks/gate_benchmark.py [--repeat N] [--granularities LIST ...] [--second-turn LIST ...]

Runs `conformance gate` (as the README's main command, once per `--granularities` setting: by default the
gate's own `3,whole`, then `all` and `none`, to show what the granular streams cost; and per `--second-turn`
setting: by default the gate's own `all`) in a fresh directory
and prints, per run, one JSON line: the gate's wall time, each server's start-up to healthy (both start together,
so the slower one bounds the wait), what the gate spent beyond the slower start-up (cases, diff,
reports), and the ratio wall / slower start-up. Goals on 2 cores: wall at most 90 s, and at most 1.4
times the slower server's start-up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WALL_GOAL_SECONDS = 90.0
RATIO_GOAL = 1.4


def one_gate(scratch: Path, granularities: str, second_turn: str) -> dict[str, object]:
    started = time.monotonic()
    completed = subprocess.run([sys.executable, "-m", "conformance", "gate", "--out", str(scratch / "gate"),
                                "--granularities", granularities, "--second-turn", second_turn],
                               cwd=scratch, capture_output=True, text=True)
    wall = time.monotonic() - started
    if completed.returncode != 0:
        raise SystemExit(f"the gate exited {completed.returncode}:\n{completed.stderr[-2000:]}")
    gate = json.loads((scratch / "gate" / "gate.json").read_text())
    startups = {side: info["startup_seconds"] for side, info in gate["sides"].items()}
    slower = max(startups.values())
    return {"granularities": granularities, "second_turn": second_turn, "wall_seconds": round(wall, 1), "startup_seconds": startups, "beyond_startup_seconds": round(wall - slower, 1),
            "ratio_to_slower_startup": round(wall / slower, 2), "results_per_side": gate["sides"]["candidate"]["summary"]["total"],
            "differences": len(gate["differences"]),
            "goals": {f"wall <= {WALL_GOAL_SECONDS:g} s": wall <= WALL_GOAL_SECONDS,
                      f"ratio <= {RATIO_GOAL}": wall / slower <= RATIO_GOAL}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--granularities", action="append", metavar="LIST",
                        help="a gate's --granularities (repeatable; default: 3,whole then all then none)")
    parser.add_argument("--second-turn", action="append", metavar="LIST",
                        help="a gate's --second-turn (repeatable; default: all)")
    args = parser.parse_args()
    for _ in range(args.repeat):
        for granularities in args.granularities or ["3,whole", "all", "none"]:
            for second_turn in args.second_turn or ["all"]:
                with tempfile.TemporaryDirectory() as scratch:
                    print(json.dumps(one_gate(Path(scratch), granularities, second_turn)), flush=True)


if __name__ == "__main__":
    main()
