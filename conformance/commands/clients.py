"""`conformance clients RUN_DIR`: a recorded run's answers through real clients, offline."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from conformance.commands import add_verb
from conformance.util import exit_codes

DESCRIPTION = """\
Serve every recorded answer of a run (or of both sides of a gate) byte for byte from a loopback
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
Exit 0 when every client call ran; 2 when a client could not run (not installed), nothing was
replayed, or the recording cannot be read. Findings never fail the command: they are what it reports.

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
    parser.set_defaults(func=run)


def recordings(run_dir: Path) -> list[tuple[str, Path]]:
    """(side name, transcripts file) of a run directory, a gate directory or a transcripts file."""
    if run_dir.is_file():
        return [("", run_dir)]
    if (run_dir / "transcripts.jsonl").is_file():
        return [("", run_dir / "transcripts.jsonl")]
    return [(side, run_dir / side / "transcripts.jsonl") for side in ("baseline", "candidate")
            if (run_dir / side / "transcripts.jsonl").is_file()]


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from conformance.clients.record import CLIENTS_FILE, make_header, write_findings
    from conformance.clients.replay_run import (
        CLIENTS,
        client_versions,
        replay,
        replay_idioms,
    )
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
    headers, findings, idioms = [], [], []
    out_root = args.out or (args.run_dir if args.run_dir.is_dir() else args.run_dir.parent)
    for side, path in found:
        try:
            transcripts = read_transcripts(path)
            run_header = read_header(path, "transcripts")
        except TranscriptError as exc:
            print(f"conformance clients: error: {exc}", file=sys.stderr)
            return exit_codes.ERROR
        started = time.monotonic()
        side_findings = replay(transcripts, clients, versions)
        side_idioms = replay_idioms(transcripts, clients, versions)
        header = make_header(transcripts=path, run_header=run_header,
                             profile=transcripts[0].profile if transcripts else None,
                             server=asdict(transcripts[0].server) if transcripts else None, clients=versions,
                             created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        target = (out_root / side if side else out_root) if args.out else path.parent
        try:
            target.mkdir(parents=True, exist_ok=True)
            write_findings(target / CLIENTS_FILE, header, [*side_findings, *side_idioms])
        except OSError as exc:
            print(f"conformance clients: error: {target}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return exit_codes.ERROR
        print(f"{side or 'run'}: {len(side_findings)} client calls over {len(transcripts)} transcripts, "
              f"{len(side_idioms)} client idioms in "
              f"{time.monotonic() - started:.1f} s: {target / CLIENTS_FILE}")
        headers.append(header)
        findings += side_findings
        idioms += side_idioms
    report = out_root / "clients.md"
    try:
        report.write_text(clients_markdown.render(headers, findings, idioms), encoding="utf-8")
    except OSError as exc:
        print(f"conformance clients: error: {report}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"report: {report}")
    for client, reason in unavailable.items():
        print(f"conformance clients: error: {client} could not run: {reason}", file=sys.stderr)
    if unavailable:
        return exit_codes.ERROR
    if not any(f.outcome != "not_run" for f in findings):
        print("conformance clients: error: nothing was replayed (no recorded chat answer)", file=sys.stderr)
        return exit_codes.ERROR
    return exit_codes.OK
