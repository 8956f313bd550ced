"""Forcing by naming token ids (`TokenGrammarForcing`, the hf-rust profile's method): the grammar, the
text read back from it, and the engine asking the server's tokenizer for the ids (fast tier: a
loopback server whose tokenizer gives one id per character)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.formats.qwen3_hermes import MARKER_TOKENS
from conformance.record.recording import read_transcripts
from conformance.report.run import html
from conformance.run.driver import Target
from conformance.run.engine import recheck, run
from conformance.servers.forcing import PROBE_TEXT, ForcingUnsupported, token_grammar_body, token_grammar_text
from conformance.servers.forcing_methods import TokenGrammarForcing
from conformance.servers.profiles import PROFILES
from tests.engine_helpers import load_cases
from tests.scripted_server import json_reply, scripted_server

CASES = """
- id: forced-hello
  description: A forced plain text, which the server's tokenizer spells one id per character.
  features: [content]
  request:
    messages: [{role: user, content: hi}]
  force: "Hello"
  expect:
    hf-rust: {message: {content: Hello}, finish_reason: stop}
- id: forced-broken
  description: A forced text the server's tokenizer fails on (HTTP 500).
  features: [content]
  modes: [non-stream]
  request:
    messages: [{role: user, content: hi}]
  force: "Broken"
  expect:
    hf-rust: {message: {content: Broken}, finish_reason: stop}
"""
END_TOKEN = 0
MARKER_ID = 0x110000  # past every code point
GRAMMAR_ID = re.compile(r"<\[(\d+)\]>")


@given(st.text(), st.lists(st.integers(min_value=0, max_value=10**6), min_size=1))
def test_the_grammar_names_exactly_the_ids_and_carries_the_text_on_one_comment_line(text, ids) -> None:
    body = token_grammar_body(text, ids)
    grammar = body["structured_outputs"]["grammar"]
    comment, rule = grammar.split("\n")  # whatever the text holds, it stays on the comment line
    assert comment.startswith("// ") and rule == "start: " + " ".join(f"<[{i}]>" for i in ids)
    assert token_grammar_text(grammar) == text
    assert TokenGrammarForcing().forced_text(body) == text
    assert body["return_token_ids"] is True


def test_a_grammar_of_no_tokens_is_refused_and_a_foreign_grammar_has_no_forced_text() -> None:
    with pytest.raises(ForcingUnsupported, match="empty output"):
        token_grammar_body("", [])
    assert token_grammar_text("start: <[1]>") is None
    assert TokenGrammarForcing().forced_text({"structured_outputs": {"regex": "x"}}) is None


def char_tokenizer_server():
    """/tokenize: each marker one id, any other character its code point, HTTP 500 for "Broken";
    /detokenize back; chat: the grammar's tokens as the answer's content, with their ids and an end token."""

    def tokenize(body):
        if body["prompt"] == "Broken":
            return json_reply({"error": {"message": "tokenizer exploded"}}, 500)
        return json_reply({"tokens": char_ids(body["prompt"])})

    def detokenize(body):
        return json_reply({"prompt": decode(body["tokens"])})

    def chat(body):
        ids = [int(i) for i in GRAMMAR_ID.findall(body["structured_outputs"]["grammar"])]
        text = decode(ids)
        if body.get("stream"):
            chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                      {"choices": [{"index": 0, "delta": {"content": text}, "token_ids": ids + [END_TOKEN]}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return _sse(data)
        return json_reply({"choices": [{"index": 0, "finish_reason": "stop", "token_ids": ids + [END_TOKEN],
                                        "message": {"role": "assistant", "content": text}}]})

    return {("POST", "/tokenize"): tokenize, ("POST", "/detokenize"): detokenize,
            ("POST", "/v1/chat/completions"): chat, ("GET", "/version"): lambda body: json_reply({"version": "x"})}


def char_ids(text: str) -> list[int]:
    pieces = re.split("(" + "|".join(map(re.escape, MARKER_TOKENS)) + ")", text)
    return [MARKER_ID + MARKER_TOKENS.index(piece) if piece in MARKER_TOKENS else ord(char)
            for piece in pieces for char in ([piece] if piece in MARKER_TOKENS else piece)]


def decode(ids) -> str:
    return "".join(MARKER_TOKENS[i - MARKER_ID] if i >= MARKER_ID else chr(i) for i in ids if i != END_TOKEN)


def _sse(data: str):
    from tests.scripted_server import Reply

    return Reply(200, {"Content-Type": "text/event-stream"}, [data.encode()])


def test_the_engine_forces_the_servers_own_token_ids_and_verifies_them(tmp_path, monkeypatch) -> None:
    from dataclasses import replace

    monkeypatch.setitem(PROFILES, "hf-rust", replace(PROFILES["hf-rust"], launch=None))
    cases = list(load_cases(tmp_path / "cases", CASES).values())
    with scripted_server(char_tokenizer_server()) as server:
        output = run(cases, Target(base_url=server.base_url, model="m", profile="hf-rust"), tmp_path / "out")
    hello = [t for t in output.transcripts if t.case_id == "forced-hello"]
    for transcript in hello:
        ids = [int(i) for i in GRAMMAR_ID.findall(transcript.request["structured_outputs"]["grammar"])]
        assert ids == [ord(char) for char in "Hello"]  # the ids /tokenize gave, not a regex over the text
        assert transcript.forcing_problems == []  # verified token by token
    results = {(r.case_id, r.mode): r for r in output.results}
    assert {results[("forced-hello", mode)].outcome for mode in ("non-stream", "stream")} == {"pass"}
    broken = results[("forced-broken", "non-stream")]
    assert broken.outcome == "error"  # the server's tokenizer failing is never a skip nor a pass
    assert "the tokenizer did not give the forced output's tokens" in broken.reason
    assert "tokenizer exploded" in broken.reason
    page = html.render(output.results, output.stamp, output.transcripts)
    assert "<h4>Forced output (the raw text the model was made to generate)</h4><pre>Hello</pre>" in page

    recorded = read_transcripts(tmp_path / "out" / "transcripts.jsonl")
    again = {(r.case_id, r.mode): r.outcome for r in recheck(recorded, cases)}  # no server: the recorded ids
    assert again[("forced-hello", "stream")] == again[("forced-hello", "non-stream")] == "pass"
    changed = [replace(case, force="Hellp") if case.id == "forced-hello" else case for case in cases]
    stale = {(r.case_id, r.mode): r.reason for r in recheck(recorded, changed)}
    assert stale[("forced-hello", "stream")] == (
        "case 'forced-hello' changed since it was recorded: the request differs in the forced output")


def test_the_probe_forces_the_probe_texts_token_ids_and_tells_an_unhonoured_output() -> None:
    routes = char_tokenizer_server()
    asked = []
    chat = routes[("POST", "/v1/chat/completions")]
    routes[("POST", "/v1/chat/completions")] = lambda body: asked.append(body) or chat(body)
    with scripted_server(routes) as server:
        asyncio.run(TokenGrammarForcing().probe(server.root_url, "m", 5, None))  # honoured and verified: no exception
        ids = [int(i) for i in GRAMMAR_ID.findall(asked[0]["structured_outputs"]["grammar"])]
        assert ids == char_ids(PROBE_TEXT) and len(ids) < len(PROBE_TEXT)  # markers as their own ids
        routes[("POST", "/v1/chat/completions")] = lambda body: json_reply(
            {"choices": [{"index": 0, "finish_reason": "stop", "token_ids": [ord("x"), END_TOKEN],
                          "message": {"role": "assistant", "content": "x"}}]})
        with pytest.raises(ForcingUnsupported, match="did not honour a forced output"):
            asyncio.run(TokenGrammarForcing().probe(server.root_url, "m", 5, None))
