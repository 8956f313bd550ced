"""The round trip streams each example cut at the checkpoint's own tokens as well as at characters: a parser
that breaks only on a delimiter split mid-token (which no server does) is a character-cut counterexample
only; one that breaks on how whole tokens are grouped is found by the token cuts themselves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roundtrip_helpers import corrected_subject

from conformance.audit.checkpoint_audit import CheckpointAudit
from conformance.audit.offline import tokenizer_of
from conformance.audit.roundtrip import cuts, roundtrip, strategies
from conformance.audit.roundtrip.cuts import (
    CHARACTER_CUTS,
    TOKEN_CUTS,
    TokenizerUnavailable,
    TokenSplitter,
    load_token_splitter,
)
from conformance.audit.roundtrip.roundtrip import run_roundtrip
from conformance.audit.roundtrip.strategies import token_chunkings
from conformance.audit.roundtrip.worker import bounded_roundtrip
from conformance.formats.turn_text import Parsed

DELIMITERS = corrected_subject().delimiters


@pytest.fixture(scope="module")
def splitter(tiny_checkpoint: Path) -> TokenSplitter:
    return load_token_splitter(tiny_checkpoint / "tokenizer.json")


def _boundaries(chunks: list[str]) -> list[int]:
    positions, position = [], 0
    for chunk in chunks[:-1]:
        position += len(chunk)
        positions.append(position)
    return positions


def _breaks_when(monkeypatch: pytest.MonkeyPatch, broken) -> None:
    """The streaming parse answers wrongly whenever `broken(chunks)`; the whole parse is untouched."""
    original = roundtrip.parse_chunked

    def parse_chunked(subject, prompt, chunks, tools):
        return Parsed(None, "BrokenStream: wrong") if broken(chunks) else original(subject, prompt, chunks, tools)

    monkeypatch.setattr(roundtrip, "parse_chunked", parse_chunked)


def _splits_a_delimiter(chunks: list[str]) -> bool:
    text = "".join(chunks)
    return any(start < cut < start + len(delimiter) for delimiter in DELIMITERS
               for start in range(len(text)) if text.startswith(delimiter, start) for cut in _boundaries(chunks))


def test_a_delimiter_split_mid_token_is_a_character_cut_counterexample_only(monkeypatch, splitter):
    _breaks_when(monkeypatch, _splits_a_delimiter)
    result = run_roundtrip(corrected_subject(), examples=100, seed=0, tokens=splitter)
    assert result.error is None and set(result.failures) == {"chunk-variance (character cut)"}
    failure = result.failures["chunk-variance (character cut)"]
    assert failure["code"] == "chunk-variance" and failure["cut"] == "character"
    assert _splits_a_delimiter(failure["chunks"]) and "".join(failure["chunks"]) == failure["raw"]
    assert sum(result.cuts["token"].values()) > 0  # the examples before it were streamed in token cuts too
    # the search stops at its first counterexample: token cuts alone, over 200 examples, never break it
    monkeypatch.setattr(strategies, "chunkings", lambda raw, delimiters: st.just([raw]))
    tokens_only = run_roundtrip(corrected_subject(), examples=200, seed=0, tokens=splitter)
    assert tokens_only.failures == {} and tokens_only.examples == 200 and tokens_only.token_cuts_skipped is None
    assert set(tokens_only.cuts["token"]) == set(TOKEN_CUTS) and all(tokens_only.cuts["token"].values())
    assert sum(tokens_only.cuts["token"].values()) == 200


def test_a_parser_broken_by_a_delimiter_and_the_next_token_in_one_chunk_is_a_token_cut_counterexample(
        monkeypatch, splitter):
    def delimiter_and_more(chunks: list[str]) -> bool:
        return any(chunk.startswith(delimiter) and len(chunk) > len(delimiter)
                   for chunk in chunks for delimiter in DELIMITERS)

    _breaks_when(monkeypatch, delimiter_and_more)
    result = run_roundtrip(corrected_subject(), examples=100, seed=0, tokens=splitter)
    failure = result.failures["chunk-variance (token cut)"]
    assert failure["cut"] == "token"
    assert failure["summary"] == "the parse streamed in token cuts differs from the whole parse"
    assert delimiter_and_more(failure["chunks"]) and "".join(failure["chunks"]) == failure["raw"]
    token_starts = {span.start for span in splitter.spans(failure["raw"])}
    assert set(_boundaries(failure["chunks"])) <= token_starts  # cut between whole tokens only


def test_token_chunkings_keep_tokens_and_characters_whole(splitter):
    text = "x😀é<tool_call>\n{\"a\": 1}</tool_call>中"
    spans = splitter.spans(text)
    assert len(spans) > len(text) - len("<tool_call></tool_call>") + 2  # byte-level: 😀 and 中 are several tokens
    seen: list[list[str]] = []

    @settings(max_examples=80, derandomize=True, database=None)
    @given(st.data())
    def check(data):
        chunks = data.draw(token_chunkings(text, spans))
        assert "".join(chunks) == text and all(chunks)
        assert set(_boundaries(chunks)) <= {span.start for span in spans}  # never inside a token nor a character
        seen.append(chunks)

    check()
    assert [text] in seen  # whole
    assert ["x", "😀", "é", "<tool_call>", "\n", "{\"", "a", "\":", " ", "1", "}", "</tool_call>", "中"] in seen
    assert ["x😀é", "<tool_call>", "\n{\"a\": 1}", "</tool_call>", "中"] in seen  # at added tokens


def test_without_a_tokenizer_the_token_cuts_are_skipped_with_the_reason(tmp_path):
    result = run_roundtrip(corrected_subject(), examples=20, seed=0)
    assert result.token_cuts_skipped == "no tokenizer.json" and result.failures == {}
    assert result.cuts["token"] == dict.fromkeys(TOKEN_CUTS, 0)
    assert set(result.cuts["character"]) == set(CHARACTER_CUTS) and sum(result.cuts["character"].values()) == 20
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": {"type": "nothing"}}')
    result = bounded_roundtrip(corrected_subject(), examples=10, seed=0, tokenizer=broken)
    assert result.error is None and result.token_cuts_skipped.startswith("tokenizer.json does not load: ")
    assert sum(result.cuts["token"].values()) == 0 and sum(result.cuts["character"].values()) == 10


def test_a_tokenizer_too_large_or_not_a_file_is_refused_before_it_is_read(monkeypatch, tmp_path, tiny_checkpoint):
    monkeypatch.setattr(cuts, "MAX_TOKENIZER_BYTES", 1000)  # the tiny checkpoint's is 15 kB
    with pytest.raises(TokenizerUnavailable, match=r"^tokenizer.json cannot be read: .*1000"):
        load_token_splitter(tiny_checkpoint / "tokenizer.json")
    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)  # with no writer: reading it would block forever
    with pytest.raises(TokenizerUnavailable, match=r"^tokenizer.json cannot be read: "):
        load_token_splitter(fifo)


def test_the_audit_names_why_a_checkpoint_has_no_tokenizer_to_cut_at(tiny_checkpoint):
    local = CheckpointAudit(id="local", source="local", revision=None, commit=None, status="ok",
                            file_paths={"tokenizer.json": tiny_checkpoint / "tokenizer.json"})
    assert tokenizer_of(local) == tiny_checkpoint / "tokenizer.json"
    hub = CheckpointAudit(id="org/model", source="hub", revision="main", commit=None, status="ok")
    assert tokenizer_of(hub) == "no tokenizer.json (read on disk only: a Hub checkpoint's is not fetched)"
    assert tokenizer_of(CheckpointAudit(id="bare", source="local", revision=None, commit=None, status="ok")) == (
        "no tokenizer.json")
