"""Hand-made gate dicts (the gate.json format) for the gate report tests: every difference kind,
acknowledged, unacknowledged and stale entries, server strings that try to break out of Markdown,
HTML, XML and GitHub annotations, and timings with gaps."""

from __future__ import annotations

import copy
import statistics
from typing import Any

from conformance.servers.profiles import cors_advice_for

HOSTILE = "</script><script>alert(1)</script> <tool_call>{\"a\": 1}</tool_call> | `x` ``` $x$ ]]> \"q' &amp;\x00\x1b\u2028\ud800\n::error::boom %0A"


def _stamp(profile: str, port: int, parser: list[str]) -> dict[str, Any]:
    return {"suite_version": "0.1.0", "profile": profile, "base_url": f"http://127.0.0.1:{port}/v1",
            "model": "/tmp/tiny", "server_version": "0.32.0", "server_args": parser,
            "checkpoint_revision": "sha256:abc", "recorded_at": "2026-12-01T10:00:00+00:00", "completion": "complete"}


def _difference(kind: str, case_id: str, mode: str, features: list[str], field: str | None, baseline: Any,
                candidate: Any, summary: str, acknowledged: dict[str, Any] | None = None,
                request: Any = None, answers: tuple[str | None, str | None] = (None, None)) -> dict[str, Any]:
    return {"kind": kind, "case_id": case_id, "mode": mode, "features": features, "description": f"{case_id} description",
            "field": field, "baseline": baseline, "candidate": candidate, "summary": summary,
            "acknowledged": acknowledged,
            "excerpt": {"request": request, "baseline": answers[0], "candidate": answers[1]}}


def _timing_side(first_tool_name: float | None, reasoning: float | None, first_byte: float) -> dict[str, Any]:
    return {"first_byte": first_byte, "first_reasoning": reasoning, "first_content": None,
            "first_tool_name": first_tool_name, "tool_call_complete": None if first_tool_name is None else first_tool_name + 0.003}


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "max": None}
    return {"n": len(values), "p50": statistics.median(values), "p90": statistics.quantiles(values, n=10)[-1],
            "max": max(values)}


def _timing_summary(metrics: list[str], cases: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {side: {m: _stats([c[side][m] for c in cases if c[side][m] is not None]) for m in metrics}
                               for side in ("baseline", "candidate")}
    summary["first_tool_name_delay"] = _stats([c["candidate"]["first_tool_name"] - c["baseline"]["first_tool_name"]
                                               for c in cases if c["baseline"]["first_tool_name"] is not None
                                               and c["candidate"]["first_tool_name"] is not None])
    return summary


def full_gate() -> dict[str, Any]:
    """A failing gate: every kind of difference, two acknowledged, one stale, hostile strings."""
    required = {"tool_choice": "required", "stream": True}
    refusal = {"status": 400, "param": "tool_choice",
               "message": "response_template parsing cannot guarantee required tool choice without a format-compatible structural grammar (parameter=tool_choice)"}
    differences = [
        _difference("request_refused", "tool-choice-required", "stream", ["tool_choice_required", "request_error"],
                    "tool_choice", {"status": 200}, refusal, "refused under the candidate: HTTP 400 param tool_choice",
                    acknowledged={"reason": "hf cannot force a call", "reference": "docs/vllm-0.32-contract.md#2-1",
                                  "client_action": "send `tool_choice: auto`; check for a call yourself",
                                  "source": "expect.yaml:12"},
                    request=required, answers=("HTTP 200, tool call get_weather({\"city\": \"Paris\"})",
                                               "HTTP 400 {\"param\": \"tool_choice\"}")),
        _difference("request_refused", "tool-choice-required", "non-stream", ["tool_choice_required", "request_error"],
                    "tool_choice", {"status": 200}, refusal, "refused under the candidate: HTTP 400 param tool_choice",
                    request={"tool_choice": "required", "stream": False},
                    answers=("HTTP 200, tool call get_weather", "HTTP 400")),
        _difference("request_refused", "strict-tool", "stream", ["strict_tool", "request_error"], "tools",
                    {"status": 200}, {"status": 400, "param": "tools", "message": "cannot guarantee strict tools"},
                    "refused under the candidate: HTTP 400 param tools",
                    request={"tools": [{"function": {"name": "get_weather", "strict": True}}]}),
        _difference("request_refused", "parallel-tool-calls-false", "stream", ["parallel_tool_calls_false"],
                    "parallel_tool_calls", {"status": 200},
                    {"status": 400, "param": "parallel_tool_calls", "message": "cannot guarantee parallel_tool_calls=False"},
                    "refused under the candidate: HTTP 400 param parallel_tool_calls",
                    request={"parallel_tool_calls": False}),
        _difference("request_accepted", "tools-empty", "stream", ["request_error"], "tools",
                    {"status": 400, "param": "tools"}, {"status": 200}, "accepted under the candidate"),
        _difference("stream_shape", "reasoning-then-one-call", "stream", ["reasoning", "tool_call"],
                    "tool_call_deltas[0]", 7, 1, "arguments in 7 deltas under the baseline, whole under the candidate",
                    acknowledged={"reason": "hf emits a call when its region closes", "reference": "docs/c.md#3-3",
                                  "source": "expect.yaml:30"}),
        _difference("stream_shape", "two-calls", "stream", ["parallel_calls", "tool_call"], "tool_call_streaming",
                    "incremental", "whole", "tool call streaming: incremental under the baseline, whole under the candidate"),
        _difference("stream_shape", "nested-arguments", "stream", ["nested_arguments", "tool_call"],
                    "tool_call_streaming", "incremental", "whole",
                    "tool call streaming: incremental under the baseline, whole under the candidate"),
        _difference("message", "content-after-call", "non-stream", ["content", "tool_call"], "content",
                    None, "Done.", "content after the tool call kept by the candidate",
                    request={"stream": False}, answers=("tool call get_weather, content null",
                                                       "tool call get_weather, content \"Done.\"")),
        _difference("message", "string-values-cast-to-integer", "stream", ["type_coercion", "tool_call"],
                    "tool_calls[0].arguments", {"json": {"days": "5"}}, {"json": {"days": 5}},
                    "arguments cast to the schema's types"),
        _difference("reasoning_field", "reasoning-only", "stream", ["reasoning"], None, "reasoning_content",
                    "reasoning", "reasoning arrives in another field"),
        _difference("finish_reason", "unclosed-call", "stream", ["unclosed_call", "truncated"], "finish_reason",
                    "tool_calls", "length", "finish_reason differs"),
        _difference("usage", "stream-usage", "stream", ["stream_usage"],
                    "usage.completion_tokens_details.reasoning_tokens", None, 12, "reasoning tokens counted"),
        _difference("client_replay", "malformed-call-alone", "stream", ["malformed_call"], "message",
                    "rebuilt", "not rebuilt", "openai-python's accumulator fails under the candidate"),
        _difference("outcome", "hostile-case", "stream", ["special_tokens"], "outcome", "pass", "fail",
                    "summary " + HOSTILE, request={"content": HOSTILE}, answers=(HOSTILE, HOSTILE + "2")),
        _difference("message", "hostile-case", "stream", ["special_tokens"], "content", HOSTILE, HOSTILE + "!",
                    HOSTILE, answers=(HOSTILE, HOSTILE)),
    ]
    cases = {}
    for d in differences:
        cases.setdefault(d["case_id"], []).append(d)
    behaviours = [
        {"case_id": case_id, "features": ds[0]["features"], "description": f"{case_id}: what it checks",
         "baseline": f"baseline of {case_id}", "candidate": f"candidate of {case_id}", "changed": True,
         "kinds": sorted({d["kind"] for d in ds}), "acknowledged": all(d["acknowledged"] for d in ds)}
        for case_id, ds in cases.items()
    ]
    behaviours[-1]["candidate"] = HOSTILE
    behaviours += [{"case_id": "plain-content", "features": ["content"], "description": "plain content",
                    "baseline": "content \"Hello\"", "candidate": "content \"Hello\"", "changed": False,
                    "kinds": [], "acknowledged": False},
                   {"case_id": "one-call", "features": ["tool_call"], "description": "one call",
                    "baseline": "1 call get_weather", "candidate": "1 call get_weather", "changed": False,
                    "kinds": [], "acknowledged": False}]
    unacknowledged = sum(1 for d in differences if not d["acknowledged"])
    metrics = ["first_byte", "first_reasoning", "first_content", "first_tool_name", "tool_call_complete"]
    timing_cases = [{"case_id": f"case-{i}", "mode": "stream",
                     "baseline": _timing_side(0.04 + (i * 7 % 12) * 0.004, 0.015 + (i % 4) * 0.002, 0.010 + (i % 3) * 0.001),
                     "candidate": _timing_side(0.09 + (i * 5 % 12) * 0.005, 0.016 + (i % 5) * 0.002, 0.011 + (i % 4) * 0.001)}
                    for i in range(12)]
    timing_cases.append({"case_id": "no-call", "mode": "stream", "baseline": _timing_side(None, None, 0.012),
                         "candidate": _timing_side(None, None, 0.013)})
    return {
        "format": "conformance-gate/1", "suite_version": "0.1.0", "created_at": "2026-12-01T10:00:00+00:00",
        "origin": "http://localhost:3000",
        "sides": {
            "baseline": {"label": "legacy", "run_dir": "baseline",
                         "stamp": _stamp("legacy", 8001, ["--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]),
                         "summary": {"counts": {"pass": 147, "fail": 0, "skip": 0, "error": 0}, "total": 147}},
            "candidate": {"label": "hf", "run_dir": "candidate",
                          "stamp": dict(_stamp("hf", 8002, ["--tool-call-parser", "hf", "--reasoning-parser", "hf"]),
                                        model="/tmp/tiny " + HOSTILE),
                          "summary": {"counts": {"pass": 146, "fail": 1, "skip": 0, "error": 0}, "total": 147},
                          "cors_advice": cors_advice_for("hf", "http://localhost:3000")},
        },
        "expectations": {"file": "expect.yaml", "note": "given with --expect"},
        "verdict": {"exit_code": 1, "outcome": "fail",
                    "line": f"{unacknowledged} unacknowledged differences, 2 acknowledged, 1 stale, 1 newly failing",
                    "unacknowledged": unacknowledged, "acknowledged": 2, "stale": 1, "newly_failing": 1},
        "differences": differences,
        "stale": [{"selector": {"case": "old-case"}, "kind": "message", "reason": "fixed upstream <b> " + HOSTILE,
                   "source": "expect.yaml:40"}],
        "behaviours": behaviours,
        "timing": {"metrics": metrics, "cases": timing_cases, "summary": _timing_summary(metrics, timing_cases)},
        "cors": {"origin": "http://localhost:3000", "path": "/v1/chat/completions",
                 "baseline": {"status": 400, "headers": {"access-control-allow-origin": None, "vary": "Origin",
                                                         "access-control-max-age": "600"},
                              "body": "Disallowed CORS origin"},
                 "candidate": {"status": 400, "headers": {"Vary": "Origin"}, "body": "Disallowed CORS origin"}},
    }


def passing_gate() -> dict[str, Any]:
    """A green gate: no difference, nothing stale, no timing, no CORS preflight."""
    gate = full_gate()
    gate.update(differences=[], stale=[], timing=None, cors=None,
                verdict={"exit_code": 0, "outcome": "pass", "line": "0 unacknowledged differences, 0 acknowledged, 0 stale, 0 newly failing",
                         "unacknowledged": 0, "acknowledged": 0, "stale": 0, "newly_failing": 0})
    gate["behaviours"] = [dict(b, changed=False, kinds=[], acknowledged=False) for b in gate["behaviours"]]
    return gate


def huge_gate(repeats: int = 400) -> dict[str, Any]:
    """A gate with thousands of differences whose strings are long: the Markdown must still fit."""
    gate = full_gate()
    base = gate["differences"]
    gate["differences"] = []
    gate["behaviours"] = []
    for i in range(repeats):
        for d in base:
            d = copy.deepcopy(d)
            d["case_id"] = f"{d['case_id']}-{i}"
            d["summary"] = d["summary"] + " " + "x" * 2000
            d["excerpt"]["baseline"] = "y" * 5000
            gate["differences"].append(d)
            gate["behaviours"].append({"case_id": d["case_id"], "features": d["features"], "description": "z" * 3000,
                                       "baseline": "b" * 3000, "candidate": "c" * 3000, "changed": True,
                                       "kinds": [d["kind"]], "acknowledged": bool(d["acknowledged"])})
    return gate
