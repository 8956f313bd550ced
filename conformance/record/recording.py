"""A run's recording as a versioned record: the header line of `transcripts.jsonl` and `results.jsonl`,
the JSON Schemas of both files, and the one reader behind `read_transcripts` and `read_results`.

Each file starts with a header record (`{"record": "header", "format": "conformance-run/1", ...}`)
saying what was run: format version, suite version, a digest of the case set, the markers checked
for leaks, the profile and the server stamp. Readers validate every line against the file's schema
(`schemas/transcripts.schema.json`, `schemas/results.schema.json`) and refuse a recording of another
format version with a message naming it. A file without a header is a recording made before headers
existed (suite 0.1.0 of 2026-11-30): its lines are read as they are, with `header` None.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from conformance import __version__
from conformance.record.case_model import Case
from conformance.record.transcript import Transcript, TranscriptError, iter_json_lines
from conformance.util.locations import format_path
from conformance.util.package_paths import load_schema

RUN_FORMAT = "conformance-run/1"
HEADER_RECORD = "header"
RecordingFile = Literal["transcripts", "results"]
SCHEMAS: dict[RecordingFile, str] = {"transcripts": "transcripts.schema.json", "results": "results.schema.json"}


class RecordingError(TranscriptError):
    """A recording that cannot be read; the message names the file and line."""


def case_digest(cases: Sequence[Case]) -> str:
    """sha256 over the case definitions that decide what is sent and expected (not where they live):
    two runs with the same digest ran the same cases."""
    digest = hashlib.sha256()
    for case in sorted(cases, key=lambda c: c.id):
        digest.update(_definition_line(case))
    return "sha256:" + digest.hexdigest()[:16]


# id(case) -> (case, its definition line): a run writes several headers over the same case objects,
# and asdict deep-copies every request. The case is kept with its line, so its id is not reused.
_DEFINITION_LINES: dict[int, tuple[Any, bytes]] = {}


def _definition_line(case: Case) -> bytes:
    known = _DEFINITION_LINES.get(id(case))
    if known is not None and known[0] is case:
        return known[1]
    definition = {k: v for k, v in dataclasses.asdict(case).items() if k not in ("source", "index", "line")}
    line = json.dumps(definition, sort_keys=True, default=_jsonable).encode() + b"\n"
    _DEFINITION_LINES[id(case)] = (case, line)
    return line


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)


def make_header(file: RecordingFile, *, cases: Sequence[Case], markers: Sequence[str], server: Mapping[str, Any],
                created_at: str) -> dict[str, Any]:
    """The first record of a run's `file` (server: a `ServerStamp` as a dict)."""
    return {
        "record": HEADER_RECORD,
        "format": RUN_FORMAT,
        "file": file,
        "suite_version": __version__,
        "created_at": created_at,
        "case_digest": case_digest(cases),
        "case_ids": sorted(case.id for case in cases),
        "markers": list(markers),
        "profile": server.get("profile"),
        "server": {**server, "args": list(server.get("args") or ())},
    }


RECORD_DEFINITIONS: dict[RecordingFile, str] = {
    "transcripts": "transcripts.schema.json#/$defs/transcript",
    "results": "results.schema.json#/$defs/result",
}
HEADER_DEFINITION = "transcripts.schema.json#/$defs/header"


@functools.cache
def _validator(definition: str) -> Any:
    """A validator for one definition of the shipped recording schemas (`file#/$defs/name`)."""
    import jsonschema
    from referencing import Registry, Resource


    schemas = [load_schema(name) for name in SCHEMAS.values()]
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)
    base = schemas[0]["$id"].rsplit("/", 1)[0]
    return jsonschema.Draft202012Validator({"$ref": f"{base}/{definition}"}, registry=registry)


def _problem(definition: str, record: Any) -> str | None:
    """The first (outermost) way `record` departs from `definition`, naming the field; None if none."""
    errors = sorted(_validator(definition).iter_errors(record), key=lambda e: (len(e.absolute_path), e.message))
    if not errors:
        return None

    error = errors[0]
    where = format_path(list(error.absolute_path))
    return (f"field {where!r}: " if where else "") + error.message[:300]


def read_header(path: Path, file: RecordingFile) -> dict[str, Any] | None:
    """The header of a recording file (None: a recording made before headers existed)."""
    for number, record in iter_json_lines(path):
        return _checked_header(path, number, file, record) if record.get("record") == HEADER_RECORD else None
    return None


def records(path: Path, file: RecordingFile) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for every record after the header, each validated against the file's
    schema; RecordingError (a TranscriptError) names the file and line of the first bad one."""
    for number, record in iter_json_lines(path):
        if record.get("record") == HEADER_RECORD:
            if number != 1:
                raise RecordingError(f"{path}:{number}: a header record after the first line")
            _checked_header(path, number, file, record)
            continue
        problem = _problem(RECORD_DEFINITIONS[file], record)
        if problem:
            raise RecordingError(f"{path}:{number}: not a {file.removesuffix('s')}: {problem}")
        yield number, record


def _checked_header(path: Path, number: int, file: RecordingFile, record: dict[str, Any]) -> dict[str, Any]:
    if record.get("format") != RUN_FORMAT:
        raise RecordingError(
            f"{path}:{number}: recorded in format {record.get('format')!r}; this suite "
            f"reads {RUN_FORMAT!r} (record it again with this version of the suite)")
    problem = _problem(HEADER_DEFINITION, record)
    if problem:
        raise RecordingError(f"{path}:{number}: not a valid header: {problem}")
    if record["file"] != file:
        raise RecordingError(f"{path}:{number}: the header says this is a {record['file']} file, not {file}")
    return record


def read_transcripts(path: Path) -> list[Transcript]:
    """Every transcript of a JSON-lines file; a record that is not one raises TranscriptError naming the line."""

    transcripts = []
    for number, record in records(path, "transcripts"):
        try:
            transcript = Transcript.from_dict(record)
        except KeyError as exc:
            raise TranscriptError(f"{path}:{number}: not a transcript: missing field {exc}") from exc
        except (TypeError, ValueError, AttributeError) as exc:
            raise TranscriptError(f"{path}:{number}: not a transcript: {exc}") from exc
        transcripts.append(transcript)
    return transcripts
