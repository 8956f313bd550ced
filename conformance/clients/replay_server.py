"""A loopback HTTP server that answers with a recorded answer as the server sent it, so a real
client's own HTTP and SSE code reads it.

Each recorded answer is registered under a path prefix of its own (`/r/<n>/v1`): any request under
that prefix (POST /chat/completions, whatever its body) gets the transcript's status and body. A stream
is sent as the recorded `data:` lines, each `data: <line>` and a blank line, one HTTP chunk each, with
`content-type: text/event-stream`; a non-streaming answer as its JSON with `application/json`; a
refusal as its status and error body. A transcript keeps those two bodies parsed: they are written
back as UTF-8 JSON, a lone surrogate (which the server can only have sent as an escape) as its
`\\ud800` escape. The request bodies a client sends are kept (`requests`), which is also how the
request side captures what a client really sends. A slot may answer its first request with one answer
and every later one with another (`register(answer, then=...)`: turn 1 of a tool loop, then turn 2).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conformance.record.case_model import is_stream
from conformance.record.transcript import Transcript
from conformance.util.json_codec import json_text, parse_json

MAX_REQUEST_BYTES = 8 * 1024 * 1024  # a client's request body is read up to this size


@dataclass(frozen=True)
class Answer:
    """What to send back: a status, a content type and the body's pieces (one HTTP chunk each)."""

    status: int
    content_type: str
    pieces: tuple[bytes, ...]


def answer_of(transcript: Transcript) -> Answer | None:
    """The recorded answer of a transcript; None when none was recorded (not sent, no answer)."""
    if transcript.status is None:
        return None
    if not 200 <= transcript.status < 300:
        return Answer(transcript.status, "application/json", (body_bytes(transcript.error_body),))
    if is_stream(transcript.mode):
        pieces = tuple(f"data: {line.data}\n\n".encode("utf-8", "surrogatepass") for line in transcript.sse)
        return Answer(transcript.status, "text/event-stream; charset=utf-8", pieces)
    return Answer(transcript.status, "application/json", (body_bytes(transcript.response),))


def body_bytes(body: Any) -> bytes:
    """A recorded body (parsed JSON, or text) as UTF-8 JSON, each lone surrogate as its `\\uXXXX` escape."""
    text = body if isinstance(body, str) else json_text(body)
    return text.encode("utf-8", "backslashreplace")  # only a surrogate fails UTF-8: it becomes `\\ud800`


@dataclass
class _Slot:
    answer: Answer
    then: Answer | None = None  # the answer to every request after the first (None: `answer` again)
    requests: list[Any] = field(default_factory=list)  # every JSON body received under this prefix


class ReplayServer:
    """Serves registered answers on 127.0.0.1 from a background thread (use `running()`)."""

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]

    def register(self, answer: Answer, then: Answer | None = None) -> int:
        """A slot for `answer` (and `then` for the requests after its first); its base URL is `base_url(slot)`."""
        with self._lock:
            self._slots.append(_Slot(answer, then))
            return len(self._slots) - 1

    def base_url(self, slot: int) -> str:
        return f"http://127.0.0.1:{self.port}/r/{slot}/v1"

    def requests(self, slot: int) -> list[Any]:
        """The request bodies received for `slot`, in order (JSON values; text if not JSON)."""
        return list(self._slots[slot].requests)

    def _slot(self, path: str) -> _Slot | None:
        parts = path.split("/")
        if len(parts) < 3 or parts[1] != "r" or not parts[2].isdigit():
            return None
        index = int(parts[2])
        return self._slots[index] if index < len(self._slots) else None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its connection (a keep-alive one it closes, a stream it stops reading)
        is not an error of the replay."""


@contextmanager
def running() -> Iterator[ReplayServer]:
    """A started replay server, shut down on exit."""
    server = ReplayServer()
    thread = threading.Thread(target=server._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._httpd.shutdown()
        server._httpd.server_close()
        thread.join(timeout=5)


def _handler_for(server: ReplayServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = min(int(self.headers.get("content-length") or 0), MAX_REQUEST_BYTES)
            raw = self.rfile.read(length) if length else b""
            slot = server._slot(self.path)
            if slot is None:
                self._send(Answer(404, "application/json", (b'{"error": {"message": "no recording here"}}',)))
                return
            try:
                body = parse_json(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            with server._lock:
                slot.requests.append(body)
                answer = slot.answer if len(slot.requests) == 1 or slot.then is None else slot.then
            self._send(answer)

        def do_GET(self) -> None:
            self._send(Answer(404, "application/json", (b'{"error": {"message": "no such route"}}',)))

        def _send(self, answer: Answer) -> None:
            self.send_response(answer.status)
            self.send_header("content-type", answer.content_type)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for piece in answer.pieces:
                if piece:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
