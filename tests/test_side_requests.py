"""Side requests: the kept-alive JSON client on the run's event loop, bounded in time and size, and
the daemon threads for blocking work."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.error
from collections.abc import Callable, Iterator

import pytest

from conformance.servers.forcing import ServerRefused
from conformance.util import side_requests
from conformance.util.side_requests import KeptAliveJson, in_daemon_thread


@pytest.fixture
def raw_server() -> Iterator[Callable[[list[bytes]], str]]:
    """A TCP server on loopback that answers each connection's requests with the next of the given
    raw byte strings (b"" closes the connection without a word; None hangs; a 1-tuple is sent, then
    the connection closed); returns its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    answers: list[bytes | tuple[bytes] | None] = []
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    def answer(connection: socket.socket) -> None:
        with connection:
            while answers:
                if not connection.recv(65536):
                    return
                reply = answers.pop(0)
                if reply is None:
                    threading.Event().wait(5)
                    return
                if not reply:
                    return
                connection.sendall(reply[0] if isinstance(reply, tuple) else reply)
                if isinstance(reply, tuple):
                    return

    threading.Thread(target=serve, daemon=True).start()

    def start(replies: list[bytes | tuple[bytes] | None]) -> str:
        answers[:] = replies
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    start.accepted = accepted  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        listener.close()


def _answer(body: bytes, status: str = "200 OK", *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _post(url: str, *paths: str, timeout: float = 5) -> list:
    async def main() -> list:
        client = KeptAliveJson(url, timeout, "sk-secret")
        try:
            return [await client.post_json(path, {"x": 1}) for path in paths]
        finally:
            client.close()

    return asyncio.run(main())


def test_answers_come_over_one_kept_alive_connection_chunked_or_not(raw_server) -> None:
    chunked = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n4\r\n: 2}\r\n0\r\n\r\n'
    url = raw_server([_answer(b'{"a": 1}'), chunked])
    assert _post(url, "/tokenize", "/detokenize") == [{"a": 1}, {"a": 2}]
    assert len(raw_server.accepted) == 1


def test_an_error_status_keeps_its_code_and_body_and_a_closing_server_gets_a_new_connection(raw_server) -> None:
    url = raw_server([_answer(b'{"detail": "no"}', "404 Not Found", "Connection: close"), _answer(b"[1]")])
    with pytest.raises(urllib.error.HTTPError) as raised:
        _post(url, "/tokenize")
    assert raised.value.code == 404 and raised.value.read() == b'{"detail": "no"}'
    assert _post(url, "/tokenize") == [[1]] and len(raw_server.accepted) == 2


def test_an_idle_connection_the_server_dropped_is_replaced(raw_server) -> None:
    url = raw_server([_answer(b"1"), b"", _answer(b"2")])  # the second request finds the first connection gone
    assert _post(url, "/a", "/b") == [1, 2] and len(raw_server.accepted) == 2


@pytest.mark.parametrize(("reply", "message"), [
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "the answer to /tokenize is not HTTP"),
    (_answer(b"<html>nope</html>"), "the answer to /tokenize is not JSON: '<html>nope</html>'"),
    (_answer(b"[" + b"1," * 40 + b"1]"), "the answer to /tokenize is longer than 64 bytes"),
], ids=["not-http", "not-json", "too-long"])
def test_an_answer_that_cannot_be_read_is_a_value_error_naming_the_path(
        raw_server, monkeypatch: pytest.MonkeyPatch, reply: bytes, message: str) -> None:
    monkeypatch.setattr(side_requests, "MAX_SIDE_ANSWER_BYTES", 64)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("?", r"\?")):
        _post(raw_server([reply]), "/tokenize")


def test_a_server_that_closes_a_new_connection_before_answering_is_a_connection_error(raw_server) -> None:
    with pytest.raises(ConnectionResetError, match="closed the connection before answering /tokenize"):
        _post(raw_server([b""]), "/tokenize")


def test_an_answer_ended_by_closing_the_connection_is_read_and_the_connection_not_reused(raw_server) -> None:
    close_delimited = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[1]"
    url = raw_server([(close_delimited,), _answer(b"[2]")])
    assert _post(url, "/a", "/b") == [[1], [2]] and len(raw_server.accepted) == 2


def test_a_timeout_names_the_path_and_its_limit(raw_server) -> None:
    with pytest.raises(TimeoutError, match=r"no answer to /tokenize within 0\.2s"):
        _post(raw_server([None]), "/tokenize", timeout=0.2)


def test_an_api_key_http_cannot_carry_is_refused_without_being_quoted() -> None:
    async def main() -> None:
        await KeptAliveJson("http://127.0.0.1:9", 1, "sk-secret\nX: y").post_json("/tokenize", {})

    with pytest.raises(ValueError, match="holds characters HTTP does not allow") as raised:
        with socket.create_server(("127.0.0.1", 0)) as listener:  # somewhere to connect to
            client = KeptAliveJson(f"http://127.0.0.1:{listener.getsockname()[1]}", 1, "sk-secret\nX: y")
            asyncio.run(client.post_json("/tokenize", {}))
    assert "sk-secret" not in str(raised.value) and raised.value.__cause__ is None


def test_at_most_max_connections_requests_are_under_way_at_once(raw_server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KeptAliveJson, "MAX_CONNECTIONS", 2)
    url = raw_server([_answer(b"1")] * 6)

    async def main() -> list:
        client = KeptAliveJson(url, 5, None)
        try:
            return list(await asyncio.gather(*(client.post_json(f"/{n}", {}) for n in range(6))))
        finally:
            client.close()

    assert asyncio.run(main()) == [1] * 6 and len(raw_server.accepted) == 2


def test_the_api_key_goes_as_a_bearer_token_and_the_url_prefix_is_kept() -> None:
    client = KeptAliveJson("http://user:pw@127.0.0.1:9/prefix/", 1, "sk-secret")
    assert ("Authorization", "Basic dXNlcjpwdw==") in client.headers and client.prefix == "/prefix"
    assert ("Host", "127.0.0.1:9") in client.headers
    assert ("Authorization", "Bearer sk-secret") in KeptAliveJson("http://127.0.0.1:9", 1, "sk-secret").headers


def test_side_requests_reuse_an_idle_thread_and_a_hung_one_holds_up_no_other() -> None:
    release = threading.Event()

    async def main() -> tuple[list[int], int, int]:
        first = [await in_daemon_thread(5, threading.get_ident) for _ in range(3)]
        hung = asyncio.ensure_future(in_daemon_thread(5, lambda: release.wait(5) and threading.get_ident()))
        await asyncio.sleep(0.05)
        beside = await in_daemon_thread(5, threading.get_ident)  # runs while the other one hangs
        release.set()
        return first, beside, await hung

    first, beside, hung = asyncio.run(main())
    assert len(set(first)) == 1 and first[0] != threading.get_ident()  # one thread, kept, not this one
    assert hung == first[0] and beside != hung


def test_a_side_request_past_its_timeout_is_abandoned_and_its_error_reaches_the_caller() -> None:
    def refuse() -> None:
        raise ServerRefused("no")

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await in_daemon_thread(0.05, lambda: threading.Event().wait(1))
        with pytest.raises(ServerRefused, match="no"):
            await in_daemon_thread(5, refuse)

    asyncio.run(main())
