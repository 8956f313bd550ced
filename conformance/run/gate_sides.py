"""A live gate: both sides' servers (launched together, or attached by URL), the same cases sent to both
at once, each side recorded as an ordinary run directory, plus a CORS preflight from a browser origin.

`GateSide` says where one side is: a profile launched on a checkpoint (the tiny one by default), or
a URL with the model name and the profile whose expectations apply. `targets_for` starts what
needs starting (every server at once: vLLM's start-up dominates) and stops every server it started,
also on Ctrl-C; a launched server that exits at start-up with its own refusal is `SideRefused` (the
stamps of every side known by then with it), any other failed start a `GateSetupError`.
`run_gate_sides` runs both case sets concurrently through the one engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.formats.markers import markers_for_checkpoint
from conformance.formats.registry import DEFAULT_FORMAT, format_named
from conformance.record.case_model import PREFLIGHT_MODES, Case
from conformance.record.run_dir import Recording
from conformance.record.stamp import make_stamp
from conformance.record.transcript import ServerStamp
from conformance.run.driver import Target, make_clients, send, target_of
from conformance.run.engine import RunOutput, request_count, run_async
from conformance.run.second_turn import TurnRebuilder
from conformance.servers.launch import ServerStartError, start
from conformance.servers.profiles import served_profile
from conformance.util.progress import Progress

DEFAULT_ORIGIN = "http://localhost:3000"


@dataclass(frozen=True)
class GateSide:
    name: str  # "baseline" | "candidate"
    profile: str  # whose expectations apply (and, when launched, which server flags)
    base_url: str | None = None  # attach to this server instead of launching one
    model: str | None = None  # the served model name (attached servers)
    checkpoint: Path | str | None = None  # what a launched side serves: a directory or a Hub repo id
    checkpoint_revision: str | None = None  # stamped on a launched side's run
    fixture_variant: str | None = None  # the tiny checkpoint's variant it serves (None: its profile record's)
    format: str = DEFAULT_FORMAT.name  # the response format its checkpoint writes (launched: its own parsers)
    api_key: str | None = field(default=None, repr=False)  # this side's own key (None: the gate's)
    extra_args: tuple[str, ...] = ()  # a launched side's extra server arguments, after its profile's own
    launch_flags: tuple[str, ...] | None = None  # a launched side's profile flags as chosen for its checkpoint (None: the record's)
    launch_note: str | None = None  # why they were chosen so (stamped on its run)


@dataclass
class SideRun:
    side: GateSide
    target: Target
    markers: tuple[str, ...]
    startup_seconds: float | None = None  # None: attached, not launched
    output: RunOutput | None = None


@contextlib.contextmanager
def targets_for(sides: Sequence[GateSide], out_dir: Path, *, api_key: str, timeout: float,
                forcing: dict[str, Any], meanwhile: Callable[[], None] | None = None
                ) -> Iterator[tuple[list[SideRun], Callable[[], None]]]:
    """(a Target per side, `release`); launched servers all start at once. `release()` starts stopping
    them all in the background (the caller writes its reports meanwhile); leaving waits until every
    one is stopped, released or not. `meanwhile` runs while the servers boot (say, imports for later)."""
    launched: dict[str, Any] = {}
    by_name = {side.name: side for side in sides}
    for side in sides:
        if side.base_url is not None:
            continue
        try:
            launched[side.name] = start(served_profile(side.profile, format_named(side.format), side.launch_flags),
                                        side.checkpoint, extra_args=side.extra_args, log_dir=out_dir / side.name)
        except BaseException as exc:  # a later side's set-up failed: the servers already started go too
            for process in launched.values():
                process.stop()
            if isinstance(exc, ServerStartError):
                raise GateSetupError(f"could not start the {side.name} server: {exc}") from exc
            raise
    stopper = ThreadPoolExecutor(max(1, len(launched)))  # all at once: each waits for its engine to shut down
    stops: list[Any] = []

    def release() -> None:
        if not stops:
            stops.extend(stopper.submit(process.stop) for process in launched.values())

    try:
        with ThreadPoolExecutor(max(1, len(launched))) as pool:
            waits = {name: pool.submit(process.wait_until_healthy) for name, process in launched.items()}
            try:
                if meanwhile is not None and launched:
                    meanwhile()
                servers = {}
                for name, wait in waits.items():
                    try:
                        servers[name] = wait.result()
                    except ServerStartError as exc:
                        if exc.refusal is None:
                            raise GateSetupError(f"could not start the {name} server: {exc}") from exc
                        options = {"api_key": api_key, "timeout": timeout, **forcing}
                        stamps = {side.name: make_stamp(_target(side, servers.get(side.name), options).stamp().__dict__,
                                                        completion=f"not run: the {name} server refused to start")
                                  for side in sides if side.name in servers or side.base_url is not None}
                        raise SideRefused(name, launched[name], exc, stamps, by_name[name]) from exc
                    print(f"{name}: {servers[name].profile.server_name} {servers[name].version} "
                          f"({servers[name].profile.name}) healthy after "
                          f"{servers[name].startup_seconds:.1f} s", file=sys.stderr)
            except BaseException:  # Ctrl-C or a failed start: a start still waiting sees its server stop now,
                release()  # not after its start timeout
                raise
        runs = []
        for side in sides:
            server = servers.get(side.name)
            target = _target(side, server, {"api_key": api_key, "timeout": timeout, **forcing})
            local = server is not None and side.checkpoint is not None and Path(side.checkpoint).is_dir()  # else a repo id
            markers = markers_for_checkpoint(Path(side.checkpoint) if local else None, format_named(side.format))
            runs.append(SideRun(side, target, markers, round(server.startup_seconds, 1) if server else None))
        yield runs, release
    finally:
        release()
        for stopping in stops:
            stopping.result()
        stopper.shutdown()


def _target(side: GateSide, server: Any, options: dict[str, Any]) -> Target:
    """The Target of a side: its launched `server`, else its URL; `options` are the gate's (API key, timeout,
    forcing), the side's own key first."""
    options = {**options, "api_key": side.api_key or options["api_key"], "fixture_variant": side.fixture_variant,
               "format": side.format}
    if server is None:
        return Target(side.base_url, side.model, side.profile, **options)
    return target_of(server, side.profile, checkpoint_revision=side.checkpoint_revision,
                     launch_note=side.launch_note, **options)


class GateSetupError(Exception):
    """A side's server could not be started or reached."""


class SideRefused(GateSetupError):
    """A launched side's server exited at start-up with its own refusal (`refusal`, its error line): the verdict
    on that side, not a fault of the machine. `stamps` holds the stamp of that side and of every side known to
    be up when it refused (a side attached by URL, a server already healthy)."""

    def __init__(self, name: str, process: Any, error: ServerStartError, stamps: dict[str, dict[str, Any]],
                 side: GateSide) -> None:
        super().__init__(f"the {name} server refuses to start: {error}")
        self.side = name
        self.profile = side.profile
        self.server_name = process.profile.server_name
        self.refusal = str(error.refusal)
        self.log_path = error.log_path
        refused = ServerStamp(process.root_url + "/v1", str(side.checkpoint), side.profile, args=tuple(process.command[1:]),
                              checkpoint_revision=side.checkpoint_revision, format=side.format,
                              launch_note=side.launch_note)
        self.stamps = {**stamps, name: make_stamp(refused.__dict__, completion="refused to start")}


async def _run_both(runs: Sequence[SideRun], cases: Sequence[Case], out_dir: Path, concurrency: int,
                    origin: str, granularities: Sequence[str], rebuilders: Mapping[str, TurnRebuilder]) -> dict[str, Any]:
    with Progress(request_count(cases, 1, granularities, rebuilders) * len(runs), "gate") as bar:  # both sides
        outputs = await asyncio.gather(*(
            run_async(cases, run.target, out_dir / run.side.name, concurrency=concurrency, markers=run.markers,
                      progress=bar, granularities=granularities, rebuilders=rebuilders)
            for run in runs
        ))  # fmt: skip
    for run, output in zip(runs, outputs):
        run.output = output
    preflights = await asyncio.gather(*(send_preflight(run.target, origin) for run in runs))
    return {"origin": origin, "path": "/v1/chat/completions",
            **{run.side.name: preflight for run, preflight in zip(runs, preflights)}}


def run_gate_sides(runs: Sequence[SideRun], cases: Sequence[Case], out_dir: Path, *, concurrency: int,
                   origin: str, granularities: Sequence[str] = (), rebuilders: Mapping[str, TurnRebuilder] | None = None,
                   ) -> tuple[list[Recording], dict[str, Any]]:
    """Run the cases on every side at once, each forced stream also at `granularities`, each second turn as
    `rebuilders` send it; (recordings, CORS section)."""
    cors = asyncio.run(_run_both(runs, cases, out_dir, concurrency, origin, granularities, rebuilders or {}))
    recordings = []
    for run in runs:
        assert run.output is not None
        recordings.append(Recording(run.side.profile, run.output.transcripts, run.output.results, run.output.stamp,
                                    run.side.name, run.startup_seconds))
    return recordings, cors


def preflight_case(origin: str) -> Case:
    """The CORS preflight a browser app at `origin` sends before a streaming chat call."""
    return Case(id="gate-cors-preflight", description=f"CORS preflight from {origin}", features=("cors",),
                references=(), modes=PREFLIGHT_MODES, endpoint="preflight",
                request={"origin": origin, "method": "POST", "headers": ["authorization", "content-type"]},
                force=None, expect={}, natural=None, source=Path("<gate>"), index=0, line=0)


async def send_preflight(target: Target, origin: str) -> dict[str, Any]:
    """Status, the CORS headers and the body a browser at `origin` gets from `target`."""
    async with make_clients(target) as clients:
        transcript = await send(clients, target, preflight_case(origin), "non-stream", forcing=None)
    if transcript.transport_error or transcript.response is None:
        return {"status": None, "headers": {}, "body": transcript.transport_error or "no answer"}
    headers = transcript.response.get("headers") or {}
    return {"status": transcript.status,
            "headers": {name: headers.get(name) for name in ("access-control-allow-origin",
                                                             "access-control-allow-methods",
                                                             "access-control-allow-headers", "vary")},
            "body": str(transcript.response.get("body") or "")[:300]}
