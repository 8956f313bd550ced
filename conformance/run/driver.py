"""Driver: send one case in one mode to an OpenAI-compatible server and record a `Transcript`.

Requests go through the async `openai` client (`AsyncOpenAI`, retries off) as its generic
`post()` with the body exactly as recorded, asking for the raw, unread HTTP response (what
`with_streaming_response` does): the raw SSE lines are recorded as they arrive (a broken stream is
recorded as far as it got, never "fixed" by the SDK). The typed `create()` methods would only walk
the body once more to produce the same JSON; openai-python's own reading of the stream is judged
apart, by replaying the recording (`conformance.run.checks.findings.finding_client_replay`). A CORS preflight
(`endpoint: preflight`) goes out as a browser sends it, through the HTTP client under the openai
client (`Clients`). Whatever goes wrong (refused connection, timeout, a connection dropped
mid-stream) ends up in the transcript, not as an exception.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from conformance.formats.registry import DEFAULT_FORMAT
from conformance.record.case_model import STREAM_INTERVAL_FIELD, Case, Mode, is_stream, tokens_per_delta
from conformance.record.outcomes import SkipKind
from conformance.record.transcript import ServerStamp, SseLine, Transcript
from conformance.util.json_codec import parse_json
from conformance.util.side_requests import in_daemon_thread

if TYPE_CHECKING:
    from conformance.servers.launch import Server
    from conformance.servers.profile import CommandVersionProbe, VersionProbe
    from conformance.servers.runtimes import Runtime

DEFAULT_TIMEOUT = 120.0  # seconds per request
DEFAULT_CONCURRENCY = 8  # requests in flight at once
DEFAULT_PREFLIGHT_PATH = "/chat/completions"
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024  # one SSE line, or a whole non-streaming body


@dataclass(frozen=True)
class Target:
    """The server under test and how to talk to it."""

    base_url: str  # ends in /v1
    model: str
    profile: str
    api_key: str = field(default="EMPTY", repr=False)  # never shown, not even in a traceback's locals
    timeout: float = DEFAULT_TIMEOUT  # seconds per request, whole stream included
    can_force: bool | None = None  # None: ask the server with one probe request at the start of a run
    cannot_force_reason: str | None = None  # why forced cases are skipped when can_force is False
    cannot_force_kind: SkipKind = "cannot_force"  # the skip kind of those cases (forcing_off: the user's choice)
    forcing_error: str | None = None  # the probe could not tell (HTTP 401, timeout...): forced cases are errors
    version: str | None = None
    args: tuple[str, ...] = ()
    checkpoint_revision: str | None = None
    build: str | None = None  # the launched record's build note (a combination no one ships), for the stamp
    launch_note: str | None = None  # why a launched server's flags differ from its record's, for the stamp
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES  # a longer SSE line (or non-streaming body) is an `error`
    fixture_variant: str | None = None  # the tiny checkpoint's variant it serves; None: its profile record's
    format: str = DEFAULT_FORMAT.name  # the response format its checkpoint writes (conformance.formats.registry)

    @property
    def root_url(self) -> str:
        """The server address without the `/v1` API prefix (where vLLM's /tokenize lives)."""
        return self.base_url.rstrip("/").removesuffix("/v1")

    @property
    def shown_url(self) -> str:
        """`base_url` fit to print or record: credentials in it replaced by `***`."""
        return redact_url(self.base_url)

    def redact(self, value: Any) -> Any:
        """`value` (a string, or JSON made of dicts, lists and strings) with the API key and any password
        of `base_url` replaced by `***`: for error texts, which a server may echo the key into."""
        secrets = [s for s in (self.api_key, urllib.parse.urlsplit(self.base_url).password) if s and s != "EMPTY"]
        if not secrets or value is None:
            return value
        if isinstance(value, str):
            for secret in secrets:
                value = value.replace(secret, "***")
            return value
        if isinstance(value, dict):
            return {self.redact(k): self.redact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact(item) for item in value]
        return value

    def stamp(self) -> ServerStamp:
        return ServerStamp(self.shown_url, self.model, self.profile, self.version, self.args, self.checkpoint_revision,
                           self.build, self.format, self.launch_note)


def target_of(server: Server, profile: str | None = None, **options: Any) -> Target:
    """The Target of a launched server: its address, served model, version, flags and build, judged as
    `profile` (default: the profile it was launched with); `options` are the run's own (API key, timeout,
    forcing, checkpoint revision, fixture variant, line limit)."""
    return Target(base_url=server.base_url, model=server.model, profile=profile or server.profile.name,
                  version=server.version, args=tuple(server.args), build=server.build_note, **options)


def redact_url(url: str) -> str:
    """`url` with its userinfo (`user:password@`) replaced by `***@`."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


# openai-python's request header for "return the HTTP response unread" (what with_streaming_response sets)
RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"

FORCING_CHOICES = ("probe", "trust", "off")
FORCING_HELP = ("forced outputs: `probe` (default) sends one forced request first and skips the forced cases "
                "if the server does not honour it; `trust` sends them without asking (a server that forces but "
                "has no /tokenize); `off` skips them")


def forcing_fields(choice: str) -> dict[str, Any]:
    """Target fields for a FORCING_CHOICES value (can_force None: the engine probes at the start of a run)."""
    if choice == "off":
        return {"can_force": False, "cannot_force_reason": "forcing is off for this run",
                "cannot_force_kind": "forcing_off"}
    return {"can_force": True if choice == "trust" else None}


@dataclass
class Clients:
    """One run's connections: `api`, the openai client every API request goes through, and `http`,
    the HTTP client under it (one connection pool, one TLS context), which also sends what a
    browser sends and openai-python cannot: CORS preflights."""

    api: Any  # openai.AsyncOpenAI
    http: Any  # httpx2.AsyncClient

    async def __aenter__(self) -> Clients:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.api.close()  # closes `http` too


def make_clients(target: Target) -> Clients:
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    http = DefaultAsyncHttpxClient(timeout=target.timeout)  # the SDK's own defaults (limits, redirects)
    api = AsyncOpenAI(base_url=target.base_url, api_key=target.api_key, max_retries=0, timeout=target.timeout,
                      http_client=http)
    return Clients(api, http)


async def fetch_server_version(clients: Clients, target: Target, probe: VersionProbe | CommandVersionProbe | None,
                               runtime: Runtime) -> str | None:
    """The version the profile record's `probe` reads (vLLM: GET /version answers {"version": "..."};
    `transformers serve`: a command run with the record's `runtime`); None when the record has no
    probe or the server does not answer it."""
    import httpx2
    import openai


    if probe is None:
        return None
    loop = asyncio.get_running_loop()

    def get_json(path: str) -> Any:  # in the probe's thread, over this run's client
        request = clients.api.get(f"{target.root_url}{path}", cast_to=httpx2.Response)
        return parse_json(asyncio.run_coroutine_threadsafe(request, loop).result().content)

    try:  # the whole answer within --timeout: a trickle must not hold the run
        return await in_daemon_thread(target.timeout, probe.version, get_json, runtime)
    except (openai.APIError, TimeoutError, ValueError, KeyError, TypeError):
        return None


def request_body(case: Case, mode: Mode, model: str, forcing: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON body for one case in one mode: the case's request plus model, stream (with the tokens
    per delta of a granular stream, `STREAM_INTERVAL_FIELD`) and forcing.
    For `endpoint: responses`, `messages` become `input` and everything else is sent as given (the
    case loader already flattened the tools; cases/README.md). A preflight has no body: its
    request (origin, method, headers, path) is recorded as the case gives it."""
    request = json.loads(json.dumps(case.request))  # a deep copy: the case stays as loaded
    if case.endpoint == "preflight":
        return {"path": DEFAULT_PREFLIGHT_PATH, **request}
    body: dict[str, Any] = {"model": model, **request, "stream": is_stream(mode)}
    if (tokens := tokens_per_delta(mode)) is not None:
        body[STREAM_INTERVAL_FIELD] = tokens
    if case.endpoint == "responses" and "messages" in body:
        body["input"] = body.pop("messages")
    if forcing:
        body.update(forcing)
    return body


_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


class LineTooLong(ValueError):
    """An answer line (or non-streaming body) longer than the run's cap (`Target.max_line_bytes`)."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} is longer than {limit} bytes (the cap; `conformance run --max-line-bytes`)")


async def _sse_lines(chunks: AsyncIterator[bytes], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> AsyncIterator[str]:
    """The lines of an event stream, split where the SSE spec splits them: at CRLF, LF or CR only.
    (httpx's `aiter_lines` splits like `str.splitlines`, so also inside a JSON string at U+0085,
    U+2028 or U+2029, which vLLM writes unescaped: a model that outputs one would look like a
    broken stream.) Linear in the bytes read: only each new chunk is searched for line breaks, and the
    pieces of an unfinished line are joined once it ends. A line past `max_line_bytes` raises LineTooLong."""
    pending: list[bytes] = []  # the pieces of the unfinished line
    pending_bytes, after_cr = 0, False
    async for chunk in chunks:
        if after_cr and chunk.startswith(b"\n"):  # the LF of a CRLF split between two reads
            chunk = chunk[1:]
        after_cr = chunk.endswith(b"\r")
        if not chunk:
            continue
        *lines, rest = _LINE_BREAK.split(chunk)
        for number, line in enumerate(lines):
            if number == 0 and pending:
                line, pending, pending_bytes = b"".join((*pending, line)), [], 0
            if len(line) > max_line_bytes:
                raise LineTooLong("an SSE line", max_line_bytes)
            yield line.decode("utf-8", "replace")
        if rest:
            pending.append(rest)
            pending_bytes += len(rest)
            if pending_bytes > max_line_bytes:
                raise LineTooLong("an SSE line", max_line_bytes)
    if pending:
        yield b"".join(pending).decode("utf-8", "replace")


async def _read_body(chunks: AsyncIterator[bytes], max_bytes: int) -> bytes:
    """A whole non-streaming body, at most `max_bytes` (LineTooLong beyond)."""
    pieces, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise LineTooLong("the response body", max_bytes)
        pieces.append(chunk)
    return b"".join(pieces)


async def _sse_payloads(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The `data:` payload of each SSE event (multi-line data joined with newlines)."""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:  # a last event without its blank line: record it, the checks judge it
        yield "\n".join(data)


def _body_of(raw: bytes | str) -> Any:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        return parse_json(text)
    except json.JSONDecodeError:
        return text


def _describe(exc: BaseException, timeout: float) -> str:
    import httpx2
    import openai

    if isinstance(exc, LineTooLong):
        return str(exc)
    if isinstance(exc, (TimeoutError, openai.APITimeoutError, httpx2.TimeoutException)):
        return f"timeout: no complete response within {timeout:g}s ({type(exc).__name__})"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"connection failed: {type(cause).__name__}: {cause}"
    return f"{type(exc).__name__}: {exc}"


async def send(
    clients: Clients,
    target: Target,
    case: Case,
    mode: Mode,
    *,
    forcing: Mapping[str, Any] | None,
    natural: bool = False,
    repeat: int = 0,
) -> Transcript:
    """Send one request (with the `forcing` body fields, if any) and record everything that came back."""
    import openai

    body = request_body(case, mode, target.model, forcing)
    transcript = Transcript(
        case_id=case.id,
        mode=mode,
        profile=target.profile,
        endpoint=case.endpoint,
        server=target.stamp(),
        request=body,
        forced=forcing is not None,
        forced_text=case.force if forcing is not None else None,
        natural=natural,
        repeat=repeat,
        started_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    )
    start = time.monotonic()
    if case.endpoint == "preflight":
        await _send_preflight(clients.http, target, transcript)
        transcript.duration = round(time.monotonic() - start, 6)
        return transcript
    path = "/responses" if case.endpoint == "responses" else "/chat/completions"
    try:
        async with asyncio.timeout(target.timeout):
            response = await _post(clients, path, body)
            try:
                transcript.status = response.status_code
                if is_stream(mode):
                    async for data in _sse_payloads(_sse_lines(response.aiter_bytes(), target.max_line_bytes)):
                        transcript.sse.append(SseLine(data, round(time.monotonic() - start, 6)))
                else:
                    parsed = _body_of(await _read_body(response.aiter_bytes(), target.max_line_bytes))
                    if isinstance(parsed, dict):
                        transcript.response = parsed
                    else:
                        transcript.transport_error = f"the response is not a JSON object: {str(parsed)[:200]!r}"
            finally:
                await response.aclose()
    except openai.APIStatusError as exc:
        transcript.status = exc.status_code
        transcript.error_body = target.redact(_body_of(exc.response.content))
    except Exception as exc:  # recorded, judged as `error`; the run goes on
        transcript.transport_error = target.redact(_describe(exc, target.timeout))
    transcript.duration = round(time.monotonic() - start, 6)
    return transcript


async def _post(clients: Clients, path: str, body: dict[str, Any]) -> Any:
    """POST the body, the response unread. A pooled connection that the server closed just before it
    was reused (a read error before any byte of an answer: `transformers serve` closes its connection
    after a 500) is tried once more on a new one, as openai-python's default retries would; a second
    failure is recorded as it is."""
    import httpx2
    import openai

    send = lambda: clients.api.post(path, body=body, cast_to=httpx2.Response,  # noqa: E731
                                    options={"headers": {RAW_RESPONSE_HEADER: "stream"}})
    try:
        return await send()
    except openai.APIConnectionError as exc:
        if isinstance(exc, openai.APITimeoutError) or not isinstance(exc.__cause__, (httpx2.ReadError,
                                                                                     httpx2.RemoteProtocolError)):
            raise
    return await send()


async def _send_preflight(http: Any, target: Target, transcript: Transcript) -> None:
    """Send a CORS preflight as a browser does (no credentials, no API key) and record the status,
    the response headers and the body text in `transcript.response`."""
    import httpx2

    request = transcript.request
    headers = {"Origin": request["origin"], "Access-Control-Request-Method": request["method"]}
    if request.get("headers"):
        headers["Access-Control-Request-Headers"] = ", ".join(request["headers"])
    try:
        reply = await http.options(target.base_url.rstrip("/") + request["path"], headers=headers)
        transcript.status = reply.status_code
        transcript.response = {"headers": {name.lower(): value for name, value in reply.headers.items()},
                               "body": reply.text}
    except httpx2.HTTPError as exc:
        transcript.transport_error = target.redact(_describe(exc, target.timeout))
