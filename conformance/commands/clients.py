"""`conformance clients RUN_DIR`: a recorded run's answers through real clients, offline."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.commands import add_json_argument, add_verb, json_output
from conformance.util import exit_codes

if TYPE_CHECKING:
    from conformance.clients.record import ClientFinding, IdiomFinding

DESCRIPTION = """\
Serve every recorded answer of a run (or of both sides of a gate) as the server sent it from a loopback
replay server to real clients, and record what each rebuilds: openai-python (chat.completions.create
with and without stream, the chat.completions.stream() helper), LangChain ChatOpenAI (invoke, stream
added up), LiteLLM (completion with and without stream, stream_chunk_builder) and the Vercel AI SDK
(generateText, streamText; Node, the pinned project in clients/node). No server is needed.

The client idioms for tools (LangChain bind_tools / with_structured_output, openai-python
pydantic_function_tool / parallel_tool_calls=False, LiteLLM's and the AI SDK's tool choices) are fed
the recorded answer of their case (cases/client_idioms.yaml): what each hands its caller is kept too.

Writes clients.jsonl next to each transcripts.jsonl (or under --out) and clients.md (the matrix of
client calls x profiles, every case where a client loses, changes or rejects something, and what
each idiom's caller gets).
Exit 0 when every client call ran; 2 when a client could not run (not installed, or its Node batch
timed out or died: the calls it did not finish are not_run, stderr says why, the other clients'
findings are written), nothing was replayed, or the recording cannot be read. A command in which no
client call ran writes nothing over an earlier report. Findings never fail the command: they are what
it reports.

examples:
  conformance clients reports/run-20261201-101500
  conformance clients reports/gate-20261201-120200 --client openai-python --client ai-sdk
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from conformance.clients.jobs import APIS

    parser = add_verb(subparsers, "clients", "replay a recorded run through real client libraries (offline)",
                      DESCRIPTION)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="a run directory (transcripts.jsonl), a gate directory (baseline/, candidate/) or a transcripts file")
    parser.add_argument("--client", action="append", choices=list(APIS), metavar="NAME",
                        help=f"only this client (repeatable; default all: {', '.join(APIS)})")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where to write (default: next to the recordings)")
    add_json_argument(parser, "every side's clients.jsonl as one JSON document ({\"sides\": [{\"side\", \"file\", "
                              "\"header\", \"findings\", \"idioms\"}]})")
    parser.set_defaults(func=run)


def recordings(run_dir: Path) -> list[tuple[str, Path]]:
    """(side name, transcripts file) of a run directory, a gate directory or a transcripts file."""
    if run_dir.is_file():
        return [("", run_dir)]
    if (run_dir / "transcripts.jsonl").is_file():
        return [("", run_dir / "transcripts.jsonl")]
    return [(side, run_dir / side / "transcripts.jsonl") for side in ("baseline", "candidate")
            if (run_dir / side / "transcripts.jsonl").is_file()]


@dataclass
class _Side:
    """One recording replayed, waiting to be written."""

    name: str
    target: Path
    header: dict[str, Any]
    findings: list[ClientFinding]
    idioms: list[IdiomFinding]
    transcripts: int
    seconds: float


def run(args: argparse.Namespace) -> int:
    with json_output(args.json) as emit:
        return _run(args, emit)


def _document(sides: list[_Side]) -> str:
    """The --json document: each side's clients.jsonl records (header, findings, idioms) under its name."""
    import json

    from conformance.clients.record import CLIENTS_FILE

    return json.dumps({"sides": [{"side": side.name or "run", "file": str(side.target / CLIENTS_FILE),
                                  "header": side.header, "findings": [f.to_dict() for f in side.findings],
                                  "idioms": [idiom.to_dict() for idiom in side.idioms]} for side in sides]},
                      indent=1, ensure_ascii=False) + "\n"


def _run(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    from conformance.clients.record import CLIENTS_FILE, make_header, write_findings
    from conformance.clients.replay_run import CLIENTS, client_versions, replay, replay_idioms, runnable
    from conformance.record.recording import read_header, read_transcripts
    from conformance.record.transcript import TranscriptError
    from conformance.report.clients import markdown as clients_markdown

    found = recordings(args.run_dir)
    if not found:
        print(f"conformance clients: error: {args.run_dir}: no transcripts.jsonl there (nor baseline/ and candidate/ ones)",
              file=sys.stderr)
        return exit_codes.ERROR
    clients = tuple(args.client or CLIENTS)
    versions = client_versions(clients)
    unavailable = {c: v["unavailable"] for c, v in versions.items() if v["unavailable"]}
    failed: dict[str, str] = {}  # client -> why its batch failed (the first time; it is not started again)
    sides: list[_Side] = []
    out_root = args.out or (args.run_dir if args.run_dir.is_dir() else args.run_dir.parent)
    for side, path in found:
        try:
            transcripts = read_transcripts(path)
            run_header = read_header(path, "transcripts")
        except TranscriptError as exc:
            print(f"conformance clients: error: {exc}", file=sys.stderr)
            return exit_codes.ERROR
        started = time.monotonic()
        side_findings, failures = replay(transcripts, clients, runnable(versions, failed))
        failed = failures | failed
        side_idioms, failures = replay_idioms(transcripts, clients, runnable(versions, failed))
        failed = failures | failed
        header = make_header(transcripts=path, run_header=run_header,
                             profile=transcripts[0].profile if transcripts else None,
                             server=asdict(transcripts[0].server) if transcripts else None, clients=versions,
                             created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        target = (out_root / side if side else out_root) if args.out else path.parent
        sides.append(_Side(side, target, header, side_findings, side_idioms, len(transcripts),
                           time.monotonic() - started))
    findings = [finding for side in sides for finding in side.findings]
    idioms = [idiom for side in sides for idiom in side.idioms]
    report = out_root / "clients.md"
    for client, reason in {**unavailable, **failed}.items():
        print(f"conformance clients: error: {client} could not run: {reason}", file=sys.stderr)
    ran = bool(idioms) or any(f.outcome != "not_run" for f in findings)
    earlier = [path for path in (*(side.target / CLIENTS_FILE for side in sides), report) if path.exists()]
    if not ran and earlier:
        print(f"conformance clients: error: no client call ran: nothing written, the earlier report is kept "
              f"({', '.join(map(str, earlier))})", file=sys.stderr)
        return exit_codes.ERROR
    for side in sides:
        try:
            side.target.mkdir(parents=True, exist_ok=True)
            write_findings(side.target / CLIENTS_FILE, side.header, [*side.findings, *side.idioms])
        except OSError as exc:
            print(f"conformance clients: error: {side.target}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return exit_codes.ERROR
        print(f"{side.name or 'run'}: {len(side.findings)} client calls over {side.transcripts} transcripts, "
              f"{len(side.idioms)} client idioms in {side.seconds:.1f} s: {side.target / CLIENTS_FILE}")
    try:
        report.write_text(clients_markdown.render([side.header for side in sides], findings, idioms), encoding="utf-8")
    except OSError as exc:
        print(f"conformance clients: error: {report}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"report: {report}")
    try:
        emit(_document(sides))
    except OSError as exc:
        print(f"conformance clients: error: --json: {exc.filename}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.ERROR
    if unavailable or failed:
        return exit_codes.ERROR
    if not ran:
        print("conformance clients: error: nothing was replayed (no recorded chat answer)", file=sys.stderr)
        return exit_codes.ERROR
    return exit_codes.OK
