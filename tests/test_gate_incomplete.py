"""A gate never passes a side that did not answer: a case recorded on one side only is never
acknowledgeable nor counted as compared, and an incomplete side is exit 2 with what is missing."""

from __future__ import annotations

from pathlib import Path

from conformance.cli import main
from conformance.compare.expectations import load_expectations
from conformance.compare.gate import build_gate
from conformance.record.run_dir import Recording
from tests.engine_helpers import response_transcript
from tests.fake_server import fake_server
from tests.test_gate import _gate_args, cases_dir, every_kind, named, ns_call, recording  # noqa: F401 (cases_dir, every_kind: fixtures)

EVERYTHING_ACKNOWLEDGED = """\
acknowledge:
  - {case: "*", kind: outcome, reason: anything that passes on one side only}
  - {case: "*", kind: request_refused, reason: any refusal at all}
  - {case: "*", kind: request_accepted, reason: any acceptance at all}
  - {case: "*", kind: message, reason: any message at all}
  - {case: "*", kind: reasoning_field, reason: any field name at all}
  - {case: "*", kind: finish_reason, reason: any finish reason at all}
  - {case: "*", kind: stream_shape, reason: any stream shape at all}
  - {case: "*", kind: usage, reason: any usage figure at all}
  - {case: "*", kind: client_replay, reason: any client replay at all}
"""


def interrupted_after(side: Recording, kept: int) -> Recording:
    """The side as an interrupted run leaves it: its first `kept` answers and their results."""
    return Recording(side.label, side.transcripts[:kept], side.results[:kept], side.stamp)


def test_a_candidate_interrupted_midway_is_an_error_whatever_the_expectations_acknowledge(every_kind, tmp_path: Path):
    path = tmp_path / "expect.yaml"
    path.write_text(EVERYTHING_ACKNOWLEDGED)
    baseline, candidate = every_kind
    gate = build_gate(baseline, interrupted_after(candidate, 3), load_expectations(path))
    verdict = gate["verdict"]
    assert (verdict["exit_code"], verdict["outcome"], verdict["compared"]) == (2, "error", 3)
    assert f"{len(candidate.transcripts) - 3} case x mode not recorded under the candidate" in verdict["line"]
    assert gate["missing"] == {"baseline": [], "candidate": [f"{t.case_id}[{t.mode}]" for t in candidate.transcripts[3:]]}
    unrun = [d for d in gate["differences"] if d["case_id"] in {t.case_id for t in candidate.transcripts[3:]}]
    assert unrun and all(d["acknowledged"] is None for d in unrun)


def test_recordings_that_share_no_case_compare_nothing(every_kind):
    baseline, _ = every_kind
    other = recording("hf", [named(response_transcript(ns_call(), "tool_calls"), "elsewhere")])
    verdict = build_gate(baseline, other)["verdict"]
    assert (verdict["exit_code"], verdict["compared"]) == (2, 0)
    assert verdict["line"].startswith("nothing was compared")


def test_a_result_without_its_answer_counts_as_not_recorded(every_kind):
    """An interrupted run can write the answer of a case and not its result (or the reverse)."""
    baseline, candidate = every_kind
    without_last_result = Recording(candidate.label, candidate.transcripts, candidate.results[:-1], candidate.stamp)
    gate = build_gate(baseline, without_last_result)
    last = candidate.results[-1]
    assert gate["verdict"]["exit_code"] == 2 and gate["missing"]["candidate"] == [f"{last.case_id}[{last.mode}]"]


def test_an_interrupted_gate_is_an_error_naming_how_it_stopped(every_kind):
    verdict = build_gate(*every_kind, interrupted="SIGTERM")["verdict"]
    assert verdict["exit_code"] == 143 and verdict["line"].startswith("interrupted (SIGTERM)")
    assert build_gate(*every_kind, interrupted="SIGINT")["verdict"]["exit_code"] == 130


def test_the_gates_progress_shows_both_sides(cases_dir, tmp_path, capsys):  # noqa: F811 (the fixture)
    """Each side's results advance one display (the candidate's were not shown at all)."""
    with fake_server() as one, fake_server() as other:
        main(_gate_args(one, other, cases_dir, tmp_path / "g", "--no-expect"))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert len(lines) == 8 and lines[-1].startswith("[8/8] ")
    assert {line.split()[1] for line in lines} == {"legacy", "hf"}
