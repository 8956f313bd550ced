"""`clients.jsonl`: what each client rebuilt from each recorded answer, next to a run's results.

A header line (`conformance-clients/1`: the transcripts replayed, their profile and server, and the
version of each client that ran or why it could not) and one `ClientFinding` per (case, mode,
profile, repeat, client call). Every line is validated against `schemas/clients.schema.json` when
read; a bad one raises `RecordingError` naming the file and line.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.clients.compare import ClientOutcome
from conformance.clients.jobs import ClientApi, ClientName
from conformance.record.recording import RecordingError
from conformance.record.transcript import JsonLinesWriter, iter_json_lines
from conformance.util.package_paths import load_schema

CLIENTS_FILE = "clients.jsonl"
CLIENTS_FORMAT = "conformance-clients/1"


@dataclass
class ClientFinding:
    case_id: str
    mode: str
    profile: str
    repeat: int
    client: ClientName
    api: ClientApi
    outcome: ClientOutcome
    reason: str = ""
    status: int | None = None
    server: dict[str, Any] | None = None  # the server's parsed message (conformance.clients.compare.view)
    rebuilt: dict[str, Any] | None = None  # the client's, same view
    differences: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    finish_reason: str | None = None
    items: int | None = None
    first_name_item: int | None = None
    server_chunks: int | None = None
    server_first_name_chunk: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class IdiomFinding:
    """What one client idiom sent for a case and what it handed its caller, given the case's recorded answer."""

    case_id: str
    profile: str
    idiom: str
    client: ClientName
    surfaced: str
    raised: bool
    status: int | None = None
    sent: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"record": "idiom", **self.__dict__}


def make_header(*, transcripts: Path, run_header: Mapping[str, Any] | None, profile: str | None,
                server: Mapping[str, Any] | None, clients: Mapping[str, Mapping[str, str | None]],
                created_at: str) -> dict[str, Any]:
    return {"record": "header", "format": CLIENTS_FORMAT, "file": "clients", "suite_version": __version__,
            "created_at": created_at, "transcripts": str(transcripts),
            "case_digest": (run_header or {}).get("case_digest"), "profile": profile,
            "server": dict(server) if server is not None else None, "clients": {k: dict(v) for k, v in clients.items()}}


def write_findings(path: Path, header: Mapping[str, Any], findings: Iterable[ClientFinding | IdiomFinding]) -> None:
    with JsonLinesWriter(path) as writer:
        writer.write(dict(header))
        for finding in findings:
            writer.write(finding.to_dict())


def read_findings(path: Path) -> tuple[dict[str, Any], list[ClientFinding]]:
    """(header, findings) of a clients.jsonl; RecordingError names the file and line of a bad record."""
    header, findings, _ = read_recording(path)
    return header, findings


def read_recording(path: Path) -> tuple[dict[str, Any], list[ClientFinding], list[IdiomFinding]]:
    """(header, findings, idiom findings) of a clients.jsonl, every line validated."""
    header: dict[str, Any] | None = None
    findings: list[ClientFinding] = []
    idioms: list[IdiomFinding] = []
    for number, record in iter_json_lines(path):
        if record.get("record") == "header":
            if header is not None or findings or idioms:
                raise RecordingError(f"{path}:{number}: a header record after the first line")
            if record.get("format") != CLIENTS_FORMAT:
                raise RecordingError(f"{path}:{number}: recorded in format {record.get('format')!r}; "
                                     f"this suite reads {CLIENTS_FORMAT!r}")
            _check(path, number, "header", record)
            header = record
            continue
        if record.get("record") == "idiom":
            _check(path, number, "idiom", record)
            idioms.append(IdiomFinding(**{k: v for k, v in record.items() if k != "record"}))
            continue
        _check(path, number, "finding", record)
        findings.append(ClientFinding(**record))
    if header is None:
        raise RecordingError(f"{path}: no header line (not a clients.jsonl of this suite)")
    return header, findings, idioms


def _check(path: Path, number: int, definition: str, record: dict[str, Any]) -> None:
    errors = sorted(_validator(definition).iter_errors(record), key=lambda e: (len(e.absolute_path), e.message))
    if errors:
        from conformance.util.locations import format_path

        where = format_path(list(errors[0].absolute_path))
        raise RecordingError(f"{path}:{number}: not a client {definition}: "
                             + (f"field {where!r}: " if where else "") + errors[0].message[:300])


@functools.cache
def _validator(definition: str) -> Any:
    import jsonschema


    schema = load_schema("clients.schema.json")
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]})
