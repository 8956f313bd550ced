"""Transcripts as JSON lines: round trip, flushed per record, clear errors on bad files (fast tier)."""

from __future__ import annotations

import json

import pytest

from conformance.cli import main
from conformance.record.recording import read_transcripts
from conformance.record.transcript import (
    JsonLinesWriter,
    ServerStamp,
    SseLine,
    Transcript,
    TranscriptError,
    group_by_key,
)
from conformance.run.driver import request_body
from conformance.servers.forcing import forcing_extra_body
from conformance.suite.cases import load_suite
from tests.engine_helpers import response_transcript, stream_transcript

STAMP = ServerStamp("http://h/v1", "tiny", "legacy", "0.32.0", ("--tool-call-parser", "hermes"), "sha256:abc")


def full_transcript() -> Transcript:
    return Transcript(
        case_id="two-calls", mode="stream", profile="legacy", endpoint="chat", server=STAMP,
        request={"model": "tiny", "messages": [{"role": "user", "content": "é <tool_call>"}], "stream": True},
        forced=True, repeat=2, started_at="2026-11-30T20:00:00.000+00:00", duration=0.5, status=200,
        sse=[SseLine('{"choices": []}', 0.1), SseLine("[DONE]", 0.2)],
    )  # fmt: skip


def test_round_trip_through_json_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    originals = [full_transcript(), response_transcript({"content": "a"}, "stop"),
                 Transcript("x", "non-stream", "hf", "chat", STAMP, {}, transport_error="timeout")]
    with JsonLinesWriter(path) as writer:
        for transcript in originals:
            writer.write(transcript.to_dict())
    assert read_transcripts(path) == originals
    assert "é <tool_call>" in path.read_text(encoding="utf-8")  # readable, not \\u-escaped


def test_each_record_is_on_disk_before_the_writer_closes(tmp_path):
    path = tmp_path / "t.jsonl"
    writer = JsonLinesWriter(path)
    writer.write(full_transcript().to_dict())
    assert len(read_transcripts(path)) == 1  # flushed: a crash now would lose nothing
    writer.write(full_transcript().to_dict())
    assert len(read_transcripts(path)) == 2
    writer.close()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('\n{oops\n', "t.jsonl:2: not valid JSON"),
        ("[1, 2]\n", "t.jsonl:1: expected a JSON object per line"),
        ('{"case_id": "a"}\n', "t.jsonl:1: not a transcript: 'endpoint' is a required property"),
        (json.dumps({**full_transcript().to_dict(), "server": {"bogus": 1}}) + "\n",
         "t.jsonl:1: not a transcript: field 'server': 'base_url' is a required property"),
        (json.dumps({**full_transcript().to_dict(), "server": "x"}) + "\n",
         "t.jsonl:1: not a transcript: field 'server': 'x' is not of type 'object'"),
        (json.dumps({**full_transcript().to_dict(), "request": "x"}) + "\n",
         "t.jsonl:1: not a transcript: field 'request': 'x' is not of type 'object'"),
        (json.dumps({**full_transcript().to_dict(), "mode": "both"}) + "\n",
         "t.jsonl:1: not a transcript: field 'mode': 'both' does not match"),
        (json.dumps({**full_transcript().to_dict(), "sse": [{"data": 1, "t": 0}]}) + "\n",
         "t.jsonl:1: not a transcript: field 'sse[0].data': 1 is not of type 'string'"),
    ],
)
def test_bad_files_are_named_with_the_line(tmp_path, content, message):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(TranscriptError, match=message.replace("[", r"\[")):
        read_transcripts(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(TranscriptError, match="nope.jsonl: cannot read"):
        read_transcripts(tmp_path / "nope.jsonl")


def test_modes_of_one_case_profile_and_repeat_are_grouped():
    stream = stream_transcript([], case_id="a")
    non_stream = response_transcript({"content": "a"}, "stop", case_id="a")
    other = response_transcript({"content": "a"}, "stop", case_id="b")
    assert group_by_key([stream, other, non_stream]) == {
        ("a", "hf", 0): {"stream": stream, "non-stream": non_stream},
        ("b", "hf", 0): {"non-stream": other},
    }


def test_recheck_command_reports_from_a_recording(tmp_path, capsys):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "c.yaml").write_text("""
cases:
  - id: content-only
    description: Plain text comes back as content and nothing else under the hf profile.
    features: [content]
    request: {messages: [{role: user, content: hi}]}
    force: "Hello"
    expect:
      hf: {message: {content: "Hello"}, finish_reason: stop}
""")
    recording = tmp_path / "transcripts.jsonl"
    (case,) = load_suite(cases)
    good = response_transcript({"content": "Hello"}, "stop", case_id="content-only",
                               request=request_body(case, "non-stream", "tiny", forcing_extra_body("Hello")))
    good.started_at = "2026-11-29T10:00:00.000+00:00"
    bad = stream_transcript([{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Bye"},
                                           "finish_reason": "stop"}]}], case_id="content-only",
                            request=request_body(case, "stream", "tiny", forcing_extra_body("Hello")))
    with JsonLinesWriter(recording) as writer:
        writer.write(good.to_dict())
        writer.write(bad.to_dict())
    assert main(["recheck", str(recording), "--cases", str(cases), "--out", str(tmp_path / "out")]) == 1
    assert "2 results: 1 pass, 1 fail, 0 skip, 0 error" in capsys.readouterr().out
    header, *results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert header["record"] == "header" and header["file"] == "results"
    assert [(r["mode"], r["outcome"]) for r in results] == [("non-stream", "pass"), ("stream", "fail")]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "model | tiny" in report
    assert f"recorded | {good.started_at}" in report  # when the recording was made, not the recheck
    recording.write_text("{broken\n")
    assert main(["recheck", str(recording), "--cases", str(cases)]) == 2
    assert "transcripts.jsonl:1: not valid JSON" in capsys.readouterr().err


def test_a_new_writer_starts_the_file_afresh(tmp_path):
    path = tmp_path / "t.jsonl"
    with JsonLinesWriter(path) as writer:
        writer.write(full_transcript().to_dict())
    with JsonLinesWriter(path) as writer:  # a second run into the same --out directory
        writer.write(full_transcript().to_dict())
    assert len(read_transcripts(path)) == 1
