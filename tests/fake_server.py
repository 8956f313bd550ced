"""A real HTTP server on loopback that plays well-formed and broken OpenAI-style answers.

It exists to test the harness's own error handling (the behaviour of real vLLM is tested against
real vLLM). The scenario is the content of the request's last user message:

* `ok`: reasoning, then one tool call arriving whole (stream) / the same message (non-stream);
* `ok-incremental`: the same call with its arguments streamed in fragments;
* `truncated`: the stream stops in the middle of an event and the connection closes;
* `garbage`: a `data:` line that is not JSON (non-stream: a body that is not JSON);
* `missing-index`: a tool-call delta without `index`;
* `error-midway`: a few chunks, then an error object with code 500 inside the stream;
* `http-500`: HTTP 500 before anything is sent (`http-NNN`: HTTP NNN, the message `fake NNN`);
* `echo-auth`: HTTP 400 whose message echoes the request's Authorization header (a careless server);
* `token-ids`: the `ok` answer with `token_ids` (non-stream), for the forced-output verification,
  which /tokenize and /detokenize refuse here with HTTP 403;
* `stall`: the role chunk, then nothing for `stall_seconds`;
* `refuse`: HTTP 400 with a vLLM-style error body (param `tool_choice`);
* `no-done`: a complete stream without the final `data: [DONE]`;
* `plain`: just the content "It is sunny." and no tool call (a model that ignores the tools);
* `separators`: content with U+0085, U+2028 and U+2029 written unescaped, events ended by CRLF
  and every write cut between the CR and the LF.

A stream asked for several tokens per delta (`stream_interval` N > 1) arrives in N-chunk groups, each
group's deltas merged into one (the role chunk on its own, as vLLM sends the first token); a server made
with `splits_badly` then loses the call's first argument fragment when a group holds the call's name and
it (the speculative-decoding bug reported to vLLM), and so does not reassemble to its one-token stream.
Each merged chunk's choice names the tokens it carries (`token_ids`, one per merged chunk) as vLLM does
when asked `return_token_ids`. A server made with `merges_one_token_streams=K` sends its first K one-token
streams of `ok`/`ok-incremental` merged 3 chunks at a time all the same, as a busy vLLM groups what a slow
reader has not taken yet.

`requests` records every JSON body received, in order; `authorizations` the Authorization header of each.
As vLLM does, a server made with `api_key` answers 401 `{"error": "Unauthorized"}` to a POST under /v1
without that bearer key, one made with `models` answers 404 "The model `x` does not exist." for any
other model, and POST /v1/responses is 404 `{"detail": "Not Found"}` (no Responses API here).

An OPTIONS request is answered as a CORS preflight: `ALLOWED_ORIGIN` gets 200 with
Access-Control-Allow-Origin, any other origin 400 "Disallowed CORS origin" without it (vLLM's
default). `preflights` records each preflight's (path, headers).

GET /health answers 200, GET /v1/models lists `fake`, and GET /about answers
`{"release": $FAKE_SERVER_RELEASE}` (a version route of another shape than vLLM's /version).
Run as a script (`python tests/fake_server.py --port N [--host H]`) it serves until killed, as a
launched server does; with `--fail TEXT` it writes a log with the error line `FATAL: TEXT` and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ALLOWED_ORIGIN = "http://allowed.example"
ARGUMENTS = '{"city": "Paris"}'
REASONING = "\nplan\n"
REFUSAL = {
    "error": {
        "message": "response_template parsing cannot guarantee required tool choice without a format-compatible "
        "structural grammar (parameter=tool_choice)",
        "type": "BadRequestError",
        "param": "tool_choice",
        "code": 400,
    }
}


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def whole_call(index: int = 0, arguments: str = ARGUMENTS) -> dict[str, Any]:
    return {"index": index, "id": f"chatcmpl-tool-{index:016x}", "type": "function",
            "function": {"name": "get_weather", "arguments": arguments}}


def good_stream(incremental: bool = False) -> list[dict[str, Any]]:
    if incremental:
        head = {**whole_call(), "function": {"name": "get_weather"}}
        calls = [head] + [{"index": 0, "function": {"arguments": piece}} for piece in ('{"city": ', '"Paris"}')]
    else:
        calls = [whole_call()]
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning": REASONING}),
        *(chunk({"tool_calls": [call]}) for call in calls),
        chunk({}, "tool_calls"),
    ]


PLAIN = "It is sunny."
PAUSE = 0.02  # seconds
SEPARATED = "a\x85b\u2028c\u2029d"  # line breaks to str.splitlines, ordinary characters to JSON and SSE


def plain_stream(content: str = PLAIN) -> list[dict[str, Any]]:
    return [chunk({"role": "assistant", "content": ""}), chunk({"content": content}), chunk({}, "stop")]


def plain_response(content: str = PLAIN) -> dict[str, Any]:
    message = {"role": "assistant", "content": content, "reasoning": None}
    return {**good_response(), "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def good_response() -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": None, "reasoning": REASONING,
                        "tool_calls": [{k: v for k, v in whole_call().items() if k != "index"}]},
            "finish_reason": "tool_calls",
        }],
    }  # fmt: skip


class FakeServer:
    def __init__(self, stall_seconds: float = 5.0, api_key: str | None = None,
                 models: frozenset[str] | None = None, host: str = "127.0.0.1", port: int = 0,
                 splits_badly: bool = False, merges_one_token_streams: int = 0) -> None:
        self.stall_seconds, self.api_key, self.models = stall_seconds, api_key, models
        self.splits_badly = splits_badly
        self.merges_left = merges_one_token_streams
        self._merges_lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.preflights: list[tuple[str, dict[str, str]]] = []
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/version":
                    self._json(200, {"version": "fake-1.0"})
                elif self.path == "/health":
                    self._raw(200, b"", "text/plain")
                elif self.path == "/about":
                    self._json(200, {"release": os.environ.get("FAKE_SERVER_RELEASE")})
                elif self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_OPTIONS(self) -> None:
                server.preflights.append((self.path, {name.lower(): value for name, value in self.headers.items()}))
                allowed = self.headers.get("Origin") == ALLOWED_ORIGIN
                data = b"OK" if allowed else b"Disallowed CORS origin"
                self.send_response(200 if allowed else 400)
                self.send_header("Vary", "Origin")
                self.send_header("Access-Control-Max-Age", "600")
                if allowed:
                    self.send_header("Access-Control-Allow-Origin", ALLOWED_ORIGIN)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append(body)
                server.authorizations.append(self.headers.get("Authorization"))
                if server.api_key is not None and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._json(401, {"error": "Unauthorized"})
                if server.models is not None and body.get("model") not in server.models:
                    return self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                                      "type": "NotFoundError", "param": "model", "code": 404}})
                if self.path in ("/tokenize", "/detokenize"):
                    return self._json(403, {"error": {"message": "tokenizer endpoints are off", "code": 403}})
                if self.path.endswith("/responses"):
                    return self._json(404, {"detail": "Not Found"})
                scenario = body["messages"][-1]["content"]
                if scenario == "http-500":
                    return self._json(500, {"error": {"message": "boom", "code": 500}})
                if scenario.startswith("http-"):
                    status = int(scenario.removeprefix("http-"))
                    return self._json(status, {"error": {"message": f"fake {status}", "code": status}})
                if scenario == "echo-auth":
                    return self._json(400, {"error": {"message": f"bad key {self.headers.get('Authorization')}"}})
                if scenario == "refuse":
                    return self._json(400, REFUSAL)
                if not body.get("stream"):
                    if scenario == "garbage":
                        return self._raw(200, b"{not json", "application/json")
                    if scenario in ("plain", "separators"):
                        return self._json(200, plain_response(SEPARATED if scenario == "separators" else PLAIN))
                    if scenario == "token-ids":
                        answer = good_response()
                        answer["choices"][0]["token_ids"] = [1, 2]
                        return self._json(200, answer)
                    return self._json(200, good_response())
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                interval = body.get("stream_interval") or 1
                if interval == 1 and scenario in ("ok", "ok-incremental"):
                    with server._merges_lock:
                        if server.merges_left > 0:
                            server.merges_left -= 1
                            interval = 3
                lines = (server._stream_lines(scenario) if interval == 1 or scenario not in ("ok", "ok-incremental")
                         else server._grouped_lines(scenario, interval))
                for line in lines:
                    if line is None or isinstance(line, float):
                        time.sleep(server.stall_seconds if line is None else line)
                        continue
                    try:
                        self.wfile.write(line)
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        return

            def _json(self, status: int, payload: Any) -> None:
                self._raw(status, json.dumps(payload).encode(), "application/json")

            def _raw(self, status: int, data: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    @staticmethod
    def _event(payload: Any) -> bytes:
        return b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"

    def _grouped_lines(self, scenario: str, interval: int) -> Iterator[bytes]:
        """The `ok` stream at `interval` chunks per delta (see the module docstring)."""
        first, *rest = good_stream(incremental=scenario == "ok-incremental")
        yield self._event(first)
        for start in range(0, len(rest), interval):
            group = rest[start:start + interval]
            calls = [call for c in group for call in c["choices"][0]["delta"].get("tool_calls", [])]
            if self.splits_badly and len(calls) > 1 and "name" in calls[0]["function"]:
                del calls[1]
            delta: dict[str, Any] = {}
            for c in group:
                for key, value in c["choices"][0]["delta"].items():
                    if key != "tool_calls":
                        delta[key] = delta.get(key, "") + value
            if calls:
                delta["tool_calls"] = calls
            merged = chunk(delta, group[-1]["choices"][0]["finish_reason"])
            merged["choices"][0]["token_ids"] = list(range(len(group)))
            yield self._event(merged)
        yield b"data: [DONE]\n\n"

    def _stream_lines(self, scenario: str) -> Iterator[bytes | float | None]:
        """The bytes to send, in order; None means: stall; a number: pause that many seconds."""
        chunks = good_stream(incremental=scenario == "ok-incremental")
        done = b"data: [DONE]\n\n"
        if scenario == "plain":
            yield from (self._event(c) for c in plain_stream())
            yield done
        elif scenario == "separators":
            for event in plain_stream(SEPARATED):
                yield b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\r\n\r"
                yield PAUSE  # so that the LF arrives in a read of its own
                yield b"\n"
            yield b"data: [DONE]\r\n\r"
            yield PAUSE
            yield b"\n"
        elif scenario in ("ok", "ok-incremental", "token-ids"):
            yield from (self._event(c) for c in chunks)
            yield done
        elif scenario == "no-done":
            yield from (self._event(c) for c in chunks)
        elif scenario == "truncated":
            yield self._event(chunks[0])
            yield b"data: " + json.dumps(chunks[1]).encode()[:20]
        elif scenario == "garbage":
            yield self._event(chunks[0])
            yield self._event(b"{this is not json")
            yield from (self._event(c) for c in chunks[1:])
            yield done
        elif scenario == "missing-index":
            call = {k: v for k, v in whole_call().items() if k != "index"}
            yield from (self._event(c) for c in (chunks[0], chunk({"tool_calls": [call]}), chunks[-1]))
            yield done
        elif scenario == "error-midway":
            yield from (self._event(c) for c in chunks[:2])
            yield self._event({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}})
            yield done
        elif scenario == "stall":
            yield self._event(chunks[0])
            yield None
            yield from (self._event(c) for c in chunks[1:])
            yield done
        else:
            raise ValueError(f"unknown scenario {scenario!r}")

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextmanager
def fake_server(stall_seconds: float = 5.0, **options: Any) -> Iterator[FakeServer]:
    server = FakeServer(stall_seconds, **options)
    thread = threading.Thread(target=server._httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.close()
        thread.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description="the fake server as a launched process")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fail", metavar="TEXT", help="log `FATAL: TEXT` and exit 1 instead of serving")
    args, _ = parser.parse_known_args()  # a launcher's other flags are ignored
    print(f"fake server starting on {args.host}:{args.port}", flush=True)
    if args.fail:
        print(f"FATAL: {args.fail}\nshutting down", flush=True)
        sys.exit(1)
    FakeServer(host=args.host, port=args.port)._httpd.serve_forever()


if __name__ == "__main__":
    main()
