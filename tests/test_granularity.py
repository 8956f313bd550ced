"""Streams at several tokens per delta (`stream@N`) without vLLM: the modes a case is sent in, the request
field, split invariance and its first divergent chunk, declared stream bugs, the skip of a server that cannot
be asked, and a run and a gate against loopback fake servers that merge chunks (one of them badly)."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.commands import granularities
from conformance.formats.format import StreamBug
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
from conformance.record.case_model import GRANULARITIES, WHOLE_OUTPUT_TOKENS, mode_order, tokens_per_delta
from conformance.record.outcomes import FAIL, FINDING, PASS, Check
from conformance.record.results import make_result
from conformance.record.wire import read_stream
from conformance.run.checks.granularity import (
    check_split_invariance,
    first_divergent_chunk,
    judged_merged_stream,
    judged_with_stream_bug,
    most_tokens_in_a_delta,
)
from conformance.run.driver import Target, request_body
from conformance.run.engine import MERGED_STREAM_RESENDS, case_modes, run_async
from tests.engine_helpers import case_directory, stream_transcript
from tests.fake_server import chunk, fake_server, good_stream

CASES = """
- id: forced
  description: A forced call whose arguments stream in fragments (the fake's ok-incremental scenario).
  features: [tool_call]
  request:
    messages: [{role: user, content: ok-incremental}]
    tools: [get_weather]
  force: "forced text"
  expect:
    hf: &forced
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
    legacy: *forced
    my-server: *forced
- id: unforced
  description: The same request as the forced case, but not forced at all.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  expect:
    hf: *forced
- id: whole-only
  description: Forced, but sent without streaming only.
  features: [tool_call]
  modes: [non-stream]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "forced text"
  expect:
    hf: *forced
"""


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory) -> Path:
    return case_directory(tmp_path_factory.mktemp("cases"), CASES)


@pytest.fixture(scope="module")
def cases(cases_dir) -> dict:
    from conformance.suite.cases import load_suite

    return {case.id: case for case in load_suite(cases_dir)}


def test_the_option_takes_all_none_or_a_list_and_refuses_what_is_not_a_granularity():
    assert granularities("all") == GRANULARITIES and granularities("none") == ()
    assert granularities("3, whole,3") == ("3", "whole")
    for bad in ("1", "0", "x", "3,", "-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            granularities(bad)


def test_only_a_forced_chat_stream_is_sent_at_granularities_and_each_mode_asks_its_tokens_per_delta(cases):
    assert case_modes(cases["forced"], ("3", "whole")) == ("non-stream", "stream", "stream@3", "stream@whole")
    assert case_modes(cases["unforced"], ("3",)) == ("non-stream", "stream")
    assert case_modes(cases["whole-only"], ("3",)) == ("non-stream",)
    assert case_modes(cases["forced"]) == ("non-stream", "stream")
    body = request_body(cases["forced"], "stream@3", "m", None)
    assert body["stream"] is True and body["stream_interval"] == 3
    assert request_body(cases["forced"], "stream@whole", "m", None)["stream_interval"] == WHOLE_OUTPUT_TOKENS
    assert "stream_interval" not in request_body(cases["forced"], "stream", "m", None)
    assert sorted(["stream@whole", "stream@3", "non-stream", "stream@12", "stream"], key=mode_order) == [
        "non-stream", "stream", "stream@3", "stream@12", "stream@whole"]
    assert tokens_per_delta("stream") is None and tokens_per_delta("stream@8") == 8


def _merged(chunks: list[dict], size: int, lose_fragment: bool = False) -> list[dict]:
    """`chunks` (after the role chunk) merged `size` at a time, the way the fake server does."""
    merged = [chunks[0]]
    for start in range(1, len(chunks), size):
        group = chunks[start:start + size]
        calls = [c for g in group for c in g["choices"][0]["delta"].get("tool_calls", [])]
        if lose_fragment and len(calls) > 1 and "name" in calls[0]["function"]:
            del calls[1]
        delta = {k: v for g in group for k, v in g["choices"][0]["delta"].items() if k != "tool_calls"}
        merged.append(chunk({**delta, **({"tool_calls": calls} if calls else {})}, group[-1]["choices"][0]["finish_reason"]))
    return merged


def test_split_invariance_passes_when_merged_chunks_add_up_and_names_the_chunk_that_lost_a_fragment():
    one_token = stream_transcript(good_stream(incremental=True))
    merged = stream_transcript(_merged(good_stream(incremental=True), 2))
    same = check_split_invariance("stream@2", read_stream(merged), one_token)
    assert same.outcome == PASS and "in 4 chunks" in same.reason
    # at 3: the reasoning, the call's name and its first fragment in one delta, which loses the fragment
    broken = stream_transcript(_merged(good_stream(incremental=True), 3, lose_fragment=True))
    check = check_split_invariance("stream@3", read_stream(broken), one_token)
    assert check.outcome == FAIL and "in tool_calls" in check.reason
    # after chunk 2 the arguments are "" (a prefix still); chunk 3 brings '"Paris"}', which is not
    assert "first divergent chunk: 3 of 3" in check.reason
    assert check.expected == {"tool_calls": [{"name": "get_weather", "arguments": {"json": {"city": "Paris"}}}]}
    assert check_split_invariance("stream@3", read_stream(broken), None).outcome == "skip"


def test_the_first_divergent_chunk_is_the_last_one_when_something_never_arrives():
    reference = read_stream(stream_transcript(good_stream())).message
    short = good_stream()[:-2] + [chunk({}, "tool_calls")]  # the call never comes
    assert first_divergent_chunk(short, reference) == len(short)
    extra = good_stream()[:2] + [chunk({"content": "leak"})] + good_stream()[2:]
    assert first_divergent_chunk(extra, reference) == 3


def test_a_declared_stream_bug_turns_its_failures_into_findings_and_is_stale_once_the_split_holds(cases):
    bug = StreamBug("hf", "forced", ("stream@2",), "the parser loses a fragment", "https://example.org/bug")
    failing = [Check("split_invariance", FAIL, reason="differs"), Check("expected_message", FAIL, "expectation"),
               Check("arguments_json", PASS)]
    judged = judged_with_stream_bug(failing, bug)
    assert all(check.outcome != FAIL or check.kind == FINDING for check in judged)
    assert judged[-1].name == "known_stream_bug" and "https://example.org/bug" in judged[-1].reason
    transcript = stream_transcript(good_stream())
    transcript.mode = "stream@2"
    assert make_result(cases["forced"], transcript, judged).outcome == "pass"
    stale = judged_with_stream_bug([Check("split_invariance", PASS)], bug)
    assert make_result(cases["forced"], transcript, stale).outcome == "fail" and "stale" in stale[-1].reason


def test_the_shipped_stream_bugs_name_shipped_cases_and_granular_modes():
    from conformance.suite.cases import load_suite

    shipped = {case.id for case in load_suite()}
    for bug in DEFAULT_FORMAT.stream_bugs:
        assert bug.case in shipped and bug.link.startswith("https://") and bug.modes
        assert all(tokens_per_delta(mode) for mode in bug.modes)


def _run(cases, server, profile: str, out: Path, grains=("2", "3")):
    target = Target(base_url=server.base_url, model="fake", profile=profile, timeout=5, can_force=True)
    return asyncio.run(run_async([cases["forced"]], target, out, granularities=grains))


def test_a_run_sends_each_granularity_and_judges_it_against_the_one_token_stream(cases, tmp_path):
    with fake_server() as good, fake_server(splits_badly=True) as bad:
        fine = _run(cases, good, "hf", tmp_path / "good")
        broken = _run(cases, bad, "hf", tmp_path / "bad")
        asked = sorted(body.get("stream_interval", 1) for body in good.requests if body.get("stream"))
    assert asked == [1, 2, 3]
    assert {(r.mode, r.outcome) for r in fine.results} == {("non-stream", "pass"), ("stream", "pass"),
                                                          ("stream@2", "pass"), ("stream@3", "pass")}
    outcomes = {r.mode: r for r in broken.results}
    assert outcomes["stream"].outcome == "pass" and outcomes["stream@2"].outcome == "pass"
    assert outcomes["stream@3"].outcome == "fail"  # the name and the first fragment in one delta
    split = next(c for c in outcomes["stream@3"].checks if c.name == "split_invariance")
    assert "first divergent chunk: 3 of 3" in split.reason
    assert "stream_granularity" in outcomes["stream@3"].features
    recorded = [json.loads(line) for line in (tmp_path / "bad" / "transcripts.jsonl").read_text().splitlines()[1:]]
    assert {t["mode"] for t in recorded} == {"non-stream", "stream", "stream@2", "stream@3"}


def test_a_server_that_cannot_be_asked_per_request_skips_its_granular_streams_by_name(cases, tmp_path):
    with fake_server() as server:
        output = _run(cases, server, "my-server", tmp_path / "attached")  # attached by URL: not known to take it
        assert not any("stream_interval" in body for body in server.requests)
    skipped = {r.mode: r for r in output.results if r.outcome == "skip"}
    assert set(skipped) == {"stream@2", "stream@3"}
    assert all(r.skip_kind == "granularity_not_asked" and r.skip_allowed for r in skipped.values())
    assert "cannot be asked per request" in skipped["stream@2"].reason
    assert {r.mode: r.outcome for r in output.results if r.outcome != "skip"} == {"non-stream": "pass", "stream": "pass"}


def test_a_gate_shows_the_candidate_that_breaks_at_a_granularity_as_a_difference_of_its_own(cases_dir, tmp_path,
                                                                                              capsys):
    with fake_server() as baseline, fake_server(splits_badly=True) as candidate:
        code = main(["gate", "--baseline", baseline.base_url, "--baseline-model", "fake", "--baseline-profile",
                     "legacy", "--candidate", candidate.base_url, "--candidate-model", "fake", "--candidate-profile",
                     "hf", "--cases", str(cases_dir), "--case", "forced", "--out", str(tmp_path / "g"),
                     "--forcing", "trust", "--no-expect", "--granularities", "2,3,whole"])
    gate = json.loads((tmp_path / "g" / "gate.json").read_text())
    kinds = {(d["mode"], d["kind"]) for d in gate["differences"]}
    assert code == 1 and ("stream@3", "stream_granularity") in kinds and ("stream@3", "outcome") in kinds
    assert not any(mode in ("stream", "non-stream", "stream@2") for mode, _ in kinds)  # these agree
    # whole: one delta after the role chunk holds the name and both fragments; the candidate loses one
    assert ("stream@whole", "stream_granularity") in kinds
    assert "several tokens per delta break hf's stream" in (tmp_path / "g" / "report.md").read_text()


def test_a_one_token_stream_that_came_merged_is_sent_again_and_the_last_answer_is_recorded(cases, tmp_path):
    """A busy server groups the tokens a slow reader has not taken: the case's reference stream is asked again."""
    with fake_server(merges_one_token_streams=1) as server:
        output = _run(cases, server, "hf", tmp_path / "run", grains=("2",))
        one_token_asks = [body for body in server.requests if body.get("stream") and "stream_interval" not in body]
    assert len(one_token_asks) == 2
    results = {r.mode: r.outcome for r in output.results}
    assert results == {"non-stream": "pass", "stream": "pass", "stream@2": "pass"}
    [stream] = [t for t in output.transcripts if t.mode == "stream"]
    assert stream.merged_resends == 1 and most_tokens_in_a_delta(stream) <= 1  # the fake names no token here
    recorded = [json.loads(line) for line in (tmp_path / "run" / "transcripts.jsonl").read_text().splitlines()[1:]]
    assert [t["merged_resends"] for t in recorded if t["mode"] == "stream"] == [1]


def test_a_stream_still_merged_after_its_resends_is_judged_as_it_came_under_the_cases_declared_stream_bug(
        cases, tmp_path, monkeypatch):
    with fake_server(merges_one_token_streams=99, splits_badly=True) as server:
        undeclared = _run(cases, server, "hf", tmp_path / "undeclared", grains=())
        bug = StreamBug("hf", "forced", ("stream@3",), "the parser loses a fragment", "https://example.org/bug")
        monkeypatch.setitem(FORMATS, DEFAULT_FORMAT.name, replace(DEFAULT_FORMAT, stream_bugs=(bug,)))
        declared = _run(cases, server, "hf", tmp_path / "declared", grains=())
    [merged] = [t for t in undeclared.transcripts if t.mode == "stream"]
    assert merged.merged_resends == MERGED_STREAM_RESENDS and most_tokens_in_a_delta(merged) == 3
    assert {r.mode: r.outcome for r in undeclared.results} == {"non-stream": "pass", "stream": "fail"}
    stream = next(r for r in declared.results if r.mode == "stream")
    assert stream.outcome == "pass"
    known = next(c for c in stream.checks if c.name == "known_stream_bug")
    assert known.kind == FINDING and "up to 3 tokens in a delta" in known.reason and "example.org/bug" in known.reason
    assert judged_merged_stream([Check("expected_message", PASS)], bug, 3) == [Check("expected_message", PASS)]


def test_a_one_token_stream_that_came_merged_is_no_reference_and_a_declared_bug_then_explains_what_fails():
    """Under load the one-token stream itself may come grouped: it can no more tell a broken split from a sound one
    (a declaration would look stale when both break alike), so the split is not judged and says why."""
    grouped = _merged(good_stream(incremental=True), 3, lose_fragment=True)
    for chunk_ in grouped[1:]:
        chunk_["choices"][0]["token_ids"] = [7, 8, 9]
    merged_reference = stream_transcript(grouped)
    granular = stream_transcript(_merged(good_stream(incremental=True), 3, lose_fragment=True))
    split = check_split_invariance("stream@3", read_stream(granular), merged_reference)
    assert split.outcome == "skip" and "up to 3 tokens in a delta" in split.reason and split.skip_kind is None
    bug = StreamBug("hf", "forced", ("stream@3",), "the parser loses a fragment", "https://example.org/bug")
    failing = [split, Check("expected_message", FAIL, "expectation")]
    judged = judged_with_stream_bug(failing, bug)
    assert [c.kind for c in judged if c.outcome == FAIL] == [FINDING, FINDING] and "not judged" in judged[-1].reason
    assert judged_with_stream_bug([split, Check("expected_message", PASS)], bug) == [split, Check("expected_message", PASS)]
