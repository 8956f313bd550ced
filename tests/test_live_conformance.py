"""The whole default case set against real vLLM 0.32 (vllm tier), under both profiles.

Besides "no fail, no error", the known vLLM 0.32 contract is asserted directly from the recorded
transcripts, independently of the case expectations: under hf the four request patterns it cannot
guarantee are refused with 400 and the right `param`, tool calls arrive whole and reasoning is in
`reasoning`; under legacy (hermes + qwen3) the same patterns are accepted and arguments stream in
fragments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.audit.predictors.vllm_032_answers import EXPLAINED_DIFFERENCES, HfCheckpoint, judge_recording, predict
from conformance.formats.markers import markers_for_checkpoint
from conformance.record.recording import read_transcripts
from conformance.record.results import read_results
from conformance.record.transcript import Transcript
from conformance.record.wire import read_stream, response_message
from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.servers.profiles import PROFILES
from conformance.suite.cases import load_suite

pytestmark = pytest.mark.vllm
pytest_plugins = ["pytester"]


def unsupported_pattern(request: dict[str, Any]) -> str | None:
    """Which of hf's four unguaranteed request patterns a chat request uses (checked in hf's order)."""
    if not request.get("tools") or request.get("tool_choice") == "none":
        return None
    if any((tool.get("function") or tool).get("strict") is True for tool in request["tools"]):
        return "strict"
    choice = request.get("tool_choice")
    if choice == "required":
        return "required"
    if isinstance(choice, dict):
        return "named"
    if request.get("parallel_tool_calls") is False:
        return "parallel_tool_calls=false"
    return None


PARAM_OF = {"strict": "tools", "required": "tool_choice", "named": "tool_choice",
            "parallel_tool_calls=false": "parallel_tool_calls"}


def live_run(server: Any, checkpoint: Path, out: Path) -> tuple[Any, list[Transcript]]:
    target = Target(base_url=server.base_url, model=server.model, profile=server.profile.name,
                    version=server.version, args=tuple(server.args))
    output = run(load_suite(), target, out, markers=markers_for_checkpoint(checkpoint))
    return output, read_transcripts(out / "transcripts.jsonl")


@pytest.fixture(scope="module")
def hf_run(hf_server, tiny_checkpoint, tmp_path_factory):
    return live_run(hf_server, tiny_checkpoint, tmp_path_factory.mktemp("live-hf"))


@pytest.fixture(scope="module")
def legacy_run(legacy_server, tiny_checkpoint, tmp_path_factory):
    return live_run(legacy_server, tiny_checkpoint, tmp_path_factory.mktemp("live-legacy"))


def describe_problems(output: Any) -> str:
    return "\n".join(f"{r.profile} {r.name}: {r.outcome}: {r.reason}" for r in output.results
                     if r.outcome in ("fail", "error"))


@pytest.mark.parametrize("run_fixture", ["hf_run", "legacy_run"])
def test_the_default_case_set_has_no_fail_and_no_error(run_fixture, request):
    output, transcripts = request.getfixturevalue(run_fixture)
    assert len(output.results) == len(transcripts) >= 80  # 40+ cases, both modes
    assert output.summary.counts["fail"] == output.summary.counts["error"] == 0, describe_problems(output)
    assert output.summary.counts["pass"] > 0.8 * len(output.results)


def chat(transcripts: list[Transcript]) -> list[Transcript]:
    return [t for t in transcripts if t.endpoint == "chat"]


def test_hf_refuses_each_unguaranteed_pattern_with_400_and_its_param(hf_run):
    _, transcripts = hf_run
    seen = set()
    for transcript in chat(transcripts):
        pattern = unsupported_pattern(transcript.request)
        if pattern is None:
            continue
        seen.add(pattern)
        error = transcript.error_body["error"]
        assert (transcript.status, error["param"]) == (400, PARAM_OF[pattern]), (transcript.case_id, error)
        assert "response_template parsing cannot guarantee" in error["message"]
    assert seen == set(PARAM_OF)  # the case set covers all four, in both modes


def test_legacy_accepts_those_patterns(legacy_run):
    _, transcripts = legacy_run
    patterns = {unsupported_pattern(t.request): t for t in chat(transcripts)}
    patterns.pop(None, None)
    assert set(patterns) == set(PARAM_OF)
    for pattern, transcript in patterns.items():
        assert transcript.status == 200, (pattern, transcript.case_id, transcript.error_body)


def tool_streams(transcripts: list[Transcript]) -> list[Any]:
    readings = [read_stream(t) for t in chat(transcripts) if t.mode == "stream" and t.status == 200]
    return [r for r in readings if r.tool_deltas]


def test_hf_tool_calls_arrive_whole(hf_run):
    readings = tool_streams(hf_run[1])
    assert len(readings) >= 5
    for reading in readings:
        for index, deltas in reading.tool_deltas.items():
            assert len(deltas) == 1, deltas  # one delta carrying id, type, name and all arguments
            function = deltas[0]["function"]
            assert deltas[0]["id"].startswith("chatcmpl-tool-") and function["name"] and function["arguments"]


def test_legacy_streams_arguments_in_fragments(legacy_run):
    readings = tool_streams(legacy_run[1])
    assert len(readings) >= 5
    fragmented = [deltas for r in readings for deltas in r.tool_deltas.values() if len(deltas) > 2]
    assert fragmented
    for deltas in fragmented:
        assert "arguments" not in deltas[0]["function"] or not deltas[0]["function"]["arguments"]  # name first
        assert all(set(d["function"]) == {"arguments"} for d in deltas[1:])  # then argument pieces


def test_hf_reasoning_arrives_in_the_reasoning_field(hf_run):
    _, transcripts = hf_run
    with_reasoning = 0
    for transcript in chat(transcripts):
        if transcript.status != 200:
            continue
        message = read_stream(transcript).message if transcript.mode == "stream" else response_message(transcript)
        assert "reasoning_content" not in message.reasoning_keys
        with_reasoning += bool(message.reasoning)
        if transcript.mode == "non-stream":
            assert "reasoning" in transcript.response["choices"][0]["message"]
    assert with_reasoning >= 5


@pytest.mark.parametrize("run_fixture", ["hf_run", "legacy_run"])
def test_by_default_both_profiles_refuse_a_browser_preflight_without_an_allow_origin(run_fixture, request):
    """Contract 5: --allowed-origins defaults to [], so Starlette answers 400 and the browser blocks."""
    _, transcripts = request.getfixturevalue(run_fixture)
    preflights = [t for t in transcripts if t.endpoint == "preflight"]
    assert {t.request["path"] for t in preflights} == {"/chat/completions", "/responses"}
    for transcript in preflights:
        assert (transcript.status, transcript.response["body"]) == (400, "Disallowed CORS origin")
        assert "access-control-allow-origin" not in transcript.response["headers"]
        assert transcript.response["headers"]["access-control-max-age"] == "600"


def test_pytest_plugin_runs_the_cases_against_real_vllm(pytester, hf_server, tiny_checkpoint):
    result = pytester.runpytest(
        f"--conformance-base-url={hf_server.base_url}", f"--conformance-model={hf_server.model}",
        "--conformance-profile=hf", "-m", "reasoning and tool_call", "-p", "no:cacheprovider",
        f"--conformance-checkpoint={tiny_checkpoint}",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 4 and not {"failed", "errors", "error"} & set(outcomes), outcomes


def test_cli_launches_real_vllm_and_reports(tmp_path):
    from conformance.cli import main

    out = tmp_path / "run"
    assert main(["run", "--launch", "legacy", "--case", "reasoning-then-one-call", "--out", str(out)]) == 0
    results = read_results(out / "results.jsonl")
    assert [(r.mode, r.outcome) for r in results] == [("non-stream", "pass"), ("stream", "pass")]
    stamp = json.loads((out / "run.json").read_text())["stamp"]
    assert stamp["server_version"] == "0.32.0" and stamp["checkpoint_revision"].startswith("sha256:")
    assert "--tool-call-parser" in stamp["server_args"] and "hermes" in stamp["server_args"]
    assert list(out.glob("vllm-legacy-*.log"))  # the server log sits next to the reports


def forced_problems(transcripts: list[Transcript]) -> dict[tuple[str, str], list[str]]:
    """(case id, mode) -> problems, for every forced chat answer whose token ids could be verified."""
    return {(t.case_id, t.mode): t.forcing_problems for t in chat(transcripts)
            if t.forced and t.forcing_problems is not None}


def test_hf_emits_every_forced_output_exactly_with_canonical_marker_tokens(hf_run):
    # truncated outputs (max_tokens) are checked as prefixes of the forced text
    problems = forced_problems(hf_run[1])
    assert len(problems) >= 60
    assert {key: found for key, found in problems.items() if found} == {}


def test_the_offline_prediction_of_hf_agrees_with_every_forced_recording(hf_run, tiny_checkpoint):
    """conformance/audit/predictors/vllm_032_answers.py: the fork's parse shaped as the server shapes it, from the case alone,
    equals what the real server answered (or the difference is explained there), both endpoints."""
    _, transcripts = hf_run
    served = PROFILES["hf"].fixture_variant  # cases needing another variant are not sent on this run
    cases = {case.id: case for case in load_suite() if case.fixture_variant in (None, served)}
    checkpoint = HfCheckpoint.load(tiny_checkpoint)
    differences, judged = {}, 0
    for transcript in transcripts:
        case = cases.get(transcript.case_id)
        if case is None or not transcript.forced or case.force is None or transcript.skip_reason is not None:
            continue
        judged += 1
        check = judge_recording(transcript, predict(checkpoint, case.request, case.force, transcript.mode, case.endpoint))
        if check.outcome != "pass":
            differences[(transcript.case_id, transcript.mode)] = check.reason
    assert judged == sum(len(case.modes) for case in cases.values() if case.force is not None)
    assert set(differences) == set(EXPLAINED_DIFFERENCES), differences


def test_hermes_replaces_the_forced_output_when_tool_choice_is_required(legacy_run):
    # contract 2.2: with `required`, hermes guides generation with its own grammar and drops the regex
    _, transcripts = legacy_run
    problems = forced_problems(transcripts)
    assert problems[("tool-choice-required", "non-stream")] and problems[("tool-choice-required", "stream")]
    assert "not the forced text" in problems[("tool-choice-required", "non-stream")][0]
