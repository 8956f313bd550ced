"""The gate: two recorded runs of the same cases -> their differences -> the expectations -> a verdict,
all in one `gate.json` record (format: docs/gate-format.md) that every gate report is a view of.

`build_gate` is pure (recordings in, dict out), so the live `conformance gate` and `conformance
compare` of its two recordings produce the same differences. Verdict: exit 1 on any unacknowledged
difference and on any case that newly fails or errors under the candidate, and when the candidate's server
refuses to start the checkpoint (`build_refused_gate`: its own error line is the verdict, no case is sent); 2 when nothing could be
compared or the baseline itself could not be judged (an `error` there hides what the candidate does);
130 (SIGINT) or 143 (SIGTERM) for a live gate interrupted before both sides finished; 0 otherwise. Stale acknowledgements are reported, and fail only with `strict`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from conformance import __version__
from conformance.compare.diff import Difference, Pair, diff_by_pair, pair_runs, stream_shape
from conformance.compare.expectations import Acknowledgement, acknowledge
from conformance.compare.timing import timing_section
from conformance.record.case_model import is_stream
from conformance.record.results import summarize
from conformance.record.run_dir import Recording
from conformance.record.transcript import Transcript
from conformance.record.wire import error_object, message_view, read_stream, response_message
from conformance.servers.profiles import cors_advice_for
from conformance.util import exit_codes

GATE_FORMAT = "conformance-gate/1"
GATE_FILE = "gate.json"
MAX_GATE_BYTES = 256 * 1024 * 1024  # the largest gate.json read back
SIDES = ("baseline", "candidate")
NEWLY_BAD = ("fail", "error")
EXCERPT_REQUEST_SKIP = {"messages", "input", "tools", "model", "structured_outputs", "return_token_ids"}


def build_gate(baseline: Recording, candidate: Recording, entries: Sequence[Acknowledgement] = (), *,
               strict: bool = False, cors: Mapping[str, Any] | None = None,
               expectations: Mapping[str, Any] | None = None, interrupted: str | None = None) -> dict[str, Any]:
    """The gate record of two recordings (see the module docstring and docs/gate-format.md);
    `expectations` says where `entries` come from (`{"file": ..., "note": ...}`); `interrupted` says how
    the live gate was stopped before both sides finished (its verdict is then an error)."""
    pairs = pair_runs((baseline.transcripts, baseline.results), (candidate.transcripts, candidate.results))
    by_pair = diff_by_pair(pairs)
    differences = [difference for _, found in by_pair for difference in found]
    matched, stale = acknowledge(differences, entries)
    # A case recorded on one side only was not compared: what differs there can never be acknowledged.
    unrun = {id(d) for pair, found in by_pair if missing_sides(pair) for d in found}
    acknowledged_by = {id(d): entry for d, entry in matched if entry is not None and id(d) not in unrun}
    newly_failing = [d for d in differences if d.kind == "outcome" and d.candidate in NEWLY_BAD
                     and d.baseline not in NEWLY_BAD]
    return {
        "format": GATE_FORMAT,
        "suite_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "origin": cors.get("origin") if cors else None,
        "sides": {side: _side(recording, cors) for side, recording in zip(SIDES, (baseline, candidate))},
        "expectations": dict(expectations) if expectations else None,
        "interrupted": interrupted,
        "refused_to_start": None,
        "missing": missing_by_side(pairs),
        "verdict": _verdict(pairs, matched, stale, newly_failing, (baseline, candidate), strict, unrun, interrupted),
        "differences": [
            {**difference.to_dict(), "id": difference.key,
             "acknowledged": _acknowledgement(acknowledged_by.get(id(difference)), difference, newly_failing),
             "excerpt": _excerpt(pair, difference)}
            for pair, found in by_pair for difference in found
        ],
        "stale": [{"selector": entry.selector(), "kind": entry.kind, "reason": entry.reason, "source": entry.source}
                  for entry in stale],
        "behaviours": _behaviours(by_pair, acknowledged_by),
        "timing": timing_section([(p.case_id, p.mode, p.transcripts.get("baseline"), p.transcripts.get("candidate"))
                                  for p in pairs]),
        "cors": dict(cors) if cors else None,
    }  # fmt: skip


def build_refused_gate(refused: Mapping[str, Any], stamps: Mapping[str, Mapping[str, Any]],
                       profiles: Mapping[str, str], expectations: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The gate record of a live gate whose candidate server refused to start (`refused`: its side, profile,
    server, its own error line as `message`, its log): exit 1, no case sent; `stamps` are the sides' stamps
    known by then, `profiles` each side's profile."""
    line = f"the candidate {refused['profile']} refuses to start this checkpoint: {refused['message']}"
    counts = {"unacknowledged": 0, "acknowledged": 0, "stale": 0, "newly_failing": 0, "compared": 0}
    return {
        "format": GATE_FORMAT, "suite_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "origin": None,
        "sides": {side: {"label": profiles[side], "run_dir": None, "stamp": dict(stamps.get(side) or {"profile": profiles[side]}),
                         "summary": {"counts": {}, "total": 0}, "startup_seconds": None, "cors_advice": None}
                  for side in SIDES},
        "expectations": dict(expectations) if expectations else None,
        "interrupted": None,
        "refused_to_start": dict(refused),
        "missing": {side: [] for side in SIDES},
        "verdict": {"exit_code": exit_codes.FAILED, "outcome": "fail", "line": line, **counts},
        "differences": [], "stale": [], "behaviours": [], "timing": timing_section([]), "cors": None,
    }  # fmt: skip


def exit_code_of(gate: Mapping[str, Any]) -> int:
    return int(gate["verdict"]["exit_code"])


def _side(recording: Recording, cors: Mapping[str, Any] | None) -> dict[str, Any]:
    summary = summarize(recording.results)
    profile = str(recording.stamp.get("profile") or recording.label)
    return {"label": recording.label, "run_dir": recording.run_dir, "stamp": dict(recording.stamp),
            "summary": {"counts": summary.counts, "total": summary.total},
            "startup_seconds": recording.startup_seconds,
            "cors_advice": cors_advice_for(profile, str(cors.get("origin"))) if cors and cors.get("origin") else None}


def missing_sides(pair: Pair) -> list[str]:
    """The sides that did not record this case x mode (no transcript or no result: never run, or interrupted)."""
    return [side for side in SIDES if pair.transcripts.get(side) is None or pair.results.get(side) is None]


def missing_by_side(pairs: Sequence[Pair]) -> dict[str, list[str]]:
    """{side: the case x mode (`id[mode]`) recorded under the other side only}."""
    return {side: [f"{p.case_id}[{p.mode}]" for p in pairs if side in missing_sides(p)] for side in SIDES}


def _acknowledgement(entry: Acknowledgement | None, difference: Difference,
                     newly_failing: Sequence[Difference]) -> dict[str, Any] | None:
    if entry is None or any(difference is bad for bad in newly_failing):
        return None  # a case that newly fails or errors is never acknowledged away
    return entry.to_dict()


def _verdict(pairs: Sequence[Pair], matched: Sequence[tuple[Difference, Acknowledgement | None]],
             stale: Sequence[Acknowledgement], newly_failing: Sequence[Difference],
             recordings: tuple[Recording, Recording], strict: bool, unrun: set[int],
             interrupted: str | None) -> dict[str, Any]:
    baseline = recordings[0]
    unacknowledged = [d for d, entry in matched if entry is None or d in newly_failing or id(d) in unrun]
    baseline_errors = [r for r in baseline.results if r.outcome == "error" and r.repeat == 0]
    unjudged = [side for side, recording in zip(SIDES, recordings)
                if not any(r.outcome in ("pass", "fail") for r in recording.results)]
    missing = missing_by_side(pairs)
    compared = [p for p in pairs if not missing_sides(p)]
    counts = {"unacknowledged": len(unacknowledged), "acknowledged": len(matched) - len(unacknowledged),
              "stale": len(stale), "newly_failing": len(newly_failing), "compared": len(compared)}
    line = (f"{counts['unacknowledged']} unacknowledged difference(s), {counts['acknowledged']} acknowledged, "
            f"{counts['stale']} stale, {counts['newly_failing']} newly failing or erroring under the candidate "
            f"({counts['compared']} case x mode compared)")
    incomplete = "; ".join(f"{len(names)} case x mode not recorded under the {side} (e.g. {names[0]})"
                           for side, names in missing.items() if names)
    if interrupted:
        outcome, code = "error", exit_codes.stopped_by(interrupted)
        line = f"interrupted ({interrupted}) before both sides finished: " + (incomplete or line)
    elif not compared:
        outcome, code = "error", exit_codes.ERROR
        line = "nothing was compared: the recordings share no case recorded on both sides" + (
            f" ({incomplete})" if incomplete else "")
    elif incomplete:
        outcome, code = "error", exit_codes.ERROR
        line = f"incomplete recordings, compare only complete runs: {incomplete}; " + line
    elif unjudged:
        outcome, code = "error", exit_codes.ERROR
        line = f"nothing was judged under the {' and the '.join(unjudged)}: every result is a skip or an error"
    elif baseline_errors:
        outcome, code = "error", exit_codes.ERROR
        line = (f"the baseline could not be judged on {len(baseline_errors)} case x mode (e.g. "
                f"{baseline_errors[0].name}: {baseline_errors[0].reason[:150]}); " + line)
    elif unacknowledged or (strict and stale):
        outcome, code = "fail", exit_codes.FAILED
        if strict and stale and not unacknowledged:
            line += "; --strict: stale acknowledgements fail the gate"
    else:
        outcome, code = "pass", exit_codes.OK
    return {"exit_code": code, "outcome": outcome, "line": line, **counts}


def _excerpt(pair: Pair, difference: Difference) -> dict[str, Any]:
    transcript = pair.transcripts.get("candidate") or pair.transcripts.get("baseline")
    request = None
    if transcript is not None:
        request = {k: v for k, v in transcript.request.items() if k not in EXCERPT_REQUEST_SKIP}
        if transcript.forced:
            request["forced output"] = transcript.forced_text
    return {"request": request,
            **{side: answer_summary(pair.transcripts.get(side)) for side in SIDES},
            "unforced": {side: reason for side in SIDES if (reason := unforced(pair.transcripts.get(side)))}}


def unforced(transcript: Transcript | None) -> str | None:
    """Why a forced request's answer is not the forced text (the model's own output: a server's grammar
    replaced the forcing, as hermes does for `tool_choice: required`), or None when it is, or unverified."""
    problems = transcript.forcing_problems if transcript is not None and transcript.forced else None
    return "; ".join(problems)[:400] if problems else None


def answer_summary(transcript: Transcript | None) -> str | None:
    """One line saying what a client got: the refusal, or the message (and how it streamed)."""
    if transcript is None:
        return None
    if transcript.skip_reason:
        return f"not sent: {transcript.skip_reason}"
    if transcript.transport_error:
        return f"no answer: {transcript.transport_error}"
    if transcript.status is None:
        return "no answer"
    if transcript.endpoint == "preflight":
        headers = (transcript.response or {}).get("headers") or {}
        return (f"HTTP {transcript.status}, access-control-allow-origin: "
                f"{headers.get('access-control-allow-origin') or 'absent'}")
    if transcript.status >= 400:
        error = error_object(transcript.error_body)
        param = f" param {error.get('param')}" if error.get("param") else ""
        return f"HTTP {transcript.status}{param}: {str(error.get('message') or transcript.error_body)[:160]}"
    reading = read_stream(transcript) if is_stream(transcript.mode) else None
    message = reading.message if reading is not None else response_message(transcript)
    if message is None:
        return f"HTTP {transcript.status}, no message"
    view = message_view(message)
    parts = []
    for name in ("reasoning", "content"):
        if view[name] is not None:
            parts.append(f"{name} {json.dumps(view[name], ensure_ascii=False)[:80]}")
    for call in view["tool_calls"]:
        arguments = next(iter(call["arguments"].values())) if call["arguments"] else None
        parts.append(f"call {call['name']}({json.dumps(arguments, ensure_ascii=False)[:80]})")
    parts.append(f"finish {view['finish_reason']}")
    if reading is not None and transcript.endpoint == "chat" and reading.tool_deltas:
        shape = stream_shape("chat", reading)
        parts.append(f"tool calls streamed {shape['tool_call_streaming']} ({sum(shape['tool_call_deltas'])} deltas)")
    return "; ".join(parts)


def _behaviours(by_pair: Sequence[tuple[Pair, list[Difference]]], acknowledged_by: Mapping[int, Any]) -> list[dict]:
    """One row per case, both modes folded: what each side does (its stream when there is one)."""
    rows: dict[str, dict[str, Any]] = {}
    for pair, found in by_pair:
        features, description = pair.case_info
        row = rows.setdefault(pair.case_id, {"case_id": pair.case_id, "features": list(features),
                                             "description": description, "baseline": None, "candidate": None,
                                             "changed": False, "kinds": [], "acknowledged": True,
                                             "unforced": {}})
        if pair.mode == "stream" or row["baseline"] is None:
            for side in SIDES:
                row[side] = answer_summary(pair.transcripts.get(side))
        for side in SIDES:
            if unforced(pair.transcripts.get(side)):
                row["unforced"].setdefault(side, []).append(pair.mode)
        for difference in found:
            row["changed"] = True
            if difference.kind not in row["kinds"]:
                row["kinds"].append(difference.kind)
            row["acknowledged"] = row["acknowledged"] and id(difference) in acknowledged_by
    for row in rows.values():
        row["acknowledged"] = row["acknowledged"] if row["changed"] else None
    return list(rows.values())
