"""The client-visible differences between two recorded runs of the same cases: a pure function over
transcripts and results, so a live gate and `conformance compare` of its recordings agree exactly.

Transcripts are paired by (case id, mode) (first repeat); each pair is compared the way a client
would notice, and every difference is classified (`DifferenceKind`) with both sides' values:

* `request_refused` / `request_accepted`: one side answered 4xx where the other accepted (status,
  `param`, message), or both refused differently;
* `message`: the parsed message differs, field by field (reasoning, content, each tool call's name
  and arguments compared as JSON values, `conformance.util.json_values`: `true` is not `1`);
* `reasoning_field`: the reasoning arrived under another field name;
* `finish_reason`: the finish reason (Responses: the status) differs;
* `stream_shape`: the stream is cut differently (arguments whole vs fragments, number of tool-call
  deltas, the chunk in which a call's name first appears, role and finish chunks);
* `usage`: a usage figure differs (e.g. `completion_tokens_details.reasoning_tokens`);
* `client_replay`: openai-python's own accumulator rebuilds the message on one side and not the other;
* `stream_granularity`: a stream asked for several tokens per delta (`stream@N`) reassembles to its own
  one-token stream's message on one side and not on the other (the first divergent chunk named);
* `multi_turn`: a second turn (`turn2@<client>`) the server refuses on one side only, or whose prompt the
  server renders differently (the client sent back what each side's turn-1 answer gave it);
* `outcome`: the case passes on one side and fails, errors or is skipped on the other.

A granular stream's pair reports only what its one-token stream's pair does not already show (the same
kind, field and values on both sides): what changes with the granularity, not the stream again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from conformance.record.case_model import is_stream, rebuilder_of, tokens_per_delta
from conformance.record.outcomes import SKIP, Check
from conformance.record.results import CaseResult
from conformance.record.transcript import Transcript
from conformance.record.wire import (
    Message,
    StreamReading,
    brief_json,
    error_object,
    message_view,
    read_stream,
    response_message,
    usage_of,
)
from conformance.run.checks.granularity import CHECK_NAME as SPLIT_INVARIANCE
from conformance.run.checks.second_turn import first_difference
from conformance.util.json_values import json_equal

DifferenceKind = Literal["request_refused", "request_accepted", "message", "reasoning_field", "finish_reason",
                         "stream_shape", "usage", "client_replay", "stream_granularity", "multi_turn", "outcome"]
DIFFERENCE_KINDS: tuple[DifferenceKind, ...] = ("request_refused", "request_accepted", "message", "reasoning_field",
                                                "finish_reason", "stream_shape", "usage", "client_replay",
                                                "stream_granularity", "multi_turn", "outcome")
Side = Literal["baseline", "candidate"]


@dataclass(frozen=True)
class Difference:
    kind: DifferenceKind
    case_id: str
    mode: str
    field: str | None  # what differs, e.g. `content`, `tool_calls[0].arguments`; None: the whole answer
    baseline: Any
    candidate: Any
    summary: str  # one line, plain text
    features: tuple[str, ...] = ()
    description: str = ""

    @property
    def key(self) -> str:
        """Stable id of the difference within a gate (also the HTML anchor)."""
        return f"{self.case_id}-{self.mode}-{self.kind}" + (f"-{self.field}" if self.field else "")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "case_id": self.case_id, "mode": self.mode, "features": list(self.features),
                "description": self.description, "field": self.field, "baseline": self.baseline,
                "candidate": self.candidate, "summary": self.summary}


@dataclass
class Pair:
    """What one (case, mode) recorded on both sides (either may be missing)."""

    case_id: str
    mode: str
    transcripts: dict[Side, Transcript | None] = field(default_factory=dict)
    results: dict[Side, CaseResult | None] = field(default_factory=dict)

    @property
    def case_info(self) -> tuple[tuple[str, ...], str]:
        result = self.results.get("candidate") or self.results.get("baseline")
        return (result.features, result.description) if result else ((), "")


def pair_runs(baseline: tuple[Sequence[Transcript], Sequence[CaseResult]],
              candidate: tuple[Sequence[Transcript], Sequence[CaseResult]]) -> list[Pair]:
    """Pairs in the order the baseline recorded its cases (then what only the candidate has);
    only the first repeat of each case takes part."""
    pairs: dict[tuple[str, str], Pair] = {}
    for side, (transcripts, results) in (("baseline", baseline), ("candidate", candidate)):
        for transcript in transcripts:
            if transcript.repeat == 0:
                pair = pairs.setdefault((transcript.case_id, transcript.mode), Pair(transcript.case_id, transcript.mode))
                pair.transcripts[side] = transcript
        for result in results:
            if result.repeat == 0:
                pair = pairs.setdefault((result.case_id, result.mode), Pair(result.case_id, result.mode))
                pair.results[side] = result
    return list(pairs.values())


def diff_by_pair(pairs: Iterable[Pair]) -> list[tuple[Pair, list[Difference]]]:
    """Every pair with its differences, in pair order; a granular stream's without those its one-token
    stream already shows."""
    found = [(pair, diff_pair(pair)) for pair in pairs]
    one_token = {pair.case_id: {_sameness(d) for d in differences} for pair, differences in found
                 if pair.mode == "stream"}
    return [(pair, [d for d in differences if _sameness(d) not in one_token.get(pair.case_id, ())])
            if tokens_per_delta(pair.mode) is not None else (pair, differences) for pair, differences in found]


def _sameness(difference: Difference) -> tuple[str, str | None, str, str]:
    """What makes two modes' differences the same one: kind, field and both sides' values; for the stream's
    shape, kind and field (its counts change with the granularity, the way the sides differ does not)."""
    if difference.kind == "stream_shape":
        return (difference.kind, difference.field, "", "")
    return (difference.kind, difference.field, json.dumps(difference.baseline, sort_keys=True, default=str),
            json.dumps(difference.candidate, sort_keys=True, default=str))


def diff_pair(pair: Pair) -> list[Difference]:
    features, description = pair.case_info

    def make(kind: DifferenceKind, where: str | None, base: Any, cand: Any, summary: str) -> Difference:
        return Difference(kind, pair.case_id, pair.mode, where, base, cand, summary, features, description)

    found = list(_outcome_differences(pair, make))
    base, cand = pair.transcripts.get("baseline"), pair.transcripts.get("candidate")
    if base is None or cand is None or not (base.answered and cand.answered):
        return found  # nothing to compare field by field: the outcome difference (if any) says why
    if base.endpoint == "preflight":
        return found + list(_preflight_differences(base, cand, make))
    refusal = {side: _refusal(t) for side, t in (("baseline", base), ("candidate", cand))}
    if refusal["baseline"] or refusal["candidate"]:
        refused = list(_refusal_differences(refusal["baseline"], refusal["candidate"], make))
        if rebuilder_of(pair.mode) is not None:  # a second turn refused: a difference of its own kind
            refused = [replace(d, kind="multi_turn", summary=f"second turn as {rebuilder_of(pair.mode)} sends it: "
                                                                f"{d.summary}") for d in refused]
        return found + refused
    found += _second_turn_differences(pair.mode, base, cand, make)
    views = {side: _view_of(t) for side, t in (("baseline", base), ("candidate", cand))}
    if views["baseline"] is None or views["candidate"] is None:
        return found
    (base_message, base_reading), (cand_message, cand_reading) = views["baseline"], views["candidate"]
    found += _message_differences(base_message, cand_message, make)
    found += _client_replay_differences(pair, make)
    found += _granularity_differences(pair, make)
    if base_reading is not None and cand_reading is not None:
        found += _stream_shape_differences(base.endpoint, base_reading, cand_reading, make)
    usage = _usage_differences(usage_of(base), usage_of(cand), make)
    if any(d.kind == "multi_turn" for d in found):  # a prompt rendered differently counts other prompt tokens
        usage = [d for d in usage if d.field not in ("usage.prompt_tokens", "usage.total_tokens")]
    return found + usage


# --- what each side answered --------------------------------------------------------------------


def _refusal(transcript: Transcript) -> dict[str, Any] | None:
    if transcript.status is None or transcript.status < 400:
        return None
    error = error_object(transcript.error_body)
    return {"status": transcript.status, "param": error.get("param"), "message": error.get("message")}


def _view_of(transcript: Transcript) -> tuple[Message, StreamReading | None] | None:
    if is_stream(transcript.mode):
        reading = read_stream(transcript)
        if reading.invalid_lines or reading.too_deep_lines or reading.stream_error is not None:
            return None
        return reading.message, reading
    message = response_message(transcript)
    return (message, None) if message is not None else None


# --- the comparisons ----------------------------------------------------------------------------


def _outcome_differences(pair: Pair, make: Any) -> Iterator[Difference]:
    base, cand = pair.results.get("baseline"), pair.results.get("candidate")
    base_outcome = base.outcome if base else "not run"
    cand_outcome = cand.outcome if cand else "not run"
    if base_outcome != cand_outcome:
        reason = (cand.reason if cand and cand.outcome != "pass" else base.reason if base else "") or ""
        yield make("outcome", None, base_outcome, cand_outcome,
                   f"{base_outcome} under the baseline, {cand_outcome} under the candidate"
                   + (f": {reason[:200]}" if reason else ""))


def _refusal_differences(base: dict[str, Any] | None, cand: dict[str, Any] | None, make: Any) -> Iterator[Difference]:
    if base is None and cand is not None:
        yield make("request_refused", "status", {"status": 200}, cand,
                   f"refused under the candidate: HTTP {cand['status']}"
                   + (f" param {cand['param']}" if cand.get("param") else "") + f": {str(cand['message'])[:200]}")
    elif cand is None and base is not None:
        yield make("request_accepted", "status", base, {"status": 200},
                   f"accepted under the candidate; the baseline refused it with HTTP {base['status']}"
                   + (f" param {base['param']}" if base.get("param") else ""))
    elif base["status"] != cand["status"] or not json_equal(base["param"], cand["param"]):
        yield make("request_refused", "error", base, cand,
                   f"refused differently: HTTP {base['status']} param {base['param']} under the baseline, "
                   f"HTTP {cand['status']} param {cand['param']} under the candidate")


def _preflight_differences(base: Transcript, cand: Transcript, make: Any) -> Iterator[Difference]:
    base_ok, cand_ok = base.status < 400, cand.status < 400
    if base_ok != cand_ok or base.status != cand.status:
        kind: DifferenceKind = "request_accepted" if cand_ok and not base_ok else "request_refused"
        yield make(kind, "preflight.status", base.status, cand.status,
                   f"CORS preflight answered HTTP {base.status} under the baseline, {cand.status} under the candidate")
    base_headers, cand_headers = (dict((t.response or {}).get("headers") or {}) for t in (base, cand))
    for name in ("access-control-allow-origin", "access-control-allow-methods", "access-control-allow-headers",
                 "access-control-allow-credentials"):
        if base_headers.get(name) != cand_headers.get(name):
            yield make("message", f"preflight.headers.{name}", base_headers.get(name), cand_headers.get(name),
                       f"CORS preflight header {name}: {base_headers.get(name)!r} vs {cand_headers.get(name)!r}")


def _message_differences(base: Message, cand: Message, make: Any) -> list[Difference]:
    found = []
    base_view, cand_view = message_view(base), message_view(cand)
    for name in ("reasoning", "content"):
        if not json_equal(base_view[name], cand_view[name]):
            found.append(make("message", name, base_view[name], cand_view[name],
                              f"{name}: {brief_json(base_view[name])} under the baseline, {brief_json(cand_view[name])} "
                              "under the candidate"))
    base_calls, cand_calls = base_view["tool_calls"], cand_view["tool_calls"]
    if len(base_calls) != len(cand_calls):
        found.append(make("message", "tool_calls", base_calls, cand_calls,
                          f"{len(base_calls)} tool call(s) under the baseline, {len(cand_calls)} under the candidate"))
    for index, (one, other) in enumerate(zip(base_calls, cand_calls)):
        for part in ("name", "arguments"):
            if not json_equal(one[part], other[part]):
                found.append(make("message", f"tool_calls[{index}].{part}", one[part], other[part],
                                  f"tool call {index} {part}: {brief_json(_plain(one[part]))} under the baseline, "
                                  f"{brief_json(_plain(other[part]))} under the candidate"))
    if base.reasoning and cand.reasoning and base.reasoning_keys != cand.reasoning_keys:
        found.append(make("reasoning_field", "reasoning_field", sorted(base.reasoning_keys), sorted(cand.reasoning_keys),
                          f"reasoning arrives in {'/'.join(sorted(base.reasoning_keys))} under the baseline, "
                          f"{'/'.join(sorted(cand.reasoning_keys))} under the candidate"))
    if base.finish_reason != cand.finish_reason:
        found.append(make("finish_reason", "finish_reason", base.finish_reason, cand.finish_reason,
                          f"finish_reason {base.finish_reason} under the baseline, {cand.finish_reason} "
                          "under the candidate"))
    return found


def _client_replay_differences(pair: Pair, make: Any) -> list[Difference]:
    outcomes = {}
    for side in ("baseline", "candidate"):
        result = pair.results.get(side)
        check = _check_named(result, "client_replay")
        outcomes[side] = (check.outcome, check.reason) if check else None
    if outcomes["baseline"] is None or outcomes["candidate"] is None:
        return []
    (base, base_reason), (cand, cand_reason) = outcomes["baseline"], outcomes["candidate"]
    if base == cand:
        return []
    return [make("client_replay", "client_replay", {"outcome": base, "reason": base_reason},
                 {"outcome": cand, "reason": cand_reason},
                 f"openai-python's accumulator: {base} under the baseline, {cand} under the candidate"
                 + (f" ({(cand_reason or base_reason)[:200]})" if cand_reason or base_reason else ""))]


def _second_turn_differences(mode: str, base: Transcript, cand: Transcript, make: Any) -> list[Difference]:
    """A second turn whose prompt parts from the conversation as the model wrote it differently on the two sides
    (each side against its own reference, rendered by the same server with its own call ids): each side's prompt
    where it parts from its reference (None: it does not)."""
    if rebuilder_of(mode) is None:
        return []
    gaps = [_gap(t.prompts) for t in (base, cand)]
    if gaps[0] == gaps[1] or any(t.prompts is None for t in (base, cand)):
        return []
    shown = [f"parts from the model's turn at character {gap[0]}: {gap[1]!r}" if gap else "the model's own turn"
             for gap in gaps]
    return [make("multi_turn", "prompt", gaps[0] and gaps[0][1], gaps[1] and gaps[1][1],
                 f"the prompt the server renders for the second turn as {rebuilder_of(mode)} sends it back: "
                 f"{shown[0]} under the baseline, {shown[1]} under the candidate")]


def _gap(prompts: Mapping[str, str] | None) -> tuple[int, str] | None:
    """Where a second turn's prompt parts from its reference, and its text there (None: it does not)."""
    if not prompts or prompts.get("sent") == prompts.get("reference"):
        return None
    sent, reference = prompts.get("sent", ""), prompts.get("reference", "")
    at = first_difference(sent, reference)
    return at, sent[max(0, at - 40):at + 60]


def _check_named(result: CaseResult | None, name: str) -> Check | None:
    """The check `name` of a side's result (None: no result, or no such check)."""
    return next((check for check in result.checks if check.name == name), None) if result else None


def _granularity_differences(pair: Pair, make: Any) -> list[Difference]:
    """A granular stream that reassembles to its one-token stream on one side only (`split_invariance`). Where
    either side's split was not judged (a skip that says why: its one-token stream came merged under load, or
    unanswered), there is nothing to compare: no difference, each side's skip stays in its own results."""
    if tokens_per_delta(pair.mode) is None:
        return []
    base, cand = (_check_named(pair.results.get(side), SPLIT_INVARIANCE) for side in ("baseline", "candidate"))
    if base is None or cand is None or SKIP in (base.outcome, cand.outcome) or base.outcome == cand.outcome:
        return []
    broken = cand if cand.outcome == "fail" else base
    return [make("stream_granularity", SPLIT_INVARIANCE, {"outcome": base.outcome, "reason": base.reason},
                 {"outcome": cand.outcome, "reason": cand.reason},
                 f"at {pair.mode} the stream reassembles to its one-token message: {base.outcome} under the baseline, "
                 f"{cand.outcome} under the candidate ({broken.reason[:240]})")]


def stream_shape(endpoint: str, reading: StreamReading) -> dict[str, Any]:
    """How a stream is cut, in the terms clients notice (see the module docstring)."""
    if endpoint == "responses":
        kinds: list[str] = []
        for event in reading.events:
            kind = str(event.get("type"))
            if not kinds or kinds[-1] != kind:
                kinds.append(kind)
        return {"event_types": kinds}
    deltas = reading.tool_deltas
    first_name = {}
    for number, chunk in enumerate(reading.chunks, start=1):
        for choice in chunk.get("choices") or []:
            for delta in (choice.get("delta") or {}).get("tool_calls") or []:
                index = delta.get("index")
                if isinstance(index, int) and index not in first_name and (delta.get("function") or {}).get("name"):
                    first_name[index] = number
    finish = [number for number, chunk in enumerate(reading.chunks, start=1)
              for choice in chunk.get("choices") or [] if choice.get("finish_reason")]
    finish_delta = [choice.get("delta") or {} for chunk in reading.chunks for choice in chunk.get("choices") or []
                    if choice.get("finish_reason")]
    return {
        "tool_call_streaming": "none" if not deltas else (
            "whole" if all(len(d) == 1 for d in deltas.values()) else "incremental"),
        "tool_call_deltas": [len(deltas[index]) for index in sorted(deltas)],
        "first_name_chunk": [first_name.get(index) for index in sorted(deltas)],
        "role_chunks": [number for number, chunk in enumerate(reading.chunks, start=1)
                        for choice in chunk.get("choices") or [] if (choice.get("delta") or {}).get("role")],
        "finish_chunk": {"from_end": (finish[-1] - len(reading.chunks) - 1) if finish else None,
                         "delta_fields": sorted(k for k, v in finish_delta[-1].items() if v) if finish_delta else None},
    }


def _stream_shape_differences(endpoint: str, base: StreamReading, cand: StreamReading, make: Any) -> list[Difference]:
    base_shape, cand_shape = stream_shape(endpoint, base), stream_shape(endpoint, cand)
    return [make("stream_shape", name, base_shape[name], cand_shape[name],
                 f"{name.replace('_', ' ')}: {json.dumps(base_shape[name])} under the baseline, "
                 f"{json.dumps(cand_shape[name])} under the candidate")
            for name in base_shape if base_shape[name] != cand_shape.get(name)]


def _flatten(value: Any, prefix: str = "usage") -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}"))
        return flat
    return {prefix: value}


def _usage_differences(base: Mapping[str, Any] | None, cand: Mapping[str, Any] | None, make: Any) -> list[Difference]:
    if base is None and cand is None:
        return []
    base_flat, cand_flat = _flatten(base or {}), _flatten(cand or {})
    return [make("usage", name, base_flat.get(name), cand_flat.get(name),
                 f"{name}: {base_flat.get(name)} under the baseline, {cand_flat.get(name)} under the candidate")
            for name in sorted(base_flat.keys() | cand_flat.keys())
            if not json_equal(base_flat.get(name), cand_flat.get(name))]


def _plain(value: Any) -> Any:
    """A tool call part of `message_view` as a person reads it: arguments without their json/raw wrapper."""
    if isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in ("json", "raw"):
        return next(iter(value.values()))
    return value


