"""Reading what a server sent: the client-visible message of a non-streaming answer, a recorded
stream taken apart and reassembled the way a client would, and the comparable view of a message.
Pure functions over transcripts (conformance.record.transcript), shared by the checks, the gate and the reports."""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.record.case_model import MESSAGE_FIELDS, is_stream
from conformance.record.transcript import Transcript
from conformance.util.json_codec import JsonTooDeep, parse_json

VIEW_FIELDS = (*MESSAGE_FIELDS, "finish_reason")  # what message comparisons look at


REASONING_KEYS = ("reasoning", "reasoning_content")


RESPONSES_TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


@dataclass(frozen=True)
class ToolCall:
    name: str | None
    arguments: str | None  # the arguments string exactly as delivered
    id: str | None = None
    type: str | None = None


@dataclass
class Message:
    """The client-visible result of one response, however it was delivered."""

    reasoning: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    reasoning_keys: set[str] = field(default_factory=set)  # which field names carried reasoning


@dataclass
class StreamReading:
    """A recorded stream taken apart: the reassembled message plus what the framing looked like."""

    message: Message
    chunks: list[dict[str, Any]]
    invalid_lines: list[str]  # problems that make the stream unreadable (invalid SSE)
    too_deep_lines: list[int]  # numbers of the data lines nested deeper than the JSON reader's bound
    stream_error: Any  # an error object sent inside the stream
    done: bool
    lines_after_done: int
    tool_deltas: dict[int, list[dict[str, Any]]]  # per index, every tool-call delta in order
    tool_delta_problems: list[str]
    events: list[dict[str, Any]]  # Responses API: every event object
    final: Message | None = None  # Responses API: the message of the terminal event's full response


def _join(pieces: Iterable[str | None]) -> str | None:
    text = "".join(piece for piece in pieces if piece)
    return text or None


def message_from_chat_json(message: Mapping[str, Any], finish_reason: str | None) -> Message:
    keys = {key for key in REASONING_KEYS if message.get(key)}
    calls = [
        ToolCall(
            name=(call.get("function") or {}).get("name"),
            arguments=(call.get("function") or {}).get("arguments"),
            id=call.get("id"),
            type=call.get("type"),
        )
        for call in message.get("tool_calls") or []
    ]
    return Message(
        reasoning=_join(message.get(key) for key in REASONING_KEYS),
        content=message.get("content") or None,
        tool_calls=calls,
        finish_reason=finish_reason,
        reasoning_keys=keys,
    )


def message_from_responses_json(response: Mapping[str, Any]) -> Message:
    reasoning, content, calls = [], [], []
    for item in response.get("output") or []:
        kind = item.get("type")
        if kind == "reasoning":
            reasoning += [part.get("text") for part in item.get("content") or []]
        elif kind == "message":
            content += [part.get("text") for part in item.get("content") or [] if part.get("type") == "output_text"]
        elif kind == "function_call":
            calls.append(ToolCall(item.get("name"), item.get("arguments"), item.get("call_id"), "function"))
    # The response status (completed, incomplete, ...) stands in for finish_reason (cases/README.md).
    status = response.get("status")
    return Message(_join(reasoning), _join(content), calls, status, {"reasoning"} if _join(reasoning) else set())


def response_message(transcript: Transcript) -> Message | None:
    """The message of a non-streaming response (None if there is none)."""
    response = transcript.response
    if not isinstance(response, Mapping):
        return None
    if transcript.endpoint == "responses":
        return message_from_responses_json(response)
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return None
    return message_from_chat_json(choices[0].get("message") or {}, choices[0].get("finish_reason"))


def read_stream(transcript: Transcript) -> StreamReading:
    """Parse the recorded SSE lines and reassemble the message (choice 0) the way a client would.
    Verifying, judging and the reports each read a stream: the reading is kept while the transcript
    lives and its lines stay as they are (treat it as read-only)."""
    kept = _readings.get(id(transcript))
    if kept is not None and kept[0]() is transcript and kept[1] == (transcript.endpoint, len(transcript.sse)):
        return kept[2]
    reading = _read_stream(transcript)
    key = id(transcript)
    _readings[key] = (weakref.ref(transcript, lambda _, key=key: _readings.pop(key, None)),
                      (transcript.endpoint, len(transcript.sse)), reading)
    return reading


_readings: dict[int, tuple[Any, tuple[str, int], StreamReading]] = {}  # id -> (weak ref, what was read, reading)


def _read_stream(transcript: Transcript) -> StreamReading:
    chunks: list[dict[str, Any]] = []
    invalid: list[str] = []
    too_deep: list[int] = []
    stream_error = None
    done = False
    after_done = 0
    for number, line in enumerate(transcript.sse, start=1):
        if done:
            after_done += 1
            continue
        if line.data.strip() == "[DONE]":
            done = True
            continue
        try:
            payload = parse_json(line.data)
        except JsonTooDeep:
            too_deep.append(number)  # the server's fault, not a broken stream: the shape check names it
            continue
        except json.JSONDecodeError as exc:
            invalid.append(f"data line {number} is not JSON ({exc.msg}): {line.data[:80]!r}")
            continue
        if not isinstance(payload, dict):
            invalid.append(f"data line {number} is not a JSON object: {line.data[:80]!r}")
        elif "error" in payload and transcript.endpoint == "chat":
            stream_error = payload["error"]
        elif payload.get("type") == "error":
            stream_error = payload
        else:
            chunks.append(payload)
    if transcript.endpoint == "responses":
        return _read_responses_stream(chunks, invalid, too_deep, stream_error, done, after_done)
    return _read_chat_stream(chunks, invalid, too_deep, stream_error, done, after_done)


def chat_message_after(chunks: Sequence[Mapping[str, Any]]) -> Message:
    """The message a client has reassembled once it has read `chunks` (a chat stream's JSON chunks)."""
    return _read_chat_stream(chunks, [], [], None, False, 0).message


def _read_chat_stream(chunks, invalid, too_deep, stream_error, done, after_done) -> StreamReading:
    reasoning: list[str] = []
    content: list[str] = []
    keys: set[str] = set()
    finish_reason = None
    tool_deltas: dict[int, list[dict[str, Any]]] = {}
    problems: list[str] = []
    for number, chunk in enumerate(chunks, start=1):
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key in REASONING_KEYS:
                if delta.get(key):
                    keys.add(key)
                    reasoning.append(delta[key])
            if delta.get("content"):
                content.append(delta["content"])
            for tool_delta in delta.get("tool_calls") or []:
                index = tool_delta.get("index")
                if not isinstance(index, int):
                    problems.append(f"chunk {number}: tool-call delta without an integer `index`: {tool_delta}")
                    continue
                tool_deltas.setdefault(index, []).append(tool_delta)
            finish_reason = choice.get("finish_reason") or finish_reason
    calls = []
    for index in sorted(tool_deltas):
        deltas = tool_deltas[index]
        functions = [d.get("function") or {} for d in deltas]
        calls.append(
            ToolCall(
                name=_join(f.get("name") for f in functions),
                arguments=_join(f.get("arguments") for f in functions) or "",
                id=next((d["id"] for d in deltas if d.get("id")), None),
                type=next((d["type"] for d in deltas if d.get("type")), None),
            )
        )
    message = Message(_join(reasoning), _join(content), calls, finish_reason, keys)
    return StreamReading(message, chunks, invalid, too_deep, stream_error, done, after_done, tool_deltas, problems, [])


def _read_responses_stream(events, invalid, too_deep, stream_error, done, after_done) -> StreamReading:
    """Reassemble a Responses stream from its delta events, as a client consuming deltas would; the
    terminal event's full response is kept apart (`final`) to check that the two agree."""
    items: dict[int, Mapping[str, Any]] = {}  # output_index -> the item announced by output_item.added
    reasoning: list[str] = []
    content: list[str] = []
    tool_deltas: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        kind, index = event.get("type"), event.get("output_index", 0)
        if kind == "response.output_item.added":
            items[index] = event.get("item") or {}
        elif kind == "response.reasoning_text.delta":
            reasoning.append(event.get("delta"))
        elif kind == "response.output_text.delta":
            content.append(event.get("delta"))
        elif kind == "response.function_call_arguments.delta":
            tool_deltas.setdefault(index, []).append(event)
    calls = [
        ToolCall(item.get("name"), "".join(e.get("delta") or "" for e in tool_deltas.get(index, [])),
                 item.get("call_id"), "function")
        for index, item in sorted(items.items())
        if item.get("type") == "function_call"
    ]  # fmt: skip
    terminal = [e for e in events if e.get("type") in RESPONSES_TERMINAL_EVENTS]
    final = None
    if terminal and isinstance(terminal[-1].get("response"), Mapping):
        final = message_from_responses_json(terminal[-1]["response"])
    text = _join(reasoning)
    finish_reason = final.finish_reason if final else None
    message = Message(text, _join(content), calls, finish_reason, {"reasoning"} if text else set())
    return StreamReading(message, events, invalid, too_deep, stream_error, done, after_done, tool_deltas, [], events,
                         final)


def empty_text(text: str | None) -> str | None:
    """An empty text as None (how message views compare texts)."""
    return text or None


def _json_or_raw(arguments: str | None) -> Any:
    try:
        return {"json": parse_json(arguments)} if arguments is not None else None
    except (json.JSONDecodeError, TypeError):
        return {"raw": arguments}


def message_view(message: Message, fields: Sequence[str] = VIEW_FIELDS) -> dict[str, Any]:
    """A comparable, JSON-friendly view: empty texts as null, arguments as JSON values when they parse."""
    view: dict[str, Any] = {}
    if "reasoning" in fields:
        view["reasoning"] = empty_text(message.reasoning)
    if "content" in fields:
        view["content"] = empty_text(message.content)
    if "tool_calls" in fields:
        view["tool_calls"] = [
            {"name": call.name, "arguments": _json_or_raw(call.arguments)} for call in message.tool_calls
        ]
    if "finish_reason" in fields:
        view["finish_reason"] = message.finish_reason
    return view


def error_object(body: Any) -> Mapping[str, Any]:
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, str):  # vLLM's 401: {"error": "Unauthorized"}
            return {"message": inner}
        return inner if isinstance(inner, Mapping) else body
    return {"message": body}


def error_text(body: Any) -> str:
    """The message of an error body, as one short line."""
    error = error_object(body)
    return str(error.get("message") or error.get("detail") or body)[:300]


def brief_json(value: Any, limit: int = 80) -> str:
    """`value` as JSON, cut to `limit` characters (with "...") for a one-line message."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def usage_of(transcript: Transcript) -> dict[str, Any] | None:
    """The usage object a client sees: the response's, or the last stream chunk's that has one."""
    if not is_stream(transcript.mode):
        usage = (transcript.response or {}).get("usage")
        return usage if isinstance(usage, Mapping) else None
    usage = None
    for line in transcript.sse:
        try:
            payload = parse_json(line.data)
        except json.JSONDecodeError:
            continue
        if isinstance(payload, Mapping):
            found = payload.get("usage") or (payload.get("response") or {}).get("usage")
            usage = found if isinstance(found, Mapping) else usage
    return usage
