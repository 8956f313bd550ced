"""A real HTTP server on loopback that answers like the Hugging Face Hub's file endpoints.

It implements what huggingface_hub 2.4's `hf_hub_download` / `get_hf_file_metadata` ask for:
`HEAD` and `GET /{repo_id}/resolve/{revision}/{filename}` with `ETag` (git blob SHA-1), `X-Repo-Commit`,
`Content-Length`, `Range` resumption (206), the Hub's `X-Error-Code` headers for missing repos, revisions
and files, and a same-host redirect for a renamed repo. Per repo it can also play failures: 401, gated 403,
500, a slow answer, a truncated body. Every request is logged (method, path, whether auth was sent).

Point huggingface_hub at it with `HF_ENDPOINT=server.url`.
"""

from __future__ import annotations

import gzip
import hashlib
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

# Behaviours a repo can have (HubRepo.mode).
NORMAL, UNAUTHORIZED, GATED, SERVER_ERROR, SLOW = "normal", "unauthorized", "gated", "server_error", "slow"
TRUNCATED_ONCE, TRUNCATED = "truncated_once", "truncated"  # first GET cut short / every GET without body
PRIVATE = "private"  # answers only with `Authorization: Bearer <token>`
# Hostile answers to GET (HEAD is normal); each stops by itself within HOSTILE_LIMIT_S, or when the server stops.
OVERSIZE = "oversize"  # the body goes on past the announced size, without Content-Length (up to 64 MB)
TRICKLE = "trickle"  # one byte of the body every `delay_s`
STALL = "stall"  # the headers, then nothing
GZIP_BOMB = "gzip_bomb"  # Content-Encoding: gzip whatever was asked, 200 KB that inflate to 200 MB
HOSTILE_LIMIT_S = 30.0


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fake_commit(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


@dataclass
class HubRepo:
    files: dict[str, bytes]
    commit: str
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> commit ("main" is added)
    mode: str = NORMAL
    token: str | None = None  # for PRIVATE
    delay_s: float = 0.0  # for SLOW


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    path: str
    authorized: bool
    range: str | None


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that gave up (timeout test) closes its socket mid-answer: expected, not worth a traceback."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class HubServer:
    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.renamed: dict[str, str] = {}  # old repo id -> new repo id (answered with a 307)
        self.log: list[LoggedRequest] = []
        self._truncated_once: set[str] = set()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="hub-server")

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add_repo(self, repo_id: str, files: dict[str, bytes | str], **options) -> HubRepo:
        encoded = {name: data.encode() if isinstance(data, str) else data for name, data in files.items()}
        commit = options.pop("commit", None) or fake_commit(repo_id, *sorted(encoded))
        repo = HubRepo(files=encoded, commit=commit, **options)
        repo.refs.setdefault("main", commit)
        self.repos[repo_id] = repo
        return repo

    def requests_for(self, repo_id: str) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if r.path.startswith(f"/{repo_id}/")]

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean; the hub keeps its own log
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _send(self, status: int, headers: dict[str, str], payload: bytes = b"") -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if payload and self.command == "GET":
                    self.wfile.write(payload)

            def _error(self, status: int, code: str | None, message: str, commit: str | None = None) -> None:
                headers = {"X-Error-Message": message, "Content-Type": "application/json"}
                if code:
                    headers["X-Error-Code"] = code
                if commit:
                    headers["X-Repo-Commit"] = commit
                self._send(status, headers, b'{"error": "%s"}' % message.encode())

            def _answer(self, body: bool) -> None:
                authorization = self.headers.get("Authorization")
                with hub._lock:
                    hub.log.append(LoggedRequest(self.command, self.path, authorization is not None, self.headers.get("Range")))
                parts = unquote(self.path.split("?", 1)[0]).lstrip("/").split("/", 4)
                if len(parts) != 5 or parts[2] != "resolve":
                    return self._error(404, None, "Not Found")
                repo_id, revision, filename = f"{parts[0]}/{parts[1]}", parts[3], parts[4]
                if repo_id in hub.renamed:
                    location = f"/{hub.renamed[repo_id]}/resolve/{parts[3]}/{parts[4]}"
                    return self._send(307, {"Location": location})
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self._error(404, "RepoNotFound", "Repository not found")
                if repo.mode == SLOW:
                    time.sleep(repo.delay_s)
                if repo.mode == UNAUTHORIZED or (repo.mode == PRIVATE and authorization != f"Bearer {repo.token}"):
                    return self._error(401, "RepoNotFound", "Invalid username or password.")
                if repo.mode == GATED:
                    return self._error(403, "GatedRepo", "Access to this model is restricted.")
                if repo.mode == SERVER_ERROR:
                    return self._error(500, None, "Internal Error")
                commit = revision if revision == repo.commit else repo.refs.get(revision)
                if commit is None:
                    return self._error(404, "RevisionNotFound", "Invalid rev id")
                if filename not in repo.files:
                    return self._error(404, "EntryNotFound", "Entry not found", commit)
                self._serve_file(repo, repo_id, filename, commit, body)

            def _serve_file(self, repo: HubRepo, repo_id: str, filename: str, commit: str, body: bool) -> None:
                data = repo.files[filename]
                headers = {"ETag": f'"{git_blob_sha1(data)}"', "X-Repo-Commit": commit,
                           "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
                start = 0
                if body and (requested := self.headers.get("Range", "")).startswith("bytes="):
                    start = int(requested[len("bytes="):].split("-", 1)[0] or 0)
                if not body:
                    return self._send(200, {**headers, "Content-Length": str(len(data))})
                status = 206 if start else 200
                if start:
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                payload = data[start:]
                if repo.mode == GZIP_BOMB:
                    bomb = gzip.compress(payload + b" " * (200 * 1024 * 1024), compresslevel=9)
                    return self._send(status, {**headers, "Content-Encoding": "gzip",
                                               "Content-Length": str(len(bomb))}, bomb)
                if repo.mode in (OVERSIZE, TRICKLE, STALL):
                    return self._hostile(repo, status, headers, payload)
                key = f"{repo_id}/{filename}"
                with hub._lock:  # concurrent first GETs: exactly one of them is cut
                    cut_now = repo.mode == TRUNCATED or (repo.mode == TRUNCATED_ONCE and key not in hub._truncated_once)
                    hub._truncated_once.add(key)
                if cut_now:
                    cut = 0 if repo.mode == TRUNCATED else len(payload) // 2
                    self.send_response(status)
                    for name, value in {**headers, "Content-Length": str(len(payload)), "Connection": "close"}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self._send(status, {**headers, "Content-Length": str(len(payload))}, payload)

            def _hostile(self, repo: HubRepo, status: int, headers: dict[str, str], payload: bytes) -> None:
                self.send_response(status)
                for name, value in {**headers, "Connection": "close"}.items():
                    self.send_header(name, value)
                if repo.mode != OVERSIZE:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.close_connection = True
                ends = time.monotonic() + HOSTILE_LIMIT_S
                try:
                    if repo.mode == OVERSIZE:
                        block = b" " * 65536
                        self.wfile.write(payload)
                        for _ in range(1024):
                            if hub._stopped.is_set() or time.monotonic() > ends:
                                return
                            self.wfile.write(block)
                    elif repo.mode == TRICKLE:
                        for index in range(len(payload)):
                            self.wfile.write(payload[index:index + 1])
                            self.wfile.flush()
                            if hub._stopped.wait(repo.delay_s) or time.monotonic() > ends:
                                return
                    else:
                        hub._stopped.wait(HOSTILE_LIMIT_S)
                except (BrokenPipeError, ConnectionResetError):
                    return

        return Handler
