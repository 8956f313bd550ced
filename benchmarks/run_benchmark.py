"""Wall time of the default case set against one server, and this tool's own CPU time as a share of it.

    .venv/bin/python benchmarks/run_benchmark.py [--profile hf] [--runs 11] [--concurrency 8]
    .venv/bin/python benchmarks/run_benchmark.py --base-url URL --model NAME --profile hf

Without --base-url it builds the tiny checkpoint and launches real vLLM (start-up is not counted).

The tool's CPU time is this process's user + system time during a run (sending, recording,
verifying forced outputs, judging, replaying every stream through openai-python's accumulator,
writing transcripts and results) plus rendering the reports; the server runs in other processes
and is not counted. Costs paid once per process are printed apart: importing the libraries, and
the first run's extra (openai-python builds its Responses models lazily, on first use, about
0.3-0.8 s of CPU). The default set runs `--runs` times in one process; the first run is the cold
one, the share is taken from the others. The three measurements of a run take turns going first
(tool, bare client, sending; then bare client, sending, tool; ...), so none of them is always the
one measured right after another's load; the medians come from the warm runs, and the spread of the
per-run ratios is printed beside them: on two cores next to a busy vLLM the same requests cost from
0.35 s to 0.75 s of CPU from one run to the next, so a verdict needs several runs (ten warm ones by
default). Even so the medians move between benchmarks of the same code: four of them on 2026-12-06
gave 0.81-0.85 against the bare client and 1.14-1.36 against the sending alone.

For scale, the same model requests are also sent twice more: by a bare `AsyncOpenAI` client that
does what any application does and nothing more (`create(...)`, iterate the stream, drop it),
the CPU any client built on openai-python spends against this server; and by the tool's own driver
alone (the openai client's request path, raw stream kept in memory; no verifying, judging or
writing), the least any run that uses the openai client can cost. The tool's own addition is its
CPU time minus the bare client's.

Goals: the tool, with every check, the recording and the SDK replay, costs no more CPU than the bare
client (ratio at most 1.0) and at most 1.5 times its own sending; the exit status is 1 when either
is missed. The tiny checkpoint answers in milliseconds, so the wall time is short and per-request
client costs dominate: the share of the wall time is printed with the server time per request
above which it stays under 5%.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

GOAL_SHARE = 0.05  # of the wall time (printed; depends on how fast the server answers)
GOAL_VS_BARE_CLIENT = 1.0  # tool CPU / bare openai client CPU, at most
GOAL_VS_SENDING = 1.5  # tool CPU / the tool's sending alone, at most


@contextlib.contextmanager
def server_target(args: argparse.Namespace, work: Path) -> Iterator[tuple[Any, tuple[str, ...]]]:
    from conformance.formats.markers import markers_for_checkpoint
    from conformance.run.driver import Target

    if args.base_url:
        yield Target(base_url=args.base_url, model=args.model, profile=args.profile), markers_for_checkpoint(None)
        return
    from conformance.formats.tiny_checkpoint import build_fixture
    from conformance.servers.launch import launch

    checkpoint = build_fixture(work / "checkpoint")
    with launch(args.profile, checkpoint, log_dir=work) as server:
        print(f"vLLM {server.version} ({args.profile}) healthy after {server.startup_seconds:.1f} s", file=sys.stderr)
        target = Target(base_url=server.base_url, model=server.model, profile=args.profile, version=server.version)
        yield target, markers_for_checkpoint(checkpoint)


def measure(work: Any) -> tuple[Any, float, float]:
    """(work's result, wall seconds, this process's CPU seconds). The heap is collected first, outside
    the timing, so that every measurement starts from the same collector state (none inherits the
    garbage of the one before it)."""
    gc.collect()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    result = work()
    return result, time.perf_counter() - wall_start, time.process_time() - cpu_start


def tool_run(cases: Sequence[Any], target: Any, markers: Sequence[str], out: Path, concurrency: int) -> Any:
    from conformance.report.run.write import write_reports
    from conformance.run.engine import run

    output = run(cases, target, out, concurrency=concurrency, markers=markers)
    write_reports(out, output.results, output.stamp, output.transcripts)
    return output


def model_requests(cases: Sequence[Any], model: str) -> list[tuple[Any, str, dict[str, Any] | None, dict[str, Any]]]:
    """(case, mode, forcing fields, body) of every model request of the set (preflights aside)."""
    from conformance.run.driver import request_body
    from conformance.run.engine import case_modes
    from conformance.servers.forcing import forcing_extra_body

    jobs = []
    for case in cases:
        forcing = forcing_extra_body(case.force) if case.force is not None else None
        for mode in case_modes(case):
            if case.endpoint != "preflight":
                jobs.append((case, mode, forcing, request_body(case, mode, model, forcing)))
    return jobs


async def bare_client_run(cases: Sequence[Any], target: Any, concurrency: int) -> int:
    """Every model request of the set, sent the way an application would (`create()`, iterate the
    parsed stream), with nothing recorded or judged; an error ends that request, as an application's
    `except` would."""
    import httpx2
    import openai

    from conformance.run.driver import make_clients

    semaphore = asyncio.Semaphore(concurrency)

    async def one(clients: Any, case: Any, body: dict[str, Any]) -> None:
        first = "input" if case.endpoint == "responses" else "messages"
        rest = {key: value for key, value in body.items() if key not in ("model", "stream", first)}
        resource = clients.api.responses if case.endpoint == "responses" else clients.api.chat.completions
        async with semaphore:
            with contextlib.suppress(openai.APIError, httpx2.HTTPError):
                answer = await resource.create(model=body["model"], stream=body["stream"], extra_body=rest,
                                               **{first: body[first]})
                if body["stream"]:
                    async for _ in answer:
                        pass

    jobs = model_requests(cases, target.model)
    async with make_clients(target) as clients:
        await asyncio.gather(*(one(clients, case, body) for case, _, _, body in jobs))
    return len(jobs)


async def sending_alone_run(cases: Sequence[Any], target: Any, concurrency: int) -> int:
    """Every model request of the set sent by the tool's own driver (the openai client's request
    path, the raw stream read and kept in memory) and nothing else: no verifying, judging or writing."""
    from conformance.run.driver import make_clients, send

    semaphore = asyncio.Semaphore(concurrency)

    async def one(clients: Any, case: Any, mode: str, forcing: dict[str, Any] | None) -> None:
        async with semaphore:
            await send(clients, target, case, mode, forcing=forcing)

    jobs = model_requests(cases, target.model)
    async with make_clients(target) as clients:
        await asyncio.gather(*(one(clients, case, mode, forcing) for case, mode, forcing, _ in jobs))
    return len(jobs)


def taking_turns(names: Sequence[str], number: int) -> tuple[str, ...]:
    """The order of the measurements in run `number`: each goes first in turn."""
    shift = number % len(names)
    return (*names[shift:], *names[:shift])


def spread(values: Sequence[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="hf")
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--runs", type=int, default=11, help="runs of the default set in one process (>= 2)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    if args.base_url and not args.model:
        parser.error("--base-url needs --model")
    if args.runs < 2:
        parser.error("--runs must be at least 2 (the first run is the cold one)")

    import_start = time.process_time()
    import jsonschema  # noqa: F401  (imported lazily by the checks; paid here, outside the timing)
    import openai.lib.streaming.chat  # noqa: F401
    import rich.progress  # noqa: F401

    from conformance.suite.cases import load_suite

    import_cpu = time.process_time() - import_start

    cases = load_suite()
    runs, floors, sending = [], [], []
    with tempfile.TemporaryDirectory(prefix="conformance-bench-") as tmp, server_target(args, Path(tmp)) as (
        target,
        markers,
    ):
        for number in range(args.runs):
            measured: dict[str, tuple[Any, float, float]] = {}
            plan = {
                "tool": lambda: tool_run(cases, target, markers, Path(tmp) / f"run{number}", args.concurrency),
                "bare": lambda: asyncio.run(bare_client_run(cases, target, args.concurrency)),
                "sending": lambda: asyncio.run(sending_alone_run(cases, target, args.concurrency)),
            }
            order = taking_turns(tuple(plan), number)
            for name in order:
                measured[name] = measure(plan[name])
            (output, wall, cpu), (requests, floor_wall, floor_cpu), (_, send_wall, send_cpu) = (
                measured["tool"], measured["bare"], measured["sending"])
            runs.append((output, wall, cpu))
            floors.append((floor_wall, floor_cpu))
            sending.append(send_cpu)
            print(f"run {number + 1} ({', '.join(order)}): {len(output.results)} results in {wall:.2f} s, "
                  f"tool CPU {cpu:.2f} s ({cpu / wall:.1%}); bare client: {requests} requests in {floor_wall:.2f} s, "
                  f"CPU {floor_cpu:.2f} s; "
                  f"sending alone: {send_wall:.2f} s, CPU {send_cpu:.2f} s", file=sys.stderr)

    warm = runs[1:]
    wall = statistics.median(w for _, w, _ in warm)
    cpu = statistics.median(c for _, _, c in warm)
    floor_cpu = statistics.median(c for _, c in floors[1:])
    send_cpu = statistics.median(sending[1:])
    first_run_extra = runs[0][2] - cpu
    # the per-run ratios, for their spread (the verdict is on the medians' ratios); rounded once, printed
    # and recorded alike
    per_run_vs_bare = [round(c / f, 3) for (_, _, c), (_, f) in zip(warm, floors[1:])]
    per_run_vs_sending = [round(c / s, 3) for (_, _, c), s in zip(warm, sending[1:])]
    results = len(runs[-1][0].results)
    share, floor_share = cpu / wall, floor_cpu / wall
    added_share = (cpu - floor_cpu) / wall
    per_result = cpu / results
    vs_bare, vs_sending = round(cpu / floor_cpu, 3), round(cpu / send_cpu, 3)  # printed and recorded alike
    # Both goals in one figure: the tool's own work beyond its sending, and what they leave for it.
    # (rounded once, printed and recorded alike: rounding the recorded value again could print another digit)
    own = round(cpu - send_cpu, 3)
    allowed = round(min(floor_cpu * GOAL_VS_BARE_CLIENT, send_cpu * GOAL_VS_SENDING) - send_cpu, 3)
    break_even = per_result * args.concurrency / GOAL_SHARE  # server seconds per request for share == goal
    measurements = {
        "profile": args.profile, "cases": len(cases), "results": results, "runs": args.runs,
        "concurrency": args.concurrency, "wall_seconds": round(wall, 3), "tool_cpu_seconds": round(cpu, 3),
        "tool_cpu_share": round(share, 4), "goal_share": GOAL_SHARE,
        "bare_client_cpu_seconds": round(floor_cpu, 3), "bare_client_cpu_share": round(floor_share, 4),
        "tool_added_cpu_share": round(added_share, 4), "sending_alone_cpu_seconds": round(send_cpu, 3),
        "sending_alone_cpu_share": round(send_cpu / wall, 4), "import_cpu_seconds": round(import_cpu, 3),
        "tool_vs_bare_client": vs_bare, "goal_vs_bare_client": GOAL_VS_BARE_CLIENT,
        "tool_vs_sending_alone": vs_sending, "goal_vs_sending_alone": GOAL_VS_SENDING,
        "per_run_tool_vs_bare_client": per_run_vs_bare, "per_run_tool_vs_sending_alone": per_run_vs_sending,
        "tool_own_cpu_seconds": own, "goals_allow_own_cpu_seconds": allowed,
        "first_run_extra_cpu_seconds": round(first_run_extra, 3),
        "tool_cpu_ms_per_result": round(per_result * 1000, 2), "break_even_latency_seconds": round(break_even, 3),
        "summary": runs[-1][0].summary.line(),
    }  # fmt: skip
    print(f"{len(cases)} cases, {results} results ({runs[-1][0].summary.line()}); medians of runs 2-{args.runs}:")
    print(f"wall time: {wall:.2f} s; tool CPU time: {cpu:.2f} s = {share:.1%} of wall (goal < {GOAL_SHARE:.0%})")
    print(f"a bare openai client sending the same requests: {floor_cpu:.2f} s CPU = {floor_share:.1%} of that wall; "
          f"the tool adds {cpu - floor_cpu:.2f} s = {added_share:.1%}")
    print(f"the tool's driver sending the requests and nothing else: {send_cpu:.2f} s CPU = {send_cpu / wall:.1%}")
    print(f"tool CPU / bare client CPU: {vs_bare:.2f} (goal <= {GOAL_VS_BARE_CLIENT}); "
          f"tool CPU / its sending alone: {vs_sending:.2f} (goal <= {GOAL_VS_SENDING})")
    print(f"run by run (the noise the medians take out): tool / bare client {spread(per_run_vs_bare)}, "
          f"tool / sending alone {spread(per_run_vs_sending)}")
    print(f"the tool's own work beyond its sending: {own:.2f} s of CPU; the goals leave it {allowed:.2f} s "
          f"(the bare client's CPU or {GOAL_VS_SENDING} x the sending, whichever is less, minus the sending)")
    print(f"tool CPU per result: {per_result * 1000:.1f} ms; once per process: imports {import_cpu:.2f} s, "
          f"first run's extra {first_run_extra:.2f} s")
    print(f"the share stays under {GOAL_SHARE:.0%} when the server takes more than {break_even:.2f} s per request "
          f"at concurrency {args.concurrency}")
    if args.json:
        args.json.write_text(json.dumps(measurements, indent=2) + "\n")
    return 0 if vs_bare <= GOAL_VS_BARE_CLIENT and vs_sending <= GOAL_VS_SENDING else 1


if __name__ == "__main__":
    raise SystemExit(main())
