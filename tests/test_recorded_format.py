"""A run on a checkpoint's own format keeps the format's record (`response_format.json`), so `recheck` and
`compare` judge it again from the recording alone, in a fresh process; a missing or tampered record is exit 2
naming the file and the field; how each turn was written (`rendered_with`) is in the results and the reports.
Fast tier: a loopback server answers each turn case with its reference message."""

from __future__ import annotations

import json
import shutil
from html import escape
from pathlib import Path
from typing import Any

import pytest

from conformance.formats.checkpoint_format import served_format
from conformance.formats.recorded_format import RECORDED_FORMAT_FILE, format_document, read_recorded_format
from conformance.record.results import read_results
from conformance.suite.cases import load_suite
from tests.scripted_server import json_reply, scripted_server
from tests.test_checkpoint_format import REASON_RENDERING, invented_template, source_with
from tests.test_hostile import conformance, sse

CASES = ("turn-content", "turn-reasoning-then-content", "turn-one-call")  # one of them written from the template
NAME = "checkpoint:drops-reasoning"


def _answers(cases: list[Any]) -> dict[str, dict[str, Any]]:
    """Each turn case's reference message as an OpenAI message, by its request's messages."""
    answers = {}
    for case in cases:
        message = case.reference.message
        calls = [{"id": f"call_{i}", "type": "function",
                  "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
                 for i, call in enumerate(message.tool_calls)]
        answers[json.dumps(case.request["messages"])] = {
            "role": "assistant", "content": message.content or None, "reasoning": message.reasoning or None,
            **({"tool_calls": calls} if calls else {})}
    return answers


def _routes(answers: dict[str, dict[str, Any]]) -> dict:
    def chat(body: dict) -> Any:
        message = answers[json.dumps(body["messages"])]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        if not body.get("stream"):
            return json_reply({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                               "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        deltas = [{"role": "assistant", "content": ""}]
        deltas += [{key: message[key]} for key in ("reasoning", "content") if message.get(key)]
        deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(message.get("tool_calls", []))]
        chunks = [{"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
        chunks.append({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        return sse(*chunks)

    return {("POST", "/v1/chat/completions"): chat, ("GET", "/version"): lambda body: json_reply({"version": "9.9"})}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path]:
    """(a run on a checkpoint whose chat template drops reasoning, the checkpoint), recorded by the CLI."""
    root = tmp_path_factory.mktemp("recorded-format")
    source = source_with(root, "drops-reasoning", invented_template().replace(REASON_RENDERING, ""))
    cases = [case for case in load_suite(None, served_format(None, source)) if case.id in CASES]
    with scripted_server(_routes(_answers(cases))) as server:
        done = conformance("run", "--base-url", server.base_url, "--model", "m", "--profile", "hf", "--checkpoint",
                           source, "--forcing", "trust", *(arg for case in CASES for arg in ("--case", case)),
                           "--out", root / "run", timeout=120)
    assert done.returncode == 0, done.stderr
    return root / "run", source


def _outcomes(run_dir: Path) -> list[tuple]:
    return sorted((r.case_id, r.mode, r.outcome, r.rendered_with, r.reason) for r in read_results(run_dir / "results.jsonl"))


def test_the_run_keeps_its_checkpoints_format_and_its_record_reads_back_equal(recorded) -> None:
    run_dir, source = recorded
    kept = read_recorded_format(run_dir / RECORDED_FORMAT_FILE, NAME)
    assert kept == served_format(None, source) and kept.checkpoint == str(source)
    assert json.loads((run_dir / RECORDED_FORMAT_FILE).read_text())["chat_template"] == kept.chat_template


def test_recheck_in_a_fresh_process_judges_the_recording_alone_the_same(recorded, tmp_path: Path) -> None:
    run_dir, source = recorded
    copy = tmp_path / "copy"  # the checkpoint gone too: the recording is all there is
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("recheck-*"))
    done = conformance("recheck", copy / "transcripts.jsonl", "--out", tmp_path / "re", timeout=120)
    assert done.returncode == 0, done.stderr
    assert _outcomes(tmp_path / "re") == _outcomes(run_dir)
    assert {outcome for _, _, outcome, _, _ in _outcomes(run_dir)} == {"pass"} and len(_outcomes(run_dir)) == 6


def test_compare_of_two_recordings_on_it_in_a_fresh_process_finds_no_difference(recorded, tmp_path: Path) -> None:
    run_dir, _ = recorded
    done = conformance("compare", run_dir, run_dir, "--no-expect", "--json", "-", "--out", tmp_path / "cmp",
                       timeout=120)
    assert done.returncode == 0, done.stderr
    gate = json.loads(done.stdout)
    assert gate["verdict"]["outcome"] == "pass", gate["verdict"]
    assert json.loads((tmp_path / "cmp" / "gate.json").read_text())["verdict"] == gate["verdict"]


@pytest.mark.parametrize("tamper, field", [
    (None, "missing"),
    (lambda record: {**record, "name": "checkpoint:other"}, "name: 'checkpoint:other' is not the run's"),
    (lambda record: {**record, "eos_token": ""}, "eos_token:"),
    (lambda record: {**record, "special_tokens": ["x" * 300]}, "special_tokens[0]:"),
    (lambda record: {**record, "response_template": []}, "response_template:"),
    (lambda record: {**record, "legacy_flags": ["--tool-call-parser", "x"]}, "the record: Additional properties"),
])
@pytest.mark.parametrize("verb", ["recheck", "compare"])
def test_a_missing_or_tampered_format_record_is_exit_2_naming_the_file_and_field(
        recorded, tmp_path: Path, tamper, field: str, verb: str) -> None:
    run_dir, _ = recorded
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("recheck-*"))
    record = copy / RECORDED_FORMAT_FILE
    if tamper is None:
        record.unlink()
    else:
        record.write_text(json.dumps(tamper(json.loads(record.read_text()))))
    args = ([copy / "transcripts.jsonl"] if verb == "recheck" else [run_dir, copy, "--no-expect"])
    done = conformance(verb, *args, "--out", tmp_path / "out", timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"{record}: {field}" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_how_each_turn_was_written_is_in_the_results_and_the_reports(recorded) -> None:
    run_dir, _ = recorded
    written = {r.case_id: (r.rendered_with, r.rendered_why) for r in read_results(run_dir / "results.jsonl")}
    assert {case: way for case, (way, _) in written.items()} == {
        "turn-content": "chat_template", "turn-one-call": "chat_template",
        "turn-reasoning-then-content": "response_template"}
    why = written["turn-reasoning-then-content"][1]
    assert why.startswith("its two templates disagree") and written["turn-content"][1] is None
    note = "written from the response_template's delimiters: its two templates disagree"
    markdown = (run_dir / "report.md").read_text()
    section = markdown.split("## Turns not written by the chat template", 1)[1].split("##", 1)[0]
    assert "turn-reasoning-then-content" in section and note in section and "turn-one-call" not in section
    html = (run_dir / "report.html").read_text()
    rows = {row.split("<b>", 1)[1].split("</b>", 1)[0]: row for row in html.split("<details")[1:]}
    assert all(escape(note) in rows[f"turn-reasoning-then-content[{mode}]"] for mode in ("non-stream", "stream"))
    assert not any("delimiters" in rows[f"turn-content[{mode}]"] for mode in ("non-stream", "stream"))


def test_a_results_line_saying_another_writer_is_refused_naming_the_field(recorded, tmp_path: Path) -> None:
    run_dir, _ = recorded
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    lines[1] = json.dumps({**record, "rendered_with": "by-hand"})
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"results.jsonl:2: not a result: field 'rendered_with': 'by-hand' is not one of"):
        read_results(tmp_path / "results.jsonl")


def test_a_shipped_formats_run_writes_no_format_record() -> None:
    assert format_document(served_format(None, None))["name"] == "qwen3-hermes"  # readable, but never written:
    from conformance.formats.recorded_format import needs_record  # its name says it all
    assert not needs_record(served_format(None, None))
