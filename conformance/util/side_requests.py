"""Side requests: JSON a run asks of a server beside the model requests it judges (vLLM's /tokenize
and /detokenize, the forcing probe, /version), each bounded in time and size.

`KeptAliveJson.post_json` POSTs JSON over HTTP/1.1 connections kept alive between requests, on the
run's own event loop (asyncio streams, the protocol read by h11, the state machine httpx's own
transport uses): no thread is handed a request and none waits for one, which cost a run of the default
set more CPU than the requests themselves. `post_json` is the blocking form (urllib) for code that runs
in a thread, and `in_daemon_thread` runs such code without the run ever waiting for a hung one.
Errors keep urllib's meaning everywhere: `urllib.error.HTTPError` for an HTTP error status, OSError
(TimeoutError) for the connection, ValueError for an answer that is not HTTP, not JSON or too long.
"""

from __future__ import annotations

import asyncio
import base64
import email.message
import io
import json
import queue
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import h11

from conformance.util.json_codec import parse_json

MAX_SIDE_ANSWER_BYTES = 16 * 1024 * 1024
READ_BYTES = 65536

Result = TypeVar("Result")


def request_parts(url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """(`url` without credentials, the headers: JSON, and the API key as a bearer token, or the URL's
    credentials as basic auth, as the openai client's httpx sends them)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        headers["Authorization"] = "Basic " + base64.b64encode(urllib.parse.unquote(userinfo).encode()).decode()
        url = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return url, headers


def json_answer(raw: bytes, path: str) -> dict:
    try:
        return parse_json(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"the answer to {path} is not JSON: {raw[:200].decode('utf-8', 'replace')!r}") from exc


def http_error_text(error: urllib.error.HTTPError) -> str:
    """`HTTP <status>: <the server's message>` (the `error.message` or `detail` of a JSON body, else the text)."""
    raw = error.read().decode("utf-8", errors="replace")
    try:
        body = parse_json(raw)
    except json.JSONDecodeError:
        body = None
    inner = body.get("error") if isinstance(body, dict) else None
    if isinstance(inner, str):  # vLLM's 401: {"error": "Unauthorized"}
        inner = {"message": inner}
    inner = inner if isinstance(inner, dict) else body if isinstance(body, dict) else {}
    message = inner.get("message") or inner.get("detail") or raw or error.reason
    return f"HTTP {error.code}: {str(message)[:500]}"


def post_json(url: str, body: dict, timeout: float, api_key: str | None) -> dict:
    """POST `body`, the JSON answer (blocking); the whole answer within `timeout` seconds (a trickle is
    cut, TimeoutError) and MAX_SIDE_ANSWER_BYTES (ValueError)."""
    deadline = time.monotonic() + timeout
    url, headers = request_parts(url, api_key)
    parts = urllib.parse.urlsplit(url)
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    pieces, size = [], 0
    with urllib.request.urlopen(request, timeout=timeout) as response:
        while piece := response.read1(READ_BYTES):
            pieces.append(piece)
            size += len(piece)
            if size > MAX_SIDE_ANSWER_BYTES:
                raise ValueError(f"the answer to {parts.path} is longer than {MAX_SIDE_ANSWER_BYTES} bytes")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the answer to {parts.path} did not arrive within {timeout:g}s")
    return json_answer(b"".join(pieces), parts.path)


class _Stale(Exception):
    """A kept-alive connection the server closed while it sat idle (no byte of an answer came)."""


class _Connection:
    """One HTTP/1.1 connection: asyncio streams, and h11's reading of what goes over them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.protocol = h11.Connection(h11.CLIENT, max_incomplete_event_size=READ_BYTES)
        self.ended = False  # the server closed its side (an answer without a length ends so)

    @property
    def reusable(self) -> bool:
        return not self.ended and self.protocol.our_state is h11.DONE and self.protocol.their_state is h11.DONE

    def close(self) -> None:
        self.writer.close()


class KeptAliveJson:
    """POSTs JSON to one server (`root_url`, its path prefix kept) and reads the JSON answer, over
    connections kept alive between requests: each request takes an idle one or opens one, and gives
    it back when the answer was read whole. The whole exchange is within `timeout` (TimeoutError);
    other errors are those of `post_json`. Where the environment routes the server through a proxy,
    each request goes through urllib (`post_json`) in a daemon thread. At most MAX_CONNECTIONS
    requests are under way at once (and as many connections kept). For one event loop."""

    MAX_CONNECTIONS = 8

    def __init__(self, root_url: str, timeout: float, api_key: str | None) -> None:
        self.given_url, self.timeout, self.api_key = root_url, timeout, api_key
        self.root_url, headers = request_parts(root_url, api_key)
        parts = urllib.parse.urlsplit(self.root_url)
        self.secure, self.prefix = parts.scheme == "https", parts.path.rstrip("/")
        self.hostname, self.port = parts.hostname or "localhost", parts.port or (443 if self.secure else 80)
        # identity: an answer is read as it comes (http.client and urllib ask for no compression either)
        self.headers = [("Host", parts.netloc), *headers.items(), ("Accept-Encoding", "identity")]
        self.proxied = parts.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(self.hostname)
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(self.MAX_CONNECTIONS)
        self._tls: ssl.SSLContext | None = None  # made for the first https connection

    async def post_json(self, path: str, body: dict) -> dict:
        if self.proxied:
            return await in_daemon_thread(self.timeout, post_json, self.given_url + path, body, self.timeout,
                                          self.api_key)
        payload = json.dumps(body).encode()
        try:
            async with asyncio.timeout(self.timeout), self._slots:
                status, reason, headers, data = await self._answer(path, payload)
        except TimeoutError as exc:
            raise TimeoutError(f"no answer to {path} within {self.timeout:g}s") from exc
        if status >= 400:
            message = email.message.Message()
            for name, value in headers:
                message[name.decode("latin-1")] = value.decode("latin-1")
            raise urllib.error.HTTPError(self.root_url + path, status, reason, message, io.BytesIO(data))
        return json_answer(data, path)

    async def _answer(self, path: str, payload: bytes) -> tuple[int, str, list[tuple[bytes, bytes]], bytes]:
        while self._idle:  # one the server closed while it sat idle: the next, or a new one
            try:
                return await self._exchange(self._idle.pop(), path, payload)
            except (_Stale, ConnectionResetError, BrokenPipeError):
                continue
        if self.secure and self._tls is None:  # loading the CA store reads files: not on the loop
            self._tls = await in_daemon_thread(None, ssl.create_default_context)
        streams = await asyncio.open_connection(self.hostname, self.port, ssl=self._tls)
        try:
            return await self._exchange(_Connection(*streams), path, payload)
        except _Stale as exc:  # a new connection closed before it answered
            raise ConnectionResetError(f"the server closed the connection before answering {path}") from exc

    async def _exchange(self, connection: _Connection, path: str,
                        payload: bytes) -> tuple[int, str, list[tuple[bytes, bytes]], bytes]:
        """Send one request and read the whole answer; the connection is kept for the next request, or
        closed if anything went wrong or the server will close it."""
        protocol = connection.protocol
        try:
            if protocol.our_state is h11.DONE:
                protocol.start_next_cycle()
            headers = [*self.headers, ("Content-Length", str(len(payload)))]
            request = protocol.send(h11.Request(method="POST", target=self.prefix + path, headers=headers))
        except h11.LocalProtocolError:  # a header this side cannot send (h11's message would quote the key)
            connection.close()
            raise ValueError(f"the request to {path} cannot be sent: a header (the API key, the URL) "
                             "holds characters HTTP does not allow") from None
        try:
            connection.writer.write(request + protocol.send(h11.Data(data=payload)) + protocol.send(h11.EndOfMessage()))
            response, pieces, size, received = None, [], 0, False
            while True:
                event = protocol.next_event()
                if event is h11.NEED_DATA:
                    data = await connection.reader.read(READ_BYTES)
                    if not data and not received:
                        raise _Stale()
                    received, connection.ended = True, not data
                    protocol.receive_data(data)
                elif isinstance(event, h11.Response):
                    response = event
                elif isinstance(event, h11.Data):
                    pieces.append(event.data)
                    size += len(event.data)
                    if size > MAX_SIDE_ANSWER_BYTES:
                        raise ValueError(f"the answer to {path} is longer than {MAX_SIDE_ANSWER_BYTES} bytes")
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionResetError(f"the server closed the connection while answering {path}")
        except h11.ProtocolError as exc:
            connection.close()
            raise ValueError(f"the answer to {path} is not HTTP: {exc}") from exc
        except BaseException:
            connection.close()
            raise
        if connection.reusable:
            self._idle.append(connection)
        else:
            connection.close()
        assert response is not None  # h11 gives a response before its end
        return response.status_code, response.reason.decode("latin-1"), list(response.headers), b"".join(pieces)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class _SideThreads:
    """Daemon threads for side requests, each kept for the next job once it is done (handing a job to
    a waiting thread costs a fraction of starting one); a new one starts when none is idle, so a job
    that hangs holds up no other."""

    MAX_IDLE = 16

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any], None]]]] = []
        self._lock = threading.Lock()
        self.running = 0  # jobs handed out and not finished (abandoned ones too)

    def run(self, job: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """Run `job` (which must not raise) in one of the threads, then `then(its result)` there, once
        the thread is idle again (so whoever `then` wakes finds it free for the next job)."""
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
            self.running += 1
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(jobs,), daemon=True, name="side-request").start()
        jobs.put((job, then))

    def _serve(self, jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any], None]]]) -> None:
        while True:
            job, then = jobs.get()
            result = job()
            with self._lock:
                self.running -= 1
                kept = len(self._idle) < self.MAX_IDLE
                if kept:
                    self._idle.append(jobs)
            then(result)
            if not kept:
                return


_SIDE_THREADS = _SideThreads()


def side_jobs_running() -> int:
    """How many `in_daemon_thread` jobs are still running, awaited or abandoned."""
    return _SIDE_THREADS.running


async def in_daemon_thread(timeout: float | None, function: Callable[..., Result], *args: Any) -> Result:
    """`function(*args)` (blocking: a side request, a tokenizer to load) in a daemon thread (`_SideThreads`),
    awaited at most `timeout` seconds (TimeoutError; None: no limit). Unlike `asyncio.to_thread`, nothing
    waits for the thread when the run ends or is interrupted: an abandoned request ends with its own
    socket timeout, in the background."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def work() -> tuple[Any, BaseException | None]:
        try:
            return function(*args), None
        except BaseException as exc:  # handed to the awaiting task
            return None, exc

    def hand_back(outcome: tuple[Any, BaseException | None]) -> None:
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    _SIDE_THREADS.run(work, hand_back)
    async with asyncio.timeout(timeout):
        return await future
