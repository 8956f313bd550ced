"""Transcripts: everything needed to judge one request offline, stored as JSON lines.

One transcript per line of `transcripts.jsonl`, written and flushed as soon as its request finishes,
so a crash loses nothing already received. A transcript holds the exact request body, the HTTP
status, the error body, every raw SSE `data:` line with its arrival time, the non-streaming response
JSON, transport errors, and a stamp of the server it came from. Checks (`conformance.run.checks`) read
transcripts only, which is what makes `conformance recheck` and a future two-run diff possible.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from conformance.record.case_model import Mode
from conformance.util.files import open_regular
from conformance.util.json_codec import MAX_RECORD_DEPTH, JsonTooDeep, json_text, parse_json

TRANSCRIPTS_FILE = "transcripts.jsonl"
MAX_RECORDING_BYTES = 1024**3  # a JSON-lines recording read back (transcripts, results, clients)


@dataclass(frozen=True)
class ServerStamp:
    """What was tested: enough to tell two runs apart in a report or a diff."""

    base_url: str
    model: str
    profile: str
    version: str | None = None
    args: tuple[str, ...] = ()
    checkpoint_revision: str | None = None
    build: str | None = None  # how a launched server was assembled, when no one ships it (Server.build_note)
    format: str | None = None  # the response format its checkpoint writes (None: recorded before formats)
    launch_note: str | None = None  # why a launched server's flags differ from its profile record's (None: they do not)


@dataclass(frozen=True)
class SseLine:
    """One raw SSE `data:` payload (without the `data: ` prefix) and its arrival time in seconds
    since the request started."""

    data: str
    t: float


@dataclass
class Transcript:
    case_id: str
    mode: Mode
    profile: str
    endpoint: str  # "chat" | "responses" | "preflight"
    server: ServerStamp
    request: dict[str, Any]  # the JSON body as sent (model and stream included); a preflight's origin, method...
    forced: bool = True  # the request carried the forcing fields (`force` of the case)
    # The raw output it forced, recorded so that views need no forcing method to read it back out of the
    # request; None when not forced, or in a recording made before this field (see upgrade_recording).
    forced_text: str | None = None
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
    skip_kind: str | None = None  # its kind (conformance.record.outcomes.SkipKind)
    # Forced requests: what the server's tokenizer says of the returned token ids (conformance.servers.forcing):
    # [] = exactly the forced text, every marker as its single token; None = could not be verified.
    forcing_problems: list[str] | None = None
    # A one-token stream that came merged (several tokens in a delta: a busy server groups the outputs a slow
    # reader has not taken yet) was sent again this many times (conformance.run.engine); this is the last answer.
    merged_resends: int = 0
    # A second turn (conformance.run.second_turn): the prompts the server rendered, by what was rendered
    # ("sent", "reference", "reference_without_reasoning"; "sent_from"), or why they could not be read: the
    # server has no tokenizer endpoints (unavailable: not judged, named) or they failed (error: never a pass).
    prompts: dict[str, str] | None = None
    prompts_error: str | None = None
    prompts_unavailable: str | None = None

    @property
    def answered(self) -> bool:
        """An HTTP answer below 500 arrived, with no transport error and nothing skipped."""
        return (self.skip_reason is None and self.transport_error is None and self.status is not None
                and self.status < 500)

    @property
    def key(self) -> tuple[str, str, int]:
        """Identifies the (case, profile, repeat) group whose modes are judged together."""
        return (self.case_id, self.profile, self.repeat)

    def to_dict(self) -> dict[str, Any]:
        # Shallow on purpose: `dataclasses.asdict` deep-copies every request and SSE line (slow).
        data = dict(self.__dict__)
        data["server"] = dict(self.server.__dict__)  # its fields are strings and a tuple of strings
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


def _json_line(record: dict[str, Any]) -> bytes:
    try:
        return (json_text(record) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate a server sent (JSON allows "\ud800"): kept as its escape
        return (json.dumps(record) + "\n").encode("utf-8")


class JsonLinesWriter:
    """Starts `path` afresh, then writes one JSON object per line and flushes it at once (a crash
    loses nothing written)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[bytes] = path.open("wb")

    def write(self, record: dict[str, Any]) -> None:
        self.write_all((record,))

    def write_all(self, records: Iterable[dict[str, Any]]) -> None:
        """Write the records' lines and flush them together (one system call for, say, a case's modes)."""
        self._file.write(b"".join(map(_json_line, records)))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonLinesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for every non-blank line of `path`, a regular file of at most
    MAX_RECORDING_BYTES; a bad line raises TranscriptError."""
    try:
        handle = open_regular(path, MAX_RECORDING_BYTES, "a recording")
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
                record = parse_json(line, MAX_RECORD_DEPTH)
            except JsonTooDeep as exc:
                raise TranscriptError(f"{path}:{number}: JSON nested too deeply to read (over {MAX_RECORD_DEPTH} "
                                      "levels)") from exc
            except ValueError as exc:  # invalid JSON, or an integer past Python's digit limit
                raise TranscriptError(f"{path}:{number}: not valid JSON: {getattr(exc, 'msg', exc)}") from exc
            if not isinstance(record, dict):
                raise TranscriptError(f"{path}:{number}: expected a JSON object per line")
            yield number, record


def group_by_key(transcripts: Iterable[Transcript]) -> dict[tuple[str, str, int], dict[str, Transcript]]:
    """{(case id, profile, repeat): {mode: transcript}}, in first-seen order."""
    groups: dict[tuple[str, str, int], dict[str, Transcript]] = {}
    for transcript in transcripts:
        groups.setdefault(transcript.key, {})[transcript.mode] = transcript
    return groups
