"""A loopback HTTP server whose answers are scripts: per (method, path), a function of the request body
returning a `Reply` (status, headers, and the body as pieces: bytes to send, or pauses in seconds).

It exists to play hostile servers (trickles, stalls, huge lines, malformed JSON) to the harness. Every
pause is cut short when the server stops, and no pause exceeds `max_pause_s`, so nothing it plays can
outlive the test that started it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    pieces: Iterable[bytes | float] = ()  # bytes: written and flushed; a number: a pause in seconds


def json_reply(payload: Any, status: int = 200) -> Reply:
    data = json.dumps(payload).encode()
    return Reply(status, {"Content-Type": "application/json", "Content-Length": str(len(data))}, [data])


def trickle(data: bytes, every_s: float) -> Iterator[bytes | float]:
    """`data` one byte at a time, `every_s` apart."""
    for index in range(len(data)):
        yield data[index:index + 1]
        yield every_s


Script = Callable[[dict[str, Any]], Reply]


class ScriptedServer:
    def __init__(self, routes: dict[tuple[str, str], Script], max_pause_s: float = 30.0) -> None:
        self.routes = routes
        self.max_pause_s = max_pause_s
        self.hits: list[tuple[str, str]] = []
        self.stopped = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self.root_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self.base_url = self.root_url + "/v1"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # a body without Content-Length ends when the connection closes

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._play({})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                self._play(body if isinstance(body, dict) else {})

            def _play(self, body: dict[str, Any]) -> None:
                path = self.path.split("?", 1)[0]
                server.hits.append((self.command, path))
                script = server.routes.get((self.command, path))
                reply = script(body) if script else json_reply({"error": {"message": "not found"}}, 404)
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    for piece in reply.pieces:
                        if isinstance(piece, bytes):
                            self.wfile.write(piece)
                            self.wfile.flush()
                        elif server.stopped.wait(min(piece, server.max_pause_s)):
                            return
                except (BrokenPipeError, ConnectionResetError):
                    return

        return Handler

    def close(self) -> None:
        self.stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()


@contextmanager
def scripted_server(routes: dict[tuple[str, str], Script], max_pause_s: float = 30.0) -> Iterator[ScriptedServer]:
    server = ScriptedServer(routes, max_pause_s)
    thread = threading.Thread(target=server._httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.close()
        thread.join(timeout=5)
