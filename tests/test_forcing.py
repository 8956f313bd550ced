"""Forcing exact raw outputs: the regex, the token-id checks, and the reasons a server cannot force."""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.servers.forcing import (
    ForcingUnsupported,
    ServerRefused,
    ServerTokenizer,
    exact_regex,
    forced_text,
    forcing_extra_body,
    probe_forcing,
    token_ids_of,
    token_ids_of_stream,
    verify_forced_output,
)
from tests.server_helpers import chat, chat_stream

# -- fast tier ------------------------------------------------------------------------------------


@given(st.text(alphabet=st.characters(blacklist_characters="\x00")))
def test_the_regex_matches_exactly_the_raw_text(raw_text: str) -> None:
    pattern = re.compile(exact_regex(raw_text), re.DOTALL)
    assert pattern.fullmatch(raw_text)
    assert not pattern.fullmatch(raw_text + "x")
    assert not raw_text or not pattern.fullmatch(raw_text[:-1])


@given(st.text(alphabet=st.characters(blacklist_characters="\x00")))
def test_the_forced_text_is_read_back_from_its_regex(raw_text: str) -> None:
    assert forced_text(exact_regex(raw_text)) == raw_text


def test_a_nul_character_cannot_be_forced() -> None:
    with pytest.raises(ValueError, match="NUL"):
        forcing_extra_body("a\x00b")


def test_extra_body_asks_for_the_regex_and_the_token_ids() -> None:
    body = forcing_extra_body("<think>\n</think> a.b")
    assert body == {"structured_outputs": {"regex": r"<think>\n</think> a\.b"}, "return_token_ids": True}


def test_token_ids_are_collected_from_responses_and_streams() -> None:
    assert token_ids_of({"choices": [{"index": 0, "token_ids": [1, 2]}]}) == [1, 2]
    assert token_ids_of({"choices": [{"index": 0, "message": {}}]}) is None
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant"}, "token_ids": []}]},
        {"choices": [{"index": 0, "delta": {"content": "a"}, "token_ids": [5, 6]}]},
        {"choices": [{"index": 1, "delta": {"content": "b"}, "token_ids": [9]}]},
        {"choices": [], "usage": {}},
        {"choices": [{"index": 0, "delta": {}, "token_ids": [7]}]},
    ]
    assert token_ids_of_stream(chunks) == [5, 6, 7]
    assert token_ids_of_stream(chunks, choice=1) == [9]
    assert token_ids_of_stream([{"choices": [{"index": 0, "delta": {"content": "a"}}]}]) is None


def test_no_token_ids_means_forcing_cannot_be_verified() -> None:
    with pytest.raises(ForcingUnsupported, match="no token_ids"):
        asyncio.run(verify_forced_output(ServerTokenizer("http://127.0.0.1:9", "m"), "text", None))


class FakeServer(http.server.BaseHTTPRequestHandler):
    """A server that is not vLLM: answers POSTs from the class-level `routes` (path -> (status, body))."""

    routes: dict[str, tuple[int, dict]] = {}
    hits: list[str] = []  # the paths asked for, in order

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.hits.append(self.path)
        status, body = self.routes.get(self.path, (404, {"detail": "Not Found"}))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def route_server() -> Iterator[tuple[str, dict, list[str]]]:
    routes: dict[str, tuple[int, dict]] = {}
    hits: list[str] = []
    handler = type("Handler", (FakeServer,), {"routes": routes, "hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", routes, hits
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_refusing_structured_outputs_cannot_force(route_server) -> None:
    url, routes, _ = route_server
    routes["/v1/chat/completions"] = (400, {"error": {"message": "Unrecognized request argument: structured_outputs"}})
    with pytest.raises(ForcingUnsupported, match="HTTP 400.*Unrecognized request argument: structured_outputs"):
        asyncio.run(probe_forcing(url, "m"))


def test_a_server_without_token_ids_cannot_force(route_server) -> None:
    url, routes, _ = route_server
    routes["/v1/chat/completions"] = (200, {"choices": [{"index": 0, "message": {"content": "ok"}}]})
    with pytest.raises(ForcingUnsupported, match="no token_ids"):
        asyncio.run(probe_forcing(url, "m"))


def test_a_server_without_tokenizer_endpoints_cannot_verify(route_server) -> None:
    url, routes, _ = route_server
    routes["/v1/chat/completions"] = (200, {"choices": [{"index": 0, "token_ids": [1, 2]}]})
    with pytest.raises(ForcingUnsupported, match="no detokenize endpoint"):
        asyncio.run(probe_forcing(url, "m"))


# -- real vLLM ------------------------------------------------------------------------------------

METACHARACTERS = 'Tricky: a.b*c+?^$|\\ (x)[y]{z} - / # & ~ "q" \t tab, ü, 日本'


@pytest.mark.vllm
@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_regex_metacharacters_are_forced_verbatim(hf_server, stream: bool) -> None:
    request = {
        "model": hf_server.model,
        "messages": [{"role": "user", "content": "Say something."}],
        "temperature": 0,
        **forcing_extra_body(METACHARACTERS),
    }
    ids = token_ids_of_stream(chat_stream(hf_server, request)) if stream else token_ids_of(chat(hf_server, request))
    assert asyncio.run(verify_forced_output(ServerTokenizer(hf_server.root_url, hf_server.model), METACHARACTERS,
                                            ids)) == []


@pytest.mark.vllm
def test_a_marker_spelled_with_several_tokens_is_reported(hf_server) -> None:
    async def verify() -> list[str]:
        tokenizer = ServerTokenizer(hf_server.root_url, hf_server.model)
        spelled = [token for piece in ("ok", "</", "think", ">") for token in await tokenizer.tokenize(piece)]
        return await verify_forced_output(tokenizer, "ok</think>", spelled)

    problems = asyncio.run(verify())
    assert len(problems) == 1 and "'</think>'" in problems[0] and "emitted 0 time(s)" in problems[0]


@pytest.mark.vllm
def test_other_text_than_the_forced_one_is_reported(hf_server) -> None:
    async def verify() -> list[str]:
        tokenizer = ServerTokenizer(hf_server.root_url, hf_server.model)
        return await verify_forced_output(tokenizer, "Hello", await tokenizer.tokenize("Help"))

    problems = asyncio.run(verify())
    assert problems == ["the output is not the forced text: expected 'Hello', got 'Help'"]


@pytest.mark.vllm
def test_both_profiles_can_force(hf_server, legacy_server) -> None:
    for server in (hf_server, legacy_server):
        asyncio.run(probe_forcing(server.root_url, server.model))


def test_an_unhonoured_regex_is_reported_with_the_likely_cause(route_server) -> None:
    url, routes, _ = route_server
    routes["/v1/chat/completions"] = (200, {"choices": [{"index": 0, "token_ids": [1, 2]}]})
    routes["/detokenize"] = (200, {"prompt": "something else"})
    routes["/tokenize"] = (200, {"tokens": [7]})
    with pytest.raises(ForcingUnsupported, match=r"enable_in_reasoning.*expected .*, got 'something else'"):
        asyncio.run(probe_forcing(url, "m"))


@pytest.mark.vllm
def test_without_enable_in_reasoning_vllm_does_not_force_and_the_probe_says_so(tiny_checkpoint, tmp_path) -> None:
    from conformance.servers.launch import launch

    unconstrained_reasoning = ["--structured-outputs-config", json.dumps({"enable_in_reasoning": False})]
    with launch("hf", tiny_checkpoint, extra_args=unconstrained_reasoning, log_dir=tmp_path) as server:
        with pytest.raises(ForcingUnsupported, match="enable_in_reasoning.*the output is not the forced text"):
            asyncio.run(probe_forcing(server.root_url, server.model))


def test_the_tokenizer_asks_the_server_once_per_marker_and_once_per_answer(route_server) -> None:
    url, routes, hits = route_server
    routes["/detokenize"] = (200, {"prompt": "<think>x"})

    async def main() -> None:
        tokenizer = ServerTokenizer(url, "m")
        with pytest.raises(ForcingUnsupported, match="no tokenize endpoint"):  # nothing known: it must ask
            await verify_forced_output(tokenizer, "<think>x", [7, 8])
        routes["/tokenize"] = (200, {"tokens": [7]})
        hits.clear()
        for _ in range(3):  # the same answer three times (say, stream and non-stream of one case)
            assert await verify_forced_output(tokenizer, "<think>x", [7, 8]) == []
        assert hits == ["/tokenize"]  # the ids [7, 8] were decoded once, before
        assert await verify_forced_output(tokenizer, "<think>x", [6, 9]) == [
            "marker '<think>' occurs 1 time(s) in the text but its token 7 was emitted 0 time(s): the engine "
            "spelled it with other tokens"]
        assert hits == ["/tokenize", "/detokenize"]  # other ids are decoded; the marker is known
        tokenizer.close()

    asyncio.run(main())


def test_two_tasks_asking_the_same_question_at_once_make_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream and non-stream of a case are verified at the same time, with the same ids: the
    second waits for the first one's answer (or error) instead of asking again; a first asker that
    gives up (its timeout) leaves the question to the next."""
    tokenizer = ServerTokenizer("http://127.0.0.1:9", "m")
    asked: list[tuple[str, tuple[int, ...]]] = []

    async def endpoint(path: str, body: dict) -> dict:
        asked.append((path, tuple(body["tokens"])))
        await asyncio.sleep(0.05)
        if body["tokens"] == [9]:
            raise ServerRefused("/detokenize: HTTP 500: engine died")
        return {"prompt": "x"}

    monkeypatch.setattr(tokenizer, "_endpoint", endpoint)

    async def both(ids: list[int]) -> list:
        async def ask() -> object:
            try:
                return await tokenizer.detokenize(ids)
            except ServerRefused as exc:
                return type(exc)

        return list(await asyncio.gather(ask(), ask()))

    async def main() -> None:
        assert await both([1, 2]) == ["x", "x"]
        assert await both([9]) == [ServerRefused, ServerRefused]
        assert asked == [("/detokenize", (1, 2)), ("/detokenize", (9,))]
        assert await tokenizer.detokenize([1, 2]) == "x" and len(asked) == 2  # remembered
        with pytest.raises(ServerRefused):
            await tokenizer.detokenize([9])
        assert len(asked) == 3 and not tokenizer._asking  # an error is not remembered: asked again
        first = asyncio.ensure_future(asyncio.wait_for(tokenizer.detokenize([5]), 0.01))  # gives up
        while not tokenizer._asking:
            await asyncio.sleep(0)  # until the first one's request is under way
        second = asyncio.ensure_future(tokenizer.detokenize([5]))
        with pytest.raises(TimeoutError):
            await first
        assert await second == "x" and asked[-2:] == [("/detokenize", (5,)), ("/detokenize", (5,))]
        asker = asyncio.ensure_future(tokenizer.detokenize([6]))
        while not tokenizer._asking:
            await asyncio.sleep(0)
        waiter = asyncio.ensure_future(tokenizer.detokenize([6]))
        await asyncio.sleep(0)  # the waiter waits for the asker's answer
        asker.cancel(), waiter.cancel()  # both at once (a run that is interrupted)
        await asyncio.gather(asker, waiter, return_exceptions=True)
        assert asker.cancelled() and waiter.cancelled() and asked[-1] == ("/detokenize", (6,))
        assert asked.count(("/detokenize", (6,))) == 1 and not tokenizer._asking  # the waiter did not ask again

    asyncio.run(main())


class KeepAliveServer(FakeServer):
    """`FakeServer` speaking HTTP/1.1 (connections stay open); counts the connections it accepted and
    drops a connection without a word after answering when `close_after` says so."""

    protocol_version = "HTTP/1.1"
    connections: list[tuple[str, int]] = []
    close_after: list[bool] = []  # per request, in order: close the connection silently after answering

    def setup(self) -> None:
        super().setup()
        self.connections.append(self.client_address)

    def do_POST(self) -> None:
        super().do_POST()
        if self.close_after and self.close_after.pop(0):
            self.close_connection = True


@pytest.fixture
def keep_alive_server() -> Iterator[tuple[str, dict, list[str], list, list[bool]]]:
    routes: dict[str, tuple[int, dict]] = {}
    hits: list[str] = []
    connections: list = []
    close_after: list[bool] = []
    handler = type("Handler", (KeepAliveServer,), {"routes": routes, "hits": hits, "connections": connections,
                                                   "close_after": close_after})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", routes, hits, connections, close_after
    finally:
        server.shutdown()
        server.server_close()


def test_the_tokenizer_asks_over_one_kept_alive_connection(keep_alive_server) -> None:
    url, routes, hits, connections, _ = keep_alive_server
    routes["/tokenize"] = (200, {"tokens": [7]})
    routes["/detokenize"] = (200, {"prompt": "x"})
    async def main() -> None:
        with ServerTokenizer(url, "m") as tokenizer:
            for n in range(5):
                assert await tokenizer.detokenize([n]) == "x" and await tokenizer.tokenize(f"t{n}") == [7]

    asyncio.run(main())
    assert len(hits) == 10 and len(connections) == 1


def test_a_connection_the_server_dropped_is_replaced_and_errors_keep_their_meaning(keep_alive_server) -> None:
    url, routes, hits, connections, close_after = keep_alive_server
    routes["/detokenize"] = (200, {"prompt": "x"})
    close_after[:] = [True, False]  # the first answer's connection is dropped while it sits idle
    async def main() -> None:
        with ServerTokenizer(url, "m") as tokenizer:
            assert await tokenizer.detokenize([1]) == "x"
            await asyncio.sleep(0.1)  # the server drops the idle connection meanwhile
            assert await tokenizer.detokenize([2]) == "x"
            assert len(connections) == 2
            routes["/detokenize"] = (500, {"detail": "engine died"})
            with pytest.raises(ServerRefused, match="/detokenize: HTTP 500: engine died"):
                await tokenizer.detokenize([3])
            with pytest.raises(ForcingUnsupported, match="no tokenize endpoint"):
                await tokenizer.tokenize("x")  # 404 from this server

    asyncio.run(main())
    assert len(connections) == 2  # errors do not cost a connection


def test_a_proxy_the_environment_names_is_used(route_server, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy, routes, hits = route_server
    routes["http://upstream.invalid:8000/tokenize"] = (200, {"tokens": [7]})
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.setattr(urllib.request, "_opener", None)  # urllib reads the environment when it builds its opener
    async def main() -> None:
        with ServerTokenizer("http://upstream.invalid:8000", "m") as tokenizer:
            assert await tokenizer.tokenize("x") == [7]

    asyncio.run(main())
    assert hits == ["http://upstream.invalid:8000/tokenize"]


class VocabularyTokenizer:
    """A tokenizer from a fixed vocabulary that records every detokenize question."""

    def __init__(self, vocabulary: dict[int, str]) -> None:
        self.vocabulary, self.asked = vocabulary, []

    async def tokenize(self, text: str) -> list[int]:
        return [token for token, piece in self.vocabulary.items() if piece == text]

    async def detokenize(self, token_ids) -> str:
        self.asked.append(list(token_ids))
        return "".join(self.vocabulary[token] for token in token_ids)


def test_an_output_ending_in_its_stop_token_is_verified_with_one_question() -> None:
    tokenizer = VocabularyTokenizer({1: "<think>", 2: "x", 3: "y", 9: "<|im_end|>"})

    def verify(*args, **kwargs) -> list[str]:
        return asyncio.run(verify_forced_output(tokenizer, *args, **kwargs))

    assert verify("<think>x", [1, 2, 9]) == [] and tokenizer.asked == [[1, 2]]
    tokenizer.asked.clear()
    assert verify("<think>x", [1, 2]) == [] and tokenizer.asked == [[1], [1, 2]]
    assert verify("<think>x", [1, 3, 9]) == [
        "the output is not the forced text: expected '<think>x', got '<think>y<|im_end|>'"]
    assert verify("<think>xy", [1, 2], truncated=True) == []  # a prefix was generated
