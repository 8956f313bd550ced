"""What a run does not spend CPU on (benchmarks/run_benchmark.py measures what it does spend)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.record import recording, wire
from conformance.record.transcript import SseLine
from conformance.report.run.write import write_reports
from conformance.run import engine
from conformance.run.driver import Target
from tests.engine_helpers import load_cases, stream_transcript
from tests.fake_server import fake_server

CASES_YAML = r"""
- id: ok
  description: One tool call arrives whole after the reasoning.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  expect:
    hf: {message: {reasoning: "\nplan\n", tool_calls: [{name: get_weather, arguments: {city: Paris}}]}, finish_reason: tool_calls}
"""


def test_a_run_never_formats_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio.run (CPython 3.11, main thread) formats the repr of its main task, result included,
    when it puts back the SIGINT handler: for a whole run's output that is tens of milliseconds."""
    formatted = []
    monkeypatch.setattr(engine.RunOutput, "__repr__", lambda self: formatted.append(self) or "RunOutput(...)")
    with fake_server() as server:
        cases = list(load_cases(tmp_path / "cases", CASES_YAML).values())
        output = engine.run(cases, Target(server.base_url, "fake", "hf"), tmp_path / "out")
    assert len(output.results) == 2 and formatted == []


def test_each_stream_is_parsed_once_for_verifying_judging_and_the_reports(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = []
    parse = wire._read_stream
    monkeypatch.setattr(wire, "_read_stream", lambda transcript: parsed.append(transcript) or parse(transcript))
    forced = CASES_YAML.replace("  expect:", '  force: "x"\n  expect:')  # so that the answers are verified too
    with fake_server() as server:
        cases = list(load_cases(tmp_path / "cases", forced).values())
        output = engine.run(cases, Target(server.base_url, "fake", "hf", can_force=True), tmp_path / "out")
    write_reports(tmp_path / "out", output.results, output.stamp, output.transcripts)
    streams = [t for t in output.transcripts if t.mode == "stream"]
    assert len(streams) == 1 and [id(t) for t in parsed] == [id(streams[0])]


def test_a_stream_whose_lines_changed_is_read_again() -> None:
    transcript = stream_transcript([{"choices": [{"index": 0, "delta": {"content": "a"}}]}], done=False)
    assert wire.read_stream(transcript) is wire.read_stream(transcript)
    assert wire.read_stream(transcript).message.content == "a" and not wire.read_stream(transcript).done
    transcript.sse.append(SseLine("[DONE]", 1.0))
    assert wire.read_stream(transcript).done


def test_a_run_digests_its_cases_once_for_both_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    digests = []
    digest = recording.case_digest
    monkeypatch.setattr(recording, "case_digest", lambda cases: digests.append(cases) or digest(cases))
    with fake_server() as server:
        cases = list(load_cases(tmp_path / "cases", CASES_YAML).values())
        engine.run(cases, Target(server.base_url, "fake", "hf"), tmp_path / "out")
    headers = [recording.read_header(tmp_path / "out" / f"{file}.jsonl", file) for file in ("transcripts", "results")]
    assert len(digests) == 1
    assert [header["file"] for header in headers] == ["transcripts", "results"]
    assert headers[0] == {**headers[1], "file": "transcripts"} and headers[0]["case_digest"] == digest(cases)


def test_a_run_computes_a_cases_forcing_fields_once_for_both_modes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.servers.forcing_methods import RegexForcing

    asked = []
    fields = RegexForcing.request_fields
    monkeypatch.setattr(RegexForcing, "request_fields", lambda self, *args: asked.append(args[0]) or fields(self, *args))
    forced = CASES_YAML.replace("  expect:", '  force: "x"\n  expect:')
    with fake_server() as server:
        cases = list(load_cases(tmp_path / "cases", forced).values())
        output = engine.run(cases, Target(server.base_url, "fake", "hf", can_force=True), tmp_path / "out")
    assert asked == ["x"] and [t.forced for t in output.transcripts] == [True, True]


def test_verifying_a_forced_answer_holds_no_send_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forced answer is verified (requests to the server's tokenizer) once its send slot is free:
    holding the slot meanwhile left fewer streams in flight, and the run's CPU went up with the
    event loop's wake-ups per chunk (benchmarks/run_benchmark.py: about 70 ms of the default set's).
    Here, with one slot, the other mode's request goes out while the first answer is being verified."""
    import asyncio

    from conformance.servers.forcing_methods import RegexForcing

    events: list[str] = []
    send = engine.send
    second_sent = asyncio.Event()

    async def recorded_send(*args, **kwargs):
        events.append("send")
        answer = await send(*args, **kwargs)
        if events.count("send") == 2:
            second_sent.set()
        return answer

    async def slow_verify(self, tokenizer, case, transcript, markers):
        events.append("verify")
        try:  # the first answer's verification waits for the other mode's answer, which needs the slot
            await asyncio.wait_for(second_sent.wait(), 5)
        except TimeoutError:
            events.append("the slot stayed taken")
        events.append("verified")
        return []

    monkeypatch.setattr(engine, "send", recorded_send)
    monkeypatch.setattr(RegexForcing, "verify", slow_verify)
    forced = CASES_YAML.replace("  expect:", '  force: "x"\n  expect:')
    cases = list(load_cases(tmp_path / "cases", forced).values())
    with fake_server() as server:
        output = engine.run(cases, Target(server.base_url, "fake", "hf", can_force=True), None, concurrency=1)
    assert [t.forcing_problems for t in output.transcripts] == [[], []]
    assert events == ["send", "verify", "send", "verify", "verified", "verified"]


def test_a_cases_results_are_written_with_one_flush_and_each_transcript_as_it_comes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.record.transcript import JsonLinesWriter

    flushed = []
    write_all = JsonLinesWriter.write_all
    monkeypatch.setattr(JsonLinesWriter, "write_all", lambda self, records: (
        records := list(records), flushed.append((self.path.name, len(records))), write_all(self, records)))
    with fake_server() as server:
        cases = list(load_cases(tmp_path / "cases", CASES_YAML).values())
        engine.run(cases, Target(server.base_url, "fake", "hf"), tmp_path / "out")
    assert flushed == [("transcripts.jsonl", 1), ("results.jsonl", 1),  # the headers
                       ("transcripts.jsonl", 1), ("transcripts.jsonl", 1), ("results.jsonl", 2)]
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(line.startswith("{") for line in lines)


def test_a_run_keeps_what_existed_before_it_out_of_full_collections_and_hands_it_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heap the run found (modules, SDK classes) is frozen while it lasts: the cyclic collector's
    full passes then scan only the run's own objects; its young generation is collected less often.
    Afterwards nothing stays frozen and the thresholds are the caller's again."""
    import gc

    during = []
    real_run_async = engine.run_async

    async def observed(*args, **kwargs):
        during.append((gc.get_freeze_count(), gc.get_threshold()))
        return await real_run_async(*args, **kwargs)

    monkeypatch.setattr(engine, "run_async", observed)
    before, thresholds = gc.get_freeze_count(), gc.get_threshold()
    with fake_server() as server:
        cases = list(load_cases(tmp_path / "cases", CASES_YAML).values())
        output = engine.run(cases, Target(server.base_url, "fake", "hf"), tmp_path / "out")
    assert len(output.results) == 2 and output.summary.counts["pass"] == 2
    (frozen, thresholds_during), = during
    assert frozen > 10_000  # the imported libraries' objects, at least
    assert thresholds_during == (max(thresholds[0], engine.RUN_YOUNG_THRESHOLD), *thresholds[1:])
    assert thresholds_during[0] > 700  # CPython's default
    assert gc.get_freeze_count() == before and gc.get_threshold() == thresholds


def test_a_caller_that_turned_automatic_collection_off_keeps_it_off_during_a_run() -> None:
    import gc

    thresholds = gc.get_threshold()
    gc.set_threshold(0, *thresholds[1:])
    try:
        with engine.collector_tuned_for_a_run():
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold() == (0, *thresholds[1:])
    finally:
        gc.set_threshold(*thresholds)
