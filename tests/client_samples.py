"""Known-bad and known-good answers for the client replay tests, as recorded transcripts."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine_helpers import STAMP, error_transcript, response_transcript, stream_transcript

from conformance.record.recording import make_header
from conformance.record.transcript import JsonLinesWriter, Transcript

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
STRICT_WEATHER = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
REQUEST = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
CALL_ID = "call_0123456789abcdef"


def chunk(delta: dict[str, Any], finish_reason: str | None = None, **choice: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0, "model": "tiny",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason, **choice}]}


def call_delta(name: str | None, arguments: str, *, index: int | None = 0, call_id: str | None = CALL_ID) -> dict[str, Any]:
    delta: dict[str, Any] = {"function": {"arguments": arguments, **({"name": name} if name else {})}}
    if index is not None:
        delta["index"] = index
    if call_id is not None:
        delta |= {"id": call_id, "type": "function"}
    return {"tool_calls": [delta]}


def samples() -> list[Transcript]:
    """One transcript per shape; its case id names the shape."""
    role = chunk({"role": "assistant", "content": ""})
    whole = call_delta("get_weather", '{"city": "Paris"}')
    shapes = [
        stream_transcript([role, chunk({"reasoning": "plan"}), chunk(whole), chunk({}, "tool_calls")],
                          case_id="good-whole-call", request=REQUEST),
        # the name again on every delta of the call (a server that repeats id, type and name)
        stream_transcript([role, chunk(call_delta("get_weather", "")), chunk(call_delta("get_weather", '{"city": ')),
                           chunk(call_delta("get_weather", '"Paris"}')), chunk({}, "tool_calls")],
                          case_id="name-on-every-delta", request=REQUEST),
        stream_transcript([role, chunk(call_delta("get_weather", '{"city": "Paris"}', index=None)), chunk({}, "tool_calls")],
                          case_id="missing-index", request=REQUEST),
        stream_transcript([role, chunk(whole), chunk({}, "length")], case_id="length-after-call", request=REQUEST),
        stream_transcript([role, chunk(whole), chunk({}, "length")], case_id="length-after-call-strict",
                          request={**REQUEST, "tools": [STRICT_WEATHER]}),
        stream_transcript([role, chunk({"reasoning": "plan"}), chunk({"content": "Sunny."}), chunk({}, "stop")],
                          case_id="reasoning-field", request=REQUEST),
        stream_transcript([role, chunk({"reasoning_content": "plan"}), chunk({"content": "Sunny."}), chunk({}, "stop")],
                          case_id="reasoning-content-field", request=REQUEST),
        response_transcript({"reasoning": "plan", "content": "Sunny."}, "stop", case_id="reasoning-field", request=REQUEST),
        response_transcript({"content": None, "tool_calls": [{"id": CALL_ID, "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]}, "tool_calls", case_id="good-whole-call",
            request=REQUEST),
    ]
    refusal = {"error": {"message": "cannot guarantee required tool choice (parameter=tool_choice)",
                         "type": "BadRequestError", "param": "tool_choice", "code": 400}}
    for mode in ("non-stream", "stream"):
        refused = error_transcript(400, refusal, mode=mode)
        refused.case_id, refused.request = "refused", {**REQUEST, "tool_choice": "required"}
        shapes.append(refused)
    return shapes


def write_recording(directory: Path, transcripts: list[Transcript]) -> Path:
    """A run directory holding `transcripts` as the engine writes them (header first)."""
    path = directory / "transcripts.jsonl"
    header = make_header("transcripts", cases=[], markers=[], server=asdict(STAMP), created_at="2026-12-01T00:00:00+00:00")
    with JsonLinesWriter(path) as writer:
        writer.write(header)
        for transcript in transcripts:
            writer.write(transcript.to_dict())
    return directory
