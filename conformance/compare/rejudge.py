"""A recorded run judged again from its transcripts before two runs are compared, so that a gate judges
what the servers answered, never only what a results.jsonl says.

Each transcript is judged with the case set (`conformance.run.engine.recheck`, with the markers its run
checked). A transcript whose case the set does not hold, or holds changed since it was recorded, cannot
be judged again: its recorded result is kept when the answer bears it out (a pass needs an answer that
arrived: no transport error, nothing skipped, an HTTP status below 500; a skip needs a request not sent),
and refused otherwise (`UnsupportedResults`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from conformance.record.case_model import Case
from conformance.record.results import CaseResult
from conformance.record.run_dir import Recording
from conformance.record.transcript import Transcript
from conformance.run.engine import recheck


class UnsupportedResults(ValueError):
    """Recorded results that the recorded answers contradict; the message names the run and a case."""


def judged_again(recording: Recording, cases: Sequence[Case], markers: Sequence[str]) -> tuple[Recording, list[str]]:
    """(the recording with its results judged again, notes for people: recorded results that differ)."""
    recorded = {(r.case_id, r.mode, r.profile, r.repeat): r for r in recording.results}
    by_key = {(t.case_id, t.mode, t.profile, t.repeat): t for t in recording.transcripts}
    results, notes, contradicted = [], [], []
    for result in recheck(recording.transcripts, cases, markers=markers):
        key = (result.case_id, result.mode, result.profile, result.repeat)
        old = recorded.get(key)
        if any(check.name == "recording" for check in result.checks):  # the case set cannot judge it
            if old is None or (why := contradiction(old, by_key[key])) is not None:
                contradicted.append(f"{result.name}: " + (why if old else "no recorded result"))
                continue
            result = old
        elif old is not None and old.outcome != result.outcome:
            notes.append(f"{result.name} recorded {old.outcome}, judged {result.outcome}")
        results.append(result)
    if contradicted:
        raise UnsupportedResults(f"{recording.run_dir}: {len(contradicted)} recorded result(s) cannot be judged again "
                                 f"(their case is not in the case set, or changed) and their answers contradict them, "
                                 f"e.g. {contradicted[0]}; give the case directory they were recorded with (--cases)")
    return replace(recording, results=results), notes


def contradiction(result: CaseResult, transcript: Transcript) -> str | None:
    """Why a recorded result cannot stand for its transcript (None: the answer bears it out)."""
    if result.outcome == "pass" and not transcript.answered:
        return (f"recorded pass, but the answer was "
                f"{transcript.transport_error or transcript.skip_reason or f'HTTP {transcript.status}'}")
    if result.outcome == "skip" and transcript.skip_reason is None:
        return "recorded skip, but the request was sent"
    return None
