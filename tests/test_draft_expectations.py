"""scripts/draft_expectations.py over a run recorded from the loopback fake server: it names the existing
expectations that hold on the new profile's answers, writes an alias of one (anchoring a held entry
that had no anchor), drafts the expectation of an answer none predicts, and the written case files
then judge the very recording as passing."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conformance.record.recording import read_transcripts
from conformance.record.transcript import ServerStamp, Transcript
from conformance.run.driver import Target
from conformance.run.engine import recheck, run
from conformance.servers.profiles import expectation_for
from conformance.suite.cases import load_suite
from tests.fake_server import PLAIN, REASONING, fake_server

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "draft_expectations.py"
PROFILE = "next-server"

CASES = f"""\
tools:
  get_weather:
    type: function
    function:
      name: get_weather
      description: Weather forecast for a city.
      parameters: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}
cases:
  - id: plain-answer
    description: The plain content answer comes back as content.
    features: [content]
    request:
      messages: [{{role: user, content: plain}}]
    expect:
      hf: &plain-answer
        message: {{content: "{PLAIN}"}}
        finish_reason: stop
      legacy: *plain-answer

  - id: reasoning-and-call
    description: Reasoning, then one whole call, both parsed by the server.
    features: [reasoning, tool_call]
    request:
      messages: [{{role: user, content: ok}}]
      tools: [get_weather]
    expect:
      hf:
        message:
          reasoning: "{REASONING.encode('unicode_escape').decode()}"
          tool_calls:
            - {{name: get_weather, arguments: {{city: Paris}}}}
        finish_reason: tool_calls
      legacy:
        message: {{content: "not what it says"}}
        finish_reason: stop

  - id: refused-request
    description: A request the server refuses with HTTP 400 here.
    features: [request_error]
    request:
      messages: [{{role: user, content: refuse}}]
      tools: [get_weather]
    expect:
      hf:
        message: {{content: "an answer"}}
        finish_reason: stop
      legacy:
        error: {{status: 422}}
"""


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("draft_expectations", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path]:
    """(a case folder, the run directory of PROFILE recorded from the fake server over its cases)."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "sample.yaml").write_text(CASES, encoding="utf-8")
    with fake_server() as server:
        run(load_suite(cases), Target(base_url=server.base_url, model="fake", profile=PROFILE), tmp_path / "run")
    return cases, tmp_path / "run"


def test_it_names_the_existing_expectations_that_hold_and_drafts_the_rest(tool, recorded) -> None:
    cases, run_dir = recorded
    found = {draft.case.id: draft for draft in tool.drafts(run_dir, PROFILE, cases)}
    assert {case_id: draft.holds for case_id, draft in found.items()} == {
        "plain-answer": ("hf", "legacy"), "reasoning-and-call": ("hf",), "refused-request": ()}
    refused = found["refused-request"]
    assert refused.drafted["error"]["status"] == 400 and refused.drafted["error"]["param"] == "tool_choice"
    assert refused.drafted_problems == ()  # the drafted one, judged on the recording, holds


def test_writing_puts_an_alias_or_the_draft_after_the_named_profile_and_the_recording_then_passes(
        tool, recorded, capsys) -> None:
    cases, run_dir = recorded
    before = (cases / "sample.yaml").read_text(encoding="utf-8")
    assert tool.main([str(run_dir), PROFILE, "--cases", str(cases), "--write", "legacy"]) == 0
    text = (cases / "sample.yaml").read_text(encoding="utf-8")
    assert "      legacy: *plain-answer\n      next-server: *plain-answer\n" in text
    assert "      hf: &reasoning-and-call\n" in text  # the held entry had no anchor: it got one
    assert "        finish_reason: stop\n      next-server: *reasoning-and-call\n" in text  # after legacy's block
    assert "# refused-request (sample.yaml:" in capsys.readouterr().out
    suite = load_suite(cases)
    by_id = {case.id: case for case in suite}
    assert expectation_for(by_id["plain-answer"], PROFILE) == expectation_for(by_id["plain-answer"], "hf")
    assert expectation_for(by_id["reasoning-and-call"], PROFILE) == expectation_for(by_id["reasoning-and-call"], "hf")
    assert expectation_for(by_id["refused-request"], PROFILE).error.status == 400
    results = recheck(read_transcripts(run_dir / "transcripts.jsonl"), suite)
    assert results and {result.outcome for result in results} == {"pass"}
    # a second pass writes nothing: every case has the profile now; nothing else was removed
    assert tool.main([str(run_dir), PROFILE, "--cases", str(cases), "--write", "legacy"]) == 0
    assert (cases / "sample.yaml").read_text(encoding="utf-8") == text
    removed = Counter(before.splitlines()) - Counter(text.splitlines())
    assert removed == Counter(["      hf:"])  # the one line that gained an anchor


def test_a_run_without_the_profile_is_exit_2(tool, recorded, capsys) -> None:
    cases, run_dir = recorded
    assert tool.main([str(run_dir), "other-profile", "--cases", str(cases)]) == 2
    assert "holds no transcript of profile 'other-profile'" in capsys.readouterr().err


def test_arguments_that_are_no_json_are_drafted_verbatim_and_absent_ones_as_the_empty_object(tool) -> None:
    calls = [{"id": "call-0", "type": "function", "function": {"name": "a", "arguments": ""}},
             {"id": "call-1", "type": "function", "function": {"name": "b"}},
             {"id": "call-2", "type": "function", "function": {"name": "c", "arguments": '{"x": 1}'}}]
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": calls}, "finish_reason": "tool_calls"}]}
    transcript = Transcript(case_id="x", mode="non-stream", profile=PROFILE, endpoint="chat",
                            server=ServerStamp("http://127.0.0.1:1/v1", "fake", PROFILE), request={}, status=200,
                            response=answer)
    assert tool.observed(transcript) == {"message": {"tool_calls": [
        {"name": "a", "arguments_raw": ""}, {"name": "b", "arguments": {}}, {"name": "c", "arguments": {"x": 1}}]},
        "finish_reason": "tool_calls"}


def test_a_new_anchor_is_the_case_id_or_a_yaml_spelling_of_case_and_profile(tool) -> None:
    assert tool.new_anchor("plain-answer", "hf-0.33", set()) == "plain-answer"
    anchor = tool.new_anchor("plain-answer", "hf-0.33", {"plain-answer"})
    assert anchor == "plain-answer-hf-0-33"
    assert yaml.safe_load(f"a: &{anchor} 1\nb: *{anchor}\n") == {"a": 1, "b": 1}  # PyYAML reads it back


def test_a_case_judged_by_its_formats_parse_gets_no_entry_written(tool, tmp_path, capsys) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "parsed.yaml").write_text(
        "cases:\n  - id: parsed-answer\n    description: A plain answer judged by the format's own parse of its text.\n"
        "    features: [content]\n    request:\n      messages: [{role: user, content: plain}]\n    reference: parse\n"
        "    force: \"Hello there.\"\n    expect:\n      legacy: {error: {status: 400}}\n", encoding="utf-8")
    [case] = load_suite(cases)
    draft = tool.Draft(case, (), {"message": {"content": "Hello there."}, "finish_reason": "stop"}, ())
    assert tool.write_entries([draft], PROFILE, "legacy") == []
    assert "next-server" not in (cases / "parsed.yaml").read_text(encoding="utf-8")
