"""A run's recording is a versioned record: a header line in transcripts.jsonl and results.jsonl,
schemas for both files, readers that validate what they load and refuse another format version."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conformance.cli import main
from conformance.record.recording import RUN_FORMAT, RecordingError, case_digest, read_header, read_transcripts
from conformance.record.results import read_results
from conformance.record.transcript import TranscriptError
from conformance.run.driver import Target
from conformance.run.engine import run
from tests.engine_helpers import load_cases
from tests.fake_server import fake_server

CASES = """
- id: ok
  description: The fake server answers this request with a reasoning block and one whole tool call.
  features: [reasoning, tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "forced <think> text"
  expect:
    hf:
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    cases = load_cases(tmp_path_factory.mktemp("cases"), CASES)
    out = tmp_path_factory.mktemp("run")
    with fake_server() as server:
        target = Target(base_url=server.base_url, model="fake", profile="hf", can_force=True, version="9.9")
        run(list(cases.values()), target, out, markers=("<think>", "</think>"))
    return cases, out


def test_both_files_start_with_a_header_saying_what_was_run(recorded):
    cases, out = recorded
    for file in ("transcripts", "results"):
        header = read_header(out / f"{file}.jsonl", file)
        assert header["format"] == RUN_FORMAT and header["file"] == file
        assert header["case_digest"] == case_digest(list(cases.values()))
        assert header["case_ids"] == ["ok"] and header["markers"] == ["<think>", "</think>"]
        assert header["profile"] == "hf" and header["server"]["version"] == "9.9"
    assert len(read_transcripts(out / "transcripts.jsonl")) == 2 and len(read_results(out / "results.jsonl")) == 2


def test_the_case_digest_changes_with_what_a_case_sends_or_expects_only(recorded):
    cases, _ = recorded
    case = cases["ok"]
    assert case_digest([case]) == case_digest([replace(case, line=99, source=case.source.parent / "moved.yaml")])
    assert case_digest([case]) != case_digest([replace(case, force="other")])
    assert case_digest([case]) != case_digest([replace(case, expect={})])


def _rewrite_first_line(path, change):
    lines = path.read_text().splitlines()
    lines[0] = json.dumps(change(json.loads(lines[0])))
    path.write_text("\n".join(lines) + "\n")


def test_a_recording_of_another_format_version_is_refused_by_name(recorded, tmp_path):
    _, out = recorded
    path = tmp_path / "transcripts.jsonl"
    path.write_text((out / "transcripts.jsonl").read_text())
    _rewrite_first_line(path, lambda header: {**header, "format": "conformance-run/7"})
    with pytest.raises(RecordingError, match=r"transcripts.jsonl:1: recorded in format 'conformance-run/7'; "
                                             r"this suite reads 'conformance-run/1'"):
        read_transcripts(path)
    assert main(["recheck", str(path), "--out", str(tmp_path / "again")]) == 2


def test_a_header_that_is_not_one_or_stands_elsewhere_is_refused(recorded, tmp_path):
    _, out = recorded
    path = tmp_path / "results.jsonl"
    lines = (out / "results.jsonl").read_text().splitlines()
    path.write_text("\n".join([lines[0], *lines]) + "\n")
    with pytest.raises(RecordingError, match="results.jsonl:2: a header record after the first line"):
        read_results(path)
    path.write_text("\n".join(lines) + "\n")
    _rewrite_first_line(path, lambda header: {**header, "case_ids": "ok"})
    with pytest.raises(RecordingError, match="results.jsonl:1: not a valid header: field 'case_ids'"):
        read_results(path)
    path.write_text((out / "transcripts.jsonl").read_text())
    with pytest.raises(RecordingError, match="the header says this is a transcripts file, not results"):
        read_results(path)


def test_every_record_is_validated_against_the_shipped_schema(recorded, tmp_path):
    _, out = recorded
    lines = (out / "results.jsonl").read_text().splitlines()
    bad = json.loads(lines[1]) | {"outcome": "green"}
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(bad)]) + "\n")
    with pytest.raises(TranscriptError, match=r"results.jsonl:2: not a result: field 'outcome': 'green' is not one of"):
        read_results(path)


def test_a_recording_made_before_headers_still_rechecks(recorded, tmp_path):
    cases, out = recorded
    old = tmp_path / "old" / "transcripts.jsonl"
    old.parent.mkdir()
    old.write_text("\n".join((out / "transcripts.jsonl").read_text().splitlines()[1:]) + "\n")
    assert read_header(old, "transcripts") is None
    assert [t.case_id for t in read_transcripts(old)] == ["ok", "ok"]
    cases_dir = cases["ok"].source.parent
    assert main(["recheck", str(old), "--cases", str(cases_dir), "--out", str(tmp_path / "re")]) == 0
    assert read_header(tmp_path / "re" / "results.jsonl", "results")["server"]["version"] == "9.9"


def test_each_forced_transcript_records_the_text_it_forced(recorded):
    """Views read the forced text from the recording (ARCHITECTURE.md, rule 3), not back out of the
    request through a profile's forcing method."""
    _, out = recorded
    assert [t.forced_text for t in read_transcripts(out / "transcripts.jsonl")] == ["forced <think> text"] * 2


def test_a_recording_made_before_the_forced_text_was_recorded_gets_it_back_from_its_request(recorded, tmp_path):
    cases, out = recorded
    old = tmp_path / "old" / "transcripts.jsonl"
    old.parent.mkdir()
    lines = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    old.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "forced_text"}) + "\n" for line in lines))
    assert {t.forced_text for t in read_transcripts(old)} == {None}
    cases_dir = cases["ok"].source.parent
    assert main(["recheck", str(old), "--cases", str(cases_dir), "--out", str(tmp_path / "re")]) == 0
    assert "forced &lt;think&gt; text" in (tmp_path / "re" / "report.html").read_text()
