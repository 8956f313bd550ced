"""Every shipped format's gate from nothing, timed: its tiny checkpoint, both real vLLM servers (legacy with the
format's own parsers, hf), every case, the reports.

    .venv/bin/python benchmarks/formats_benchmark.py [--format NAME ...] [--together N]

Runs `conformance gate --format NAME` for each format with expectations shipped for it (default: all of
them) in a fresh directory, N gates at once (default 1: one format at a time; each gate starts its own two
servers together, so N gates start 2N servers in one wave: as many as the machine's memory holds, about
2.5 GB each). Prints one JSON line per format, measured in this run: the gate's wall time, each server's
start-up to healthy, the slower start-up, and the ratio wall / slower start-up; then one line for all of
them. Goals on 2 cores: each format's gate at most 1.4 times its slower server's start-up; all formats
together within 12 minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conformance.compare.expectations import SHIPPED_FORMAT_PAIRS

RATIO_GOAL = 1.4
ALL_FORMATS_GOAL_SECONDS = 12 * 60.0
GATED_FORMATS = sorted({form for form, baseline, candidate in SHIPPED_FORMAT_PAIRS if (baseline, candidate) == ("legacy", "hf")})


def one_gate(form: str, scratch: Path) -> dict[str, object]:
    started = time.monotonic()
    completed = subprocess.run([sys.executable, "-m", "conformance", "gate", "--format", form,
                                "--out", str(scratch / form)], cwd=scratch, capture_output=True, text=True)
    wall = time.monotonic() - started
    if completed.returncode != 0:
        raise SystemExit(f"the {form} gate exited {completed.returncode}:\n{completed.stderr[-2000:]}")
    gate = json.loads((scratch / form / "gate.json").read_text())
    startups = {side: info["startup_seconds"] for side, info in gate["sides"].items()}
    slower = max(startups.values())
    return {"format": form, "wall_seconds": round(wall, 1), "startup_seconds": startups,
            "slower_startup_seconds": slower, "ratio_to_slower_startup": round(wall / slower, 2),
            "results_per_side": gate["sides"]["candidate"]["summary"]["total"],
            "acknowledged": gate["verdict"]["acknowledged"],
            "goals": {f"ratio <= {RATIO_GOAL}": wall / slower <= RATIO_GOAL}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", action="append", choices=GATED_FORMATS, help="only this format (repeatable)")
    parser.add_argument("--together", type=int, default=1, metavar="N", help="gates run at once (default: 1)")
    args = parser.parse_args()
    forms = args.format or GATED_FORMATS
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(max(1, args.together)) as pool:
        for line in pool.map(lambda form: one_gate(form, Path(scratch)), forms):
            print(json.dumps(line), flush=True)
    total = time.monotonic() - started
    print(json.dumps({"formats": forms, "together": args.together, "wall_seconds": round(total, 1),
                      "goals": {f"all <= {ALL_FORMATS_GOAL_SECONDS:g} s": total <= ALL_FORMATS_GOAL_SECONDS}}))


if __name__ == "__main__":
    main()
