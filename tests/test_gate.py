"""The gate's engine without vLLM: differences classified from hand-made recordings, expectations,
the verdict, timing, `compare` and `gate` against loopback fake servers (fast tier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.compare.diff import DIFFERENCE_KINDS
from conformance.compare.expectations import ExpectationsError, load_expectations
from conformance.compare.gate import build_gate
from conformance.compare.timing import distribution, stream_timings
from conformance.record.outcomes import Check
from conformance.record.results import CaseResult
from conformance.record.run_dir import Recording
from tests.engine_helpers import error_transcript, response_transcript, stream_transcript
from tests.fake_server import ALLOWED_ORIGIN, REASONING, fake_server

REFUSAL = {"error": {"message": "response_template parsing cannot guarantee required tool choice",
                     "param": "tool_choice", "code": 400}}


def call(arguments: str = '{"city": "Paris"}', name: str = "get_weather", index: int = 0) -> dict:
    return {"index": index, "id": f"call-{index}", "type": "function", "function": {"name": name, "arguments": arguments}}


def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def whole_stream(arguments: str = '{"city": "Paris"}', reasoning_key: str = "reasoning") -> list[dict]:
    return [chunk({"role": "assistant", "content": ""}), chunk({reasoning_key: REASONING}),
            chunk({"tool_calls": [call(arguments)]}), chunk({}, "tool_calls")]


def fragmented_stream() -> list[dict]:
    name = {"index": 0, "id": "call-0", "type": "function", "function": {"name": "get_weather"}}
    pieces = [{"index": 0, "function": {"arguments": part}} for part in ('{"city', '": "Par', 'is"}')]
    return [chunk({"role": "assistant", "content": ""}), chunk({"reasoning": REASONING}),
            chunk({"tool_calls": [name]}), *(chunk({"tool_calls": [p]}) for p in pieces), chunk({}, "tool_calls")]


def ns_call(arguments: str = '{"city": "Paris"}', **extra) -> dict:
    return {"reasoning": REASONING, "content": None,
            "tool_calls": [{"id": "call-0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}],
            **extra}


def result(case_id: str, mode: str, outcome: str = "pass", checks: list[Check] | None = None,
           features: tuple[str, ...] = ("tool_call",)) -> CaseResult:
    return CaseResult(case_id, mode, "hf", outcome, "" if outcome == "pass" else "it broke", features=features,
                      description=f"the {case_id} case", checks=checks or [])


def recording(label: str, transcripts: list, results: list | None = None) -> Recording:
    for transcript in transcripts:  # hand-made transcripts default to case "c": name them after their result
        transcript.profile = label
    results = results if results is not None else [result(t.case_id, t.mode) for t in transcripts]
    return Recording(label, transcripts, results, {"profile": label, "server_version": "test"})


def named(transcript, case_id: str):
    transcript.case_id = case_id
    return transcript


def kinds_of(gate: dict) -> set[tuple[str, str, str, str | None]]:
    return {(d["case_id"], d["mode"], d["kind"], d["field"]) for d in gate["differences"]}


@pytest.fixture
def every_kind() -> tuple[Recording, Recording]:
    """One case per difference kind, each produced on purpose (and one case with no difference)."""
    base = [
        named(response_transcript(ns_call(), "tool_calls"), "same"),
        named(response_transcript(ns_call(), "tool_calls"), "refused"),
        named(error_transcript(400, REFUSAL), "accepted"),
        named(response_transcript(ns_call('{"days": "3"}'), "tool_calls"), "cast"),
        named(stream_transcript(whole_stream(reasoning_key="reasoning_content")), "renamed"),
        named(response_transcript(ns_call(), "tool_calls"), "finish"),
        named(stream_transcript(fragmented_stream()), "fragments"),
        named(response_transcript(ns_call(), "tool_calls"), "usage"),
        named(stream_transcript(whole_stream()), "replay"),
        named(response_transcript(ns_call(), "tool_calls"), "broken"),
    ]
    cand = [
        named(response_transcript(ns_call('{"city":"Paris"}'), "tool_calls"), "same"),  # equal as JSON values
        named(error_transcript(400, REFUSAL), "refused"),
        named(response_transcript(ns_call(), "tool_calls"), "accepted"),
        named(response_transcript(ns_call('{"days": 3}'), "tool_calls"), "cast"),
        named(stream_transcript(whole_stream()), "renamed"),
        named(response_transcript(ns_call(), "stop"), "finish"),
        named(stream_transcript(whole_stream()), "fragments"),
        named(response_transcript(ns_call(), "tool_calls"), "usage"),
        named(stream_transcript(whole_stream()), "replay"),
        named(response_transcript(ns_call(), "tool_calls"), "broken"),
    ]
    for transcripts, tokens in ((base, 4), (cand, 0)):
        transcripts[7].response["usage"] = {"completion_tokens": 9,
                                            "completion_tokens_details": {"reasoning_tokens": tokens}}
    replay_fail = Check("client_replay", "fail", "finding", reason="openai client raised KeyError")
    base_results = [result(t.case_id, t.mode) for t in base]
    cand_results = [result(t.case_id, t.mode) for t in cand]
    base_results[8] = result("replay", "stream", checks=[replay_fail])
    cand_results[8] = result("replay", "stream", checks=[Check("client_replay", "pass", "finding")])
    cand_results[9] = result("broken", "non-stream", "fail")
    # at 3 tokens per delta the candidate's stream no longer adds up to its one-token stream's message
    for transcripts, results, outcome in ((base, base_results, "pass"), (cand, cand_results, "fail")):
        transcripts.append(granular(named(stream_transcript(whole_stream()), "split"), "stream@3"))
        results.append(result("split", "stream@3", outcome, features=("tool_call", "stream_granularity"),
                              checks=[Check("split_invariance", outcome, reason="stream@3: ... first divergent chunk: 3")]))
    # the second turn as openai-python sends it back renders into another prompt under the candidate
    for transcripts, results, prompt in ((base, base_results, "<think>plan</think>\n<call>"),
                                         (cand, cand_results, "<think>plan</think>\n\n\n<call>")):
        turn2 = granular(named(response_transcript({"role": "assistant", "content": "Sunny."}, "stop"), "looped"),
                         "turn2@openai-python")
        turn2.prompts = {"sent": prompt, "sent_from": "prompt_token_ids", "reference": "<think>plan</think>\n<call>",
                         "reference_without_reasoning": "\n<call>"}
        transcripts.append(turn2)
        results.append(result("looped", "turn2@openai-python", features=("tool_call", "multi_turn")))
    return recording("legacy", base, base_results), recording("hf", cand, cand_results)


def test_a_split_not_judged_on_one_side_is_no_difference(every_kind):
    """A granular stream whose one-token reference came merged under load is a skip there (saying so): nothing was
    compared on that side, so the gate reports no stream_granularity difference for it."""
    baseline, candidate = every_kind
    merged = Check("split_invariance", "skip", reason="the one-token stream of the case came merged all the same")
    baseline.results[-2] = result("split", "stream@3", features=("tool_call", "stream_granularity"), checks=[merged])
    candidate.results[-2] = result("split", "stream@3", features=("tool_call", "stream_granularity"),
                                   checks=[Check("split_invariance", "pass")])
    assert ("split", "stream@3", "stream_granularity", "split_invariance") not in kinds_of(build_gate(baseline, candidate))


def granular(transcript, mode: str):
    transcript.mode = mode
    return transcript


def test_every_difference_kind_is_classified_with_both_values(every_kind):
    gate = build_gate(*every_kind)
    assert kinds_of(gate) == {
        ("refused", "non-stream", "request_refused", "status"),
        ("accepted", "non-stream", "request_accepted", "status"),
        ("cast", "non-stream", "message", "tool_calls[0].arguments"),
        ("renamed", "stream", "reasoning_field", "reasoning_field"),
        ("finish", "non-stream", "finish_reason", "finish_reason"),
        ("fragments", "stream", "stream_shape", "tool_call_streaming"),
        ("fragments", "stream", "stream_shape", "tool_call_deltas"),
        ("usage", "non-stream", "usage", "usage.completion_tokens_details.reasoning_tokens"),
        ("replay", "stream", "client_replay", "client_replay"),
        ("broken", "non-stream", "outcome", None),
        ("split", "stream@3", "stream_granularity", "split_invariance"),
        ("split", "stream@3", "outcome", None),
        ("looped", "turn2@openai-python", "multi_turn", "prompt"),
    }
    assert {d["kind"] for d in gate["differences"]} == set(DIFFERENCE_KINDS)
    by_case = {(d["case_id"], d["field"]): d for d in gate["differences"]}
    refused = by_case[("refused", "status")]
    assert refused["baseline"] == {"status": 200}
    assert refused["candidate"] == {"status": 400, "param": "tool_choice", "message": REFUSAL["error"]["message"]}
    assert by_case[("cast", "tool_calls[0].arguments")]["baseline"] == {"json": {"days": "3"}}
    assert by_case[("cast", "tool_calls[0].arguments")]["candidate"] == {"json": {"days": 3}}
    assert by_case[("renamed", "reasoning_field")]["baseline"] == ["reasoning_content"]
    assert by_case[("fragments", "tool_call_deltas")]["baseline"] == [4]
    assert by_case[("fragments", "tool_call_deltas")]["candidate"] == [1]
    assert by_case[("broken", None)]["baseline"] == "pass" and by_case[("broken", None)]["candidate"] == "fail"
    assert all(d["features"][0] == "tool_call" and d["description"] for d in gate["differences"])
    split = by_case[("split", "split_invariance")]
    assert split["baseline"]["outcome"] == "pass" and split["candidate"]["outcome"] == "fail"
    assert "first divergent chunk: 3" in split["summary"]
    looped = by_case[("looped", "prompt")]
    assert "as openai-python sends it back: the model's own turn under the baseline, parts from the model's turn " \
           "at character 20" in looped["summary"]
    assert gate["verdict"]["exit_code"] == 1 and gate["verdict"]["unacknowledged"] == 13


def test_identical_recordings_pass_and_a_case_without_difference_is_a_row_unchanged(every_kind):
    base, _ = every_kind
    gate = build_gate(base, base)
    assert gate["differences"] == [] and gate["verdict"]["outcome"] == "pass" and gate["verdict"]["exit_code"] == 0
    rows = {row["case_id"]: row for row in build_gate(*every_kind)["behaviours"]}
    assert rows["same"]["changed"] is False and rows["same"]["acknowledged"] is None
    assert rows["refused"]["changed"] is True and rows["refused"]["kinds"] == ["request_refused"]
    assert rows["refused"]["acknowledged"] is False  # no expectations: nothing is acknowledged
    assert rows["refused"]["candidate"].startswith("HTTP 400 param tool_choice: response_template parsing")
    assert "call get_weather" in rows["refused"]["baseline"]


EXPECT_ALL = """\
acknowledge:
  - {feature: tool_call, kind: request_refused, reason: hf refuses required tool choice}
  - {feature: tool_call, kind: request_accepted, reason: the candidate accepts it now}
  - {case: cast, kind: message, field: "tool_calls[*].arguments", reason: schema casting of strings}
  - {case: "*", kind: reasoning_field, reason: the field is renamed to reasoning}
  - {case: finish, kind: finish_reason, mode: non-stream, reason: finish reason follows the calls}
  - {feature: tool_call, kind: stream_shape, reason: whole calls instead of fragments}
  - {case: usage, kind: usage, field: "usage.*reasoning_tokens", reason: reasoning tokens are not counted}
  - {case: replay, kind: client_replay, reason: the SDK copes with hf streams}
  - {case: broken, kind: outcome, reason: an outcome cannot be acknowledged away}
  - {feature: stream_granularity, kind: stream_granularity, reason: the candidate breaks at 3 tokens per delta}
  - {feature: multi_turn, kind: multi_turn, reason: the candidate renders turn 2 with newlines the model did not write}
"""


def test_an_answer_that_is_not_the_forced_text_is_recorded_as_unforced(every_kind):
    """hermes guides `tool_choice: required` with its own grammar: the tiny model's own output replaces the
    forced text, and the gate record says so for that side, case and mode (an unverified answer is not marked)."""
    baseline, candidate = every_kind
    refused = next(t for t in baseline.transcripts if t.case_id == "refused")
    refused.forcing_problems = ["the output is not the forced text: expected '<tool_call>', got 'true'"]
    next(t for t in candidate.transcripts if t.case_id == "cast").forcing_problems = []  # exactly the forced text
    gate = build_gate(baseline, candidate)
    difference = next(d for d in gate["differences"] if d["case_id"] == "refused")
    assert difference["excerpt"]["unforced"] == {"baseline": refused.forcing_problems[0]}
    rows = {row["case_id"]: row for row in gate["behaviours"]}
    assert rows["refused"]["unforced"] == {"baseline": ["non-stream"]}
    assert rows["cast"]["unforced"] == {} and rows["same"]["unforced"] == {}
    assert all(d["excerpt"]["unforced"] == {} for d in gate["differences"] if d["case_id"] != "refused")


def write(tmp_path: Path, text: str, name: str = "expect.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_acknowledged_differences_pass_but_a_newly_failing_case_never_does(every_kind, tmp_path):
    entries = load_expectations(write(tmp_path, EXPECT_ALL))
    gate = build_gate(*every_kind, entries)
    unacknowledged = [d for d in gate["differences"] if d["acknowledged"] is None]
    assert [(d["case_id"], d["kind"]) for d in unacknowledged] == [("broken", "outcome"), ("split", "outcome")]
    assert gate["verdict"] | {"line": ""} == {"exit_code": 1, "outcome": "fail", "line": "", "unacknowledged": 2,
                                              "acknowledged": 11, "stale": 0, "newly_failing": 2, "compared": 12}
    acknowledged = next(d for d in gate["differences"] if d["case_id"] == "cast")["acknowledged"]
    assert acknowledged == {"reason": "schema casting of strings", "source": "expect.yaml:4"}
    fixed = Recording("hf", every_kind[1].transcripts, [r if r.case_id not in ("broken", "split") else
                                                        result(r.case_id, r.mode, checks=every_kind[0].results[-1].checks)
                                                        for r in every_kind[1].results], {})
    assert build_gate(every_kind[0], fixed, entries)["verdict"]["exit_code"] == 0


def test_an_acknowledgement_that_no_longer_matches_is_stale_and_fails_only_when_strict(every_kind, tmp_path):
    entries = load_expectations(write(tmp_path, EXPECT_ALL + "  - {case: same, kind: message, reason: it used to differ}\n"))
    fixed = Recording("hf", every_kind[1].transcripts, [r if r.case_id not in ("broken", "split") else
                                                        result(r.case_id, r.mode, checks=every_kind[0].results[-1].checks)
                                                        for r in every_kind[1].results], {})
    gate = build_gate(every_kind[0], fixed, entries)
    assert gate["stale"] == [
        {"selector": {"case": ["broken"]}, "kind": "outcome", "reason": "an outcome cannot be acknowledged away",
         "source": "expect.yaml:10"},
        {"selector": {"feature": ["stream_granularity"]}, "kind": "stream_granularity",
         "reason": "the candidate breaks at 3 tokens per delta", "source": "expect.yaml:11"},
        {"selector": {"case": ["same"]}, "kind": "message", "reason": "it used to differ", "source": "expect.yaml:13"},
    ]
    assert gate["verdict"]["exit_code"] == 0 and gate["verdict"]["stale"] == 3
    strict = build_gate(every_kind[0], fixed, entries, strict=True)
    assert strict["verdict"]["exit_code"] == 1 and "--strict" in strict["verdict"]["line"]


@pytest.mark.parametrize("text, message", [
    ("acknowledge:\n  - {case: a, kind: mesage, reason: a typo in the kind}\n",
     r"expect.yaml:2: acknowledge\[0\].kind: 'mesage' is not one of"),
    ("acknowledge:\n  - case: a\n    kind: message\n", r"expect.yaml:2: acknowledge\[0\]: 'reason' is a required property"),
    ("acknowledge:\n  - {kind: message, reason: which cases though}\n",
     r"expect.yaml:2: acknowledge\[0\]: an entry needs `case` or `feature`"),
    ("acknowledge:\n  - {case: a, kind: message, reason: an unknown key, colour: red}\n",
     r"expect.yaml:2: acknowledge\[0\]: Additional properties are not allowed \('colour' was unexpected\)"),
    ("acknowledge: [\n", r"expect.yaml:2: invalid YAML"),
    ("- just a list\n", r"expect.yaml:1: the file: \['just a list'\] is not of type 'object'"),
    ("acknowledge:\n  - case: a\n    kind: message\n    reason: a section that is not there\n    reference: contract 9.9\n",
     r"expect.yaml:5: acknowledge\[0\].reference: vllm-0.32-contract.md has no section 9.9"),
])
def test_a_malformed_expectations_file_names_the_line_and_field(tmp_path, text, message):
    with pytest.raises(ExpectationsError, match=message):
        load_expectations(write(tmp_path, text))


def test_an_occasional_acknowledgement_is_never_stale_but_still_acknowledges(every_kind, tmp_path):
    """A difference that comes and goes between runs (how a busy server groups its last tokens) is acknowledged
    when it shows and is not stale when it does not."""
    text = EXPECT_ALL + "  - {case: same, kind: message, reason: it comes and goes with the load, occasional: true}\n"
    entries = load_expectations(write(tmp_path, text))
    assert entries[-1].occasional and not entries[0].occasional
    gate = build_gate(every_kind[0], every_kind[0], entries, strict=True)
    assert "it comes and goes" not in json.dumps(gate["stale"]) and len(gate["stale"]) == len(entries) - 1
    differing = Recording("hf", [named(response_transcript(ns_call('{"city": "Rome"}'), "tool_calls"), "same")],
                          [result("same", "non-stream")], {})
    acknowledged = build_gate(every_kind[0], differing, entries)["differences"]
    assert {d["acknowledged"]["reason"] for d in acknowledged if d["case_id"] == "same"} == {
        "it comes and goes with the load"}


def test_stream_timings_and_their_distribution():
    transcript = stream_transcript(fragmented_stream())  # lines 0.01 s apart
    times = stream_timings(transcript)
    assert times == {"first_byte": 0.0, "first_reasoning": 0.01, "first_content": None, "first_tool_name": 0.02,
                     "tool_call_complete": 0.05}
    assert distribution([0.3, None, 0.1, 0.2]) == {"n": 3, "p50": 0.2, "p90": 0.3, "max": 0.3}
    assert distribution([None]) == {"n": 0, "p50": None, "p90": None, "max": None}


def test_the_first_tool_name_delay_counts_from_each_streams_first_byte_and_in_data_lines():
    from conformance.compare.timing import timing_section
    from conformance.record.transcript import SseLine

    base = stream_transcript(fragmented_stream())  # the name in data line 3, at 0.02 s
    late = stream_transcript([*whole_stream()[:2], chunk({"content": "\n\n"}), *whole_stream()[2:]])
    late.sse = [SseLine(line.data, 0.5 + 0.01 * i) for i, line in enumerate(late.sse)]  # queued for 0.5 s first
    summary = timing_section([("c", "stream", base, late)])["summary"]
    assert summary["first_tool_name_delay"] == {"n": 1, "p50": 0.01, "p90": 0.01, "max": 0.01}
    assert summary["first_tool_name_line_delay"] == {"n": 1, "p50": 1, "p90": 1, "max": 1}
    assert summary["candidate"]["first_byte"]["p50"] == 0.5
    # The structure: per side the data line the name first appears in, and the stream's length in data lines.
    lines = summary["tool_name_lines"]
    assert lines["baseline"]["first_tool_name"]["p50"] == 3 and lines["candidate"]["first_tool_name"]["p50"] == 4
    assert lines["baseline"]["data_lines"]["p50"] == len(base.sse)
    assert lines["candidate"]["data_lines"]["p50"] == len(late.sse) == len(whole_stream()) + 2  # + content, [DONE]


def test_the_first_tool_name_delay_is_per_case_candidate_minus_baseline(every_kind):
    timing = build_gate(*every_kind)["timing"]
    fragments = next(case for case in timing["cases"] if case["case_id"] == "fragments")
    assert fragments["baseline"]["first_tool_name"] == 0.02 and fragments["candidate"]["first_tool_name"] == 0.02
    assert timing["summary"]["first_tool_name_delay"]["n"] == 3  # fragments, renamed, replay: both sides named a tool


# --- the CLI against loopback fake servers ------------------------------------------------------

CASES = """
- id: ok
  description: The fake server answers with reasoning and one whole tool call, streaming or not.
  features: [reasoning, tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  force: "forced <think> text"
  expect:
    hf: &ok
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls
    legacy: *ok
- id: refuse
  description: The fake server refuses this request with HTTP 400 and param tool_choice, streaming or not.
  features: [tool_choice_required, request_error]
  request:
    messages: [{role: user, content: refuse}]
    tools: [get_weather]
  force: "x"
  expect:
    hf: {error: {status: 400, param: tool_choice}}
    legacy: {error: {status: 400, param: tool_choice}}
"""


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory) -> Path:
    from tests.engine_helpers import case_directory

    return case_directory(tmp_path_factory.mktemp("cases"), CASES)


def _gate_args(one, other, cases_dir, out, *extra):
    return ["gate", "--baseline", one.base_url, "--baseline-model", "fake", "--baseline-profile", "legacy",
            "--candidate", other.base_url, "--candidate-model", "fake", "--candidate-profile", "hf",
            "--cases", str(cases_dir), "--out", str(out), "--forcing", "trust", *extra,
            *([] if "--granularities" in extra else ["--granularities", "none"])]  # tests about granularity say so


def test_gate_between_two_servers_by_url_records_both_sides_and_the_cors_answer(cases_dir, tmp_path, capsys):
    with fake_server() as one, fake_server() as other:
        code = main(_gate_args(one, other, cases_dir, tmp_path / "g", "--origin", ALLOWED_ORIGIN))
        assert [origin for _, headers in one.preflights for origin in [headers.get("origin")]] == [ALLOWED_ORIGIN]
    out = capsys.readouterr().out
    gate = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert code == 0 and gate["differences"] == [] and "0 unacknowledged difference(s)" in out
    assert gate["cors"]["baseline"]["status"] == 200
    assert gate["cors"]["candidate"]["headers"]["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert gate["sides"]["baseline"]["stamp"]["profile"] == "legacy" and gate["sides"]["candidate"]["label"] == "hf"
    for side in ("baseline", "candidate"):
        assert (tmp_path / "g" / side / "transcripts.jsonl").exists() and (tmp_path / "g" / side / "report.md").exists()


def test_compare_of_two_recorded_runs_gives_exactly_the_differences_of_the_gate(cases_dir, tmp_path):
    broken = tmp_path / "broken-cases"
    broken.mkdir()
    for item in cases_dir.iterdir():  # the candidate side: another expectation, so outcomes differ
        (broken / item.name).write_text(item.read_text().replace("hf: {error: {status: 400, param: tool_choice}}",
                                                                  "hf: {error: {status: 400, param: tools}}"))
    with fake_server() as one, fake_server() as other:
        assert main(["run", "--base-url", one.base_url, "--model", "fake", "--profile", "legacy", "--cases",
                     str(cases_dir), "--forcing", "trust", "--out", str(tmp_path / "a")]) == 0
        assert main(["run", "--base-url", other.base_url, "--model", "fake", "--profile", "hf", "--cases",
                     str(broken), "--forcing", "trust", "--out", str(tmp_path / "b")]) == 1
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c")]) == 1
    gate = json.loads((tmp_path / "c" / "gate.json").read_text())
    assert kinds_of(gate) == {("refuse", "non-stream", "outcome", None), ("refuse", "stream", "outcome", None)}
    assert gate["verdict"]["newly_failing"] == 2
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "same")]) == 0


def test_a_gate_where_a_side_judged_nothing_is_an_error_not_a_pass(cases_dir, tmp_path, capsys):
    with fake_server() as one, fake_server() as other:  # they return no token ids: forced cases are skipped
        code = main([arg for arg in _gate_args(one, other, cases_dir, tmp_path / "g") if arg not in ("--forcing", "trust")])
    assert code == 2 and "nothing was judged under the baseline and the candidate" in capsys.readouterr().out


def test_compare_and_gate_usage_errors_exit_2_naming_what_is_wrong(cases_dir, tmp_path, capsys):
    bad = write(tmp_path, "acknowledge:\n  - {case: ok, kind: nope, reason: a kind that does not exist}\n")
    assert main(["compare", str(tmp_path / "missing"), str(tmp_path / "missing")]) == 2
    assert "transcripts.jsonl: cannot read" in capsys.readouterr().err
    assert main(["gate", "--baseline", "hff"]) == 2
    assert "'hff' is neither a URL nor a profile" in capsys.readouterr().err
    assert main(["gate", "--baseline", "http://127.0.0.1:9/v1"]) == 2
    assert "--baseline URL needs --baseline-model and --baseline-profile" in capsys.readouterr().err
    with fake_server() as one:
        assert main(_gate_args(one, one, cases_dir, tmp_path / "g", "--expect", str(bad))) == 2
        assert f"{bad}:2: acknowledge[0].kind: 'nope' is not one of" in capsys.readouterr().err
        typo = write(tmp_path, "acknowledge:\n  - {case: okk, kind: message, reason: a case id with a typo}\n", "t.yaml")
        assert main(_gate_args(one, one, cases_dir, tmp_path / "g2", "--expect", str(typo))) == 2
        assert "t.yaml:2: case: unknown case id 'okk'" in capsys.readouterr().err


def test_the_default_expectations_are_the_file_shipped_for_the_profile_pair_else_none(cases_dir, tmp_path, monkeypatch):
    from conformance.compare import expectations

    with fake_server() as one, fake_server() as other:
        for profile, side in (("legacy", "a"), ("hf", "b")):
            main(["run", "--base-url", (one if side == "a" else other).base_url, "--model", "fake", "--profile", profile,
                  "--cases", str(cases_dir), "--forcing", "trust", "--out", str(tmp_path / side)])
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab")]) == 0
    shipped = json.loads((tmp_path / "ab" / "gate.json").read_text())
    assert shipped["expectations"] == {"file": expectations.DEFAULT_PAIR_FILE.name, "note": "shipped for legacy -> hf"}
    assert shipped["stale"]  # its entries were applied (none of them meets these two fake cases)
    assert main(["compare", str(tmp_path / "b"), str(tmp_path / "a"), "--out", str(tmp_path / "ba")]) == 0
    reverse = json.loads((tmp_path / "ba" / "gate.json").read_text())
    assert reverse["expectations"]["file"] is None and reverse["stale"] == []
    assert reverse["expectations"]["note"].startswith("no expectations ship for hf -> legacy: nothing is acknowledged")
    assert "Expectations: none (no expectations ship for hf -\\> legacy" in (tmp_path / "ba" / "report.md").read_text()
    # A file shipped for that pair is its default: the lookup is by (baseline, candidate), not a fixed switch.
    own = write(tmp_path, "acknowledge:\n  - {case: ok, kind: message, reason: a difference these runs do not have}\n")
    monkeypatch.setitem(expectations.SHIPPED_PAIRS, ("hf", "legacy"), own)
    assert main(["compare", str(tmp_path / "b"), str(tmp_path / "a"), "--out", str(tmp_path / "ba2"), "--strict"]) == 1
    again = json.loads((tmp_path / "ba2" / "gate.json").read_text())
    assert again["expectations"]["file"] == own.name and [s["source"] for s in again["stale"]] == ["expect.yaml:2"]


def test_a_granular_stream_shows_only_what_its_one_token_stream_does_not():
    """The candidate renames the reasoning field at every granularity (shown once, on the one-token
    stream); at 5 tokens per delta it also drops the call's arguments: only that shows on stream@5."""
    def side(label: str, reasoning_key: str, broken_at_5: bool) -> Recording:
        one_token = named(stream_transcript(whole_stream(reasoning_key=reasoning_key)), "case")
        at_3 = granular(named(stream_transcript(whole_stream(reasoning_key=reasoning_key)), "case"), "stream@3")
        at_5 = granular(named(stream_transcript(whole_stream("" if broken_at_5 else '{"city": "Paris"}',
                                                             reasoning_key=reasoning_key)), "case"), "stream@5")
        return recording(label, [one_token, at_3, at_5])

    gate = build_gate(side("legacy", "reasoning_content", False), side("hf", "reasoning", True))
    assert kinds_of(gate) == {
        ("case", "stream", "reasoning_field", "reasoning_field"),
        ("case", "stream@5", "message", "tool_calls[0].arguments"),
    }
