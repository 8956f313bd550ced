"""Transcripts: everything needed to judge one request offline, stored as JSON lines.

One transcript per line of `transcripts.jsonl`, written and flushed as soon as its request finishes,
so a crash loses nothing already received. A transcript holds the exact request body, the HTTP
status, the error body, every raw SSE `data:` line with its arrival time, the non-streaming response
JSON, transport errors, and a stamp of the server it came from. Checks (`conformance.checks`) read
transcripts only, which is what makes `conformance recheck` and a future two-run diff possible.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from conformance.cases import MODES

TRANSCRIPTS_FILE = "transcripts.jsonl"


@dataclass(frozen=True)
class ServerStamp:
    """What was tested: enough to tell two runs apart in a report or a diff."""

    base_url: str
    model: str
    profile: str
    version: str | None = None
    args: tuple[str, ...] = ()
    checkpoint_revision: str | None = None


@dataclass(frozen=True)
class SseLine:
    """One raw SSE `data:` payload (without the `data: ` prefix) and its arrival time in seconds
    since the request started."""

    data: str
    t: float


@dataclass
class Transcript:
    case_id: str
    mode: str  # one of MODES
    profile: str
    endpoint: str  # "chat" | "responses" | "preflight"
    server: ServerStamp
    request: dict[str, Any]  # the JSON body as sent (model and stream included); a preflight's origin, method...
    forced: bool = True  # the request carried the forcing fields (`force` of the case)
    natural: bool = False  # natural mode: judged on `natural` instead of the expected message
    repeat: int = 0
    started_at: str = ""  # ISO 8601, UTC
    duration: float = 0.0  # seconds until the last byte or the error
    status: int | None = None  # HTTP status; None when no response arrived
    error_body: Any = None  # parsed JSON (or text) of a non-2xx response
    sse: list[SseLine] = field(default_factory=list)  # streaming only
    response: dict[str, Any] | None = None  # non-streaming JSON body; a preflight's {"headers", "body"}
    transport_error: str | None = None  # connection refused, timeout, broken stream...
    skip_reason: str | None = None  # the request was not sent (e.g. the server cannot force outputs)
    # Forced requests: what the server's tokenizer says of the returned token ids (conformance.forcing):
    # [] = exactly the forced text, every marker as its single token; None = could not be verified.
    forcing_problems: list[str] | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        """Identifies the (case, profile, repeat) group whose modes are judged together."""
        return (self.case_id, self.profile, self.repeat)

    def to_dict(self) -> dict[str, Any]:
        # Shallow on purpose: `dataclasses.asdict` deep-copies every request and SSE line (slow).
        data = dict(self.__dict__)
        data["server"] = asdict(self.server)
        data["sse"] = [{"data": line.data, "t": line.t} for line in self.sse]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Transcript:
        data = dict(data)
        server = dict(data.pop("server"))
        server["args"] = tuple(server.get("args") or ())
        sse = [SseLine(**line) for line in data.pop("sse", [])]
        return cls(server=ServerStamp(**server), sse=sse, **data)


class TranscriptError(ValueError):
    """A transcripts file that cannot be read; the message names the file and line."""


class JsonLinesWriter:
    """Starts `path` afresh, then writes one JSON object per line and flushes it at once (a crash
    loses nothing written)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("w", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonLinesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for every non-blank line; a bad line raises TranscriptError."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TranscriptError(f"{path}:{number}: not UTF-8 text (byte {raw[exc.start]:#04x})") from exc
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except RecursionError as exc:
                raise TranscriptError(f"{path}:{number}: JSON nested too deeply to read") from exc
            except ValueError as exc:  # invalid JSON, or an integer past Python's digit limit
                raise TranscriptError(f"{path}:{number}: not valid JSON: {getattr(exc, 'msg', exc)}") from exc
            if not isinstance(record, dict):
                raise TranscriptError(f"{path}:{number}: expected a JSON object per line")
            yield number, record


_OPTIONAL_TEXT = (str, type(None))
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "case_id": str, "mode": str, "profile": str, "endpoint": str, "request": dict, "repeat": int,
    "status": (int, type(None)), "response": (dict, type(None)), "forcing_problems": (list, type(None)),
    "forced": bool, "natural": bool, "started_at": str, "duration": (int, float),
    "transport_error": _OPTIONAL_TEXT, "skip_reason": _OPTIONAL_TEXT,
}  # fmt: skip
_SERVER_TYPES: dict[str, type | tuple[type, ...]] = {
    "base_url": str, "model": str, "profile": str, "version": _OPTIONAL_TEXT, "checkpoint_revision": _OPTIONAL_TEXT,
}


def _shape_problem(transcript: Transcript) -> str | None:
    """What makes a parsed record unusable as a transcript (a field of the wrong type), or None."""
    for name, kind in _FIELD_TYPES.items():
        if not isinstance(getattr(transcript, name), kind):
            return f"field {name!r} has the wrong type: {getattr(transcript, name)!r}"[:200]
    for name, kind in _SERVER_TYPES.items():
        if not isinstance(getattr(transcript.server, name), kind):
            return f"field 'server.{name}' has the wrong type: {getattr(transcript.server, name)!r}"[:200]
    if not all(isinstance(arg, str) for arg in transcript.server.args):
        return "field 'server.args' is not a list of strings"
    if not all(isinstance(problem, str) for problem in transcript.forcing_problems or ()):
        return "field 'forcing_problems' is not a list of strings"
    if transcript.mode not in MODES:
        return f"field 'mode' is {transcript.mode!r}, expected one of {', '.join(MODES)}"
    bad = next((line for line in transcript.sse if not isinstance(line.data, str)
                or not isinstance(line.t, (int, float))), None)
    return f"an `sse` entry is not {{data: string, t: number}}: {bad!r}"[:200] if bad else None


def read_transcripts(path: Path) -> list[Transcript]:
    """Every transcript of a JSON-lines file; a record that is not one raises TranscriptError naming the line."""
    transcripts = []
    for number, record in iter_json_lines(path):
        try:
            transcript = Transcript.from_dict(record)
        except KeyError as exc:
            raise TranscriptError(f"{path}:{number}: not a transcript: missing field {exc}") from exc
        except (TypeError, ValueError, AttributeError) as exc:
            raise TranscriptError(f"{path}:{number}: not a transcript: {exc}") from exc
        problem = _shape_problem(transcript)
        if problem:
            raise TranscriptError(f"{path}:{number}: not a transcript: {problem}")
        transcripts.append(transcript)
    return transcripts


def group_by_key(transcripts: Iterable[Transcript]) -> dict[tuple[str, str, int], dict[str, Transcript]]:
    """{(case id, profile, repeat): {mode: transcript}}, in first-seen order."""
    groups: dict[tuple[str, str, int], dict[str, Transcript]] = {}
    for transcript in transcripts:
        groups.setdefault(transcript.key, {})[transcript.mode] = transcript
    return groups
