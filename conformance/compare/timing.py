"""When a client sees each part of a streamed answer, from a recorded stream's arrival times.

Per streaming transcript (seconds since the request started; None: it never happened): the first
byte, the first reasoning delta, the first content delta, the first visible tool name and the
complete tool call (the last tool-call delta). Under hf a call is sent when its region closes, so
its name becomes visible later than under hermes, which sends the name first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from conformance.record.transcript import Transcript
from conformance.record.wire import REASONING_KEYS
from conformance.util.json_codec import parse_json

Metric = Literal["first_byte", "first_reasoning", "first_content", "first_tool_name", "tool_call_complete"]
METRICS: tuple[Metric, ...] = ("first_byte", "first_reasoning", "first_content", "first_tool_name",
                               "tool_call_complete")


def stream_timings(transcript: Transcript) -> dict[Metric, float | None]:
    """The arrival time of each metric's first (for `tool_call_complete`, last) event in one stream."""
    return _stream_events(transcript)[0]


def _stream_events(transcript: Transcript) -> tuple[dict[Metric, float | None], dict[Metric, int | None]]:
    """(arrival time, data line number from 1) of each metric's first (`tool_call_complete`: last) event."""
    times: dict[Metric, float | None] = dict.fromkeys(METRICS)
    lines: dict[Metric, int | None] = dict.fromkeys(METRICS)
    if transcript.sse:
        times["first_byte"], lines["first_byte"] = transcript.sse[0].t, 1
    for number, line in enumerate(transcript.sse, start=1):
        try:
            payload = parse_json(line.data)
        except json.JSONDecodeError:
            continue
        for metric in _metrics_in(payload, transcript.endpoint):
            if metric == "tool_call_complete" or times[metric] is None:
                times[metric], lines[metric] = line.t, number
    return times, lines


def _metrics_in(payload: Any, endpoint: str) -> list[Metric]:
    if not isinstance(payload, Mapping):
        return []
    if endpoint == "responses":
        kind = payload.get("type")
        return {"response.reasoning_text.delta": ["first_reasoning"], "response.output_text.delta": ["first_content"],
                "response.output_item.added": ["first_tool_name"] if (payload.get("item") or {}).get("type")
                == "function_call" else [],
                "response.function_call_arguments.delta": ["tool_call_complete"]}.get(kind, [])
    found: list[Metric] = []
    for choice in payload.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if not isinstance(delta, Mapping):
            continue
        if any(delta.get(key) for key in REASONING_KEYS):
            found.append("first_reasoning")
        if delta.get("content"):
            found.append("first_content")
        calls = delta.get("tool_calls") or []
        if calls:
            found.append("tool_call_complete")
            if any(isinstance(c, Mapping) and (c.get("function") or {}).get("name") for c in calls):
                found.append("first_tool_name")
    return found


def distribution(values: Iterable[float | None]) -> dict[str, Any]:
    """n, median, 90th percentile and max of the values that are not None (nearest-rank)."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return {"n": 0, "p50": None, "p90": None, "max": None}

    def rank(q: float) -> float:
        return round(present[max(0, math.ceil(q * len(present)) - 1)], 6)

    return {"n": len(present), "p50": rank(0.5), "p90": rank(0.9), "max": round(present[-1], 6)}


def timing_section(pairs: Sequence[tuple[str, str, Transcript | None, Transcript | None]]) -> dict[str, Any]:
    """The gate's `timing`: per streamed (case, mode) both sides' metrics (and the data line each
    arrived in), the distributions per side, and how much later (candidate minus baseline, per case)
    the first tool name became visible: in seconds after each stream's first byte (so that time
    spent queued behind other requests does not count), and in data lines (each about a token).
    `tool_name_lines` is the structure, which no machine's load changes: over the streams where both
    sides showed a tool name, per side the data line it first appeared in and the stream's length."""
    cases = []
    for case_id, mode, base, cand in pairs:
        if mode != "stream" or base is None or cand is None or not (base.sse and cand.sse):
            continue
        (base_times, base_lines), (cand_times, cand_lines) = _stream_events(base), _stream_events(cand)
        cases.append({"case_id": case_id, "mode": mode, "baseline": base_times, "candidate": cand_times,
                      "lines": {"baseline": base_lines, "candidate": cand_lines},
                      "data_lines": {"baseline": len(base.sse), "candidate": len(cand.sse)}})
    summary: dict[str, Any] = {
        side: {metric: distribution(case[side][metric] for case in cases) for metric in METRICS}
        for side in ("baseline", "candidate")
    }
    named = [case for case in cases
             if case["candidate"]["first_tool_name"] is not None and case["baseline"]["first_tool_name"] is not None]
    summary["first_tool_name_delay"] = distribution(
        tool_name_after_first_byte(case["candidate"]) - tool_name_after_first_byte(case["baseline"]) for case in named)
    summary["first_tool_name_line_delay"] = distribution(
        case["lines"]["candidate"]["first_tool_name"] - case["lines"]["baseline"]["first_tool_name"] for case in named)
    summary["tool_name_lines"] = {side: {"first_tool_name": distribution(case["lines"][side]["first_tool_name"]
                                                                         for case in named),
                                         "data_lines": distribution(case["data_lines"][side] for case in named)}
                                  for side in ("baseline", "candidate")}
    return {"metrics": list(METRICS), "cases": cases, "summary": summary}


def tool_name_after_first_byte(times: Mapping[str, float | None]) -> float:
    """Seconds from a stream's first byte to its first visible tool name (both must be present)."""
    return float(times["first_tool_name"]) - float(times["first_byte"] or 0.0)
