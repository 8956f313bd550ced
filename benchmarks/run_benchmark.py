"""Wall time of the default case set against one server, and this tool's own CPU time as a share of it.

    .venv/bin/python benchmarks/run_benchmark.py [--profile hf] [--repeat 1] [--concurrency 8]
    .venv/bin/python benchmarks/run_benchmark.py --base-url URL --model NAME --profile hf

Without --base-url it builds the tiny checkpoint and launches real vLLM (start-up is not counted).
The tool's CPU time is this process's user + system time during the run (sending, recording,
judging, writing transcripts and results) plus rendering the reports; the server runs in other
processes and is not counted. Importing the libraries (openai, jsonschema, rich) is a fixed cost
paid once per process; it is measured and printed apart. Goal: under 5% of the wall time.

The tool's cost is per result (a few milliseconds: the openai client, and replaying every stream
through openai-python's accumulator); the wall time is the server's. So the share depends on how
fast the server answers: the script also prints the server latency per result above which the
share stays under the goal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

GOAL_SHARE = 0.05


@contextlib.contextmanager
def server_target(args: argparse.Namespace, work: Path) -> Iterator[tuple[object, tuple[str, ...]]]:
    from conformance.engine import markers_for_checkpoint
    from conformance.driver import Target

    if args.base_url:
        yield Target(base_url=args.base_url, model=args.model, profile=args.profile), markers_for_checkpoint(None)
        return
    from conformance.fixture import build_fixture
    from conformance.server import launch

    checkpoint = build_fixture(work / "checkpoint")
    with launch(args.profile, checkpoint, log_dir=work) as server:
        print(f"vLLM {server.version} ({args.profile}) healthy after {server.startup_seconds:.1f} s", file=sys.stderr)
        target = Target(base_url=server.base_url, model=server.model, profile=args.profile, version=server.version)
        yield target, markers_for_checkpoint(checkpoint)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="hf")
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    if args.base_url and not args.model:
        parser.error("--base-url needs --model")

    import_start = time.process_time()
    import jsonschema  # noqa: F401  (imported lazily by the checks; paid here, outside the timing)
    import openai.lib.streaming.chat  # noqa: F401
    import rich.progress  # noqa: F401

    from conformance.cases import load_suite
    from conformance.engine import run, write_reports
    from conformance.transcript import TRANSCRIPTS_FILE, read_transcripts

    import_cpu = time.process_time() - import_start

    cases = load_suite()
    with tempfile.TemporaryDirectory(prefix="conformance-bench-") as tmp, server_target(args, Path(tmp)) as (
        target,
        markers,
    ):
        out = Path(tmp) / "run"
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        output = run(cases, target, out, concurrency=args.concurrency, repeat=args.repeat, markers=markers)
        write_reports(out, output.results, output.stamp, read_transcripts(out / TRANSCRIPTS_FILE))
        wall, cpu = time.perf_counter() - wall_start, time.process_time() - cpu_start
    share = cpu / wall
    per_result = cpu / len(output.results)
    break_even = per_result * args.concurrency / GOAL_SHARE  # server seconds per request for share == goal
    measurements = {
        "profile": args.profile, "cases": len(cases), "results": len(output.results), "repeat": args.repeat,
        "concurrency": args.concurrency, "wall_seconds": round(wall, 3), "tool_cpu_seconds": round(cpu, 3),
        "tool_cpu_share": round(share, 4), "goal_share": GOAL_SHARE, "import_cpu_seconds": round(import_cpu, 3),
        "tool_cpu_ms_per_result": round(per_result * 1000, 2), "break_even_latency_seconds": round(break_even, 3),
        "summary": output.summary.line(),
    }  # fmt: skip
    print(f"{len(cases)} cases, {len(output.results)} results ({output.summary.line()})")
    print(f"wall time: {wall:.2f} s; tool CPU time: {cpu:.2f} s = {share:.1%} of wall (goal < {GOAL_SHARE:.0%})")
    print(f"tool CPU per result: {per_result * 1000:.1f} ms; imports (once per process): {import_cpu:.2f} s CPU")
    print(f"the share stays under {GOAL_SHARE:.0%} when the server takes more than {break_even:.2f} s per request "
          f"at concurrency {args.concurrency}")
    if args.json:
        args.json.write_text(json.dumps(measurements, indent=2) + "\n")
    return 0 if share < GOAL_SHARE else 1


if __name__ == "__main__":
    raise SystemExit(main())
