"""The loaded form of a case (`cases/*.yaml`, cases/README.md): what to send, and what each profile
must answer. `build_case` makes a `Case` from a case file's entry once `conformance.suite.cases` has checked
it (tools resolved, descriptions folded, stream overrides merged)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

# How a case's request is sent: "non-stream", "stream" (a delta per token), or "stream@N": a stream asked
# to deliver N tokens per delta ("stream@whole": every token after the first in one delta), its granularity.
Mode = str
Endpoint = Literal["chat", "responses", "preflight"]

MODES: tuple[Mode, ...] = ("non-stream", "stream")  # what a case names in `modes`
ONE_TOKEN_STREAM: Mode = "stream"  # the reference of a case's granular streams
PREFLIGHT_MODES: tuple[Mode, ...] = ("non-stream",)  # a preflight is one plain request
GRANULAR_PREFIX = "stream@"
# "whole": more tokens in one delta than any case generates (vLLM still sends the first token on its own)
WHOLE_OUTPUT = "whole"
WHOLE_OUTPUT_TOKENS = 1_000_000
GRANULARITIES: tuple[str, ...] = ("2", "3", "5", "8", WHOLE_OUTPUT)  # `--granularities all`
# What a gate or a run sends unless told (`--granularities`): a call boundary inside one delta (3 tokens:
# a delimiter and its neighbours; whole: every boundary at once) at a third of the requests of all five.
DEFAULT_GRANULARITIES: tuple[str, ...] = ("3", WHOLE_OUTPUT)
# The request field that asks for N tokens per delta (vLLM's Python frontend, 0.32 on: it raises the
# server's own --stream-interval for the request, and sends the first token at once all the same).
STREAM_INTERVAL_FIELD = "stream_interval"
GRANULARITY_FEATURE = "stream_granularity"  # the feature every granular stream's result is listed under
# The second turn of a tool loop, as one rebuilder (a client) sent it back: "turn2@<rebuilder>"
# (conformance.run.second_turn). Its results are listed under the feature of a conversation holding a call.
SECOND_TURN_PREFIX = "turn2@"
SECOND_TURN_FEATURE = "multi_turn"


def second_turn_mode(rebuilder: str) -> Mode:
    """The mode of a case's second turn as `rebuilder` sends it."""
    return SECOND_TURN_PREFIX + rebuilder


def rebuilder_of(mode: Mode) -> str | None:
    """The rebuilder of a second-turn mode (None: a mode of the first turn)."""
    return mode.removeprefix(SECOND_TURN_PREFIX) if mode.startswith(SECOND_TURN_PREFIX) else None


def is_stream(mode: Mode) -> bool:
    """Whether `mode` sends a streaming request (at any granularity)."""
    return mode == "stream" or mode.startswith(GRANULAR_PREFIX)


def granular_mode(granularity: str) -> Mode:
    """The mode of a stream asked to deliver `granularity` tokens per delta ("whole": the whole output)."""
    return GRANULAR_PREFIX + granularity


def tokens_per_delta(mode: Mode) -> int | None:
    """The tokens per delta a granular mode asks for (None: "stream" or "non-stream", one token per delta)."""
    if not mode.startswith(GRANULAR_PREFIX):
        return None
    granularity = mode.removeprefix(GRANULAR_PREFIX)
    return WHOLE_OUTPUT_TOKENS if granularity == WHOLE_OUTPUT else int(granularity)


def mode_order(mode: Mode) -> tuple[int, int]:
    """Sort key: non-stream, stream, the granular streams by their tokens per delta (a stream is
    judged against the non-stream, a granular stream against the one-token stream), then the second turns."""
    if mode in MODES:
        return (MODES.index(mode), 0)
    return (len(MODES), tokens_per_delta(mode) or 0) if rebuilder_of(mode) is None else (len(MODES) + 1, 0)
MESSAGE_FIELDS = ("reasoning", "content", "tool_calls")
# What a case adds to a client's request to bound the run: a client idiom's body leaves them out, and a second turn
# rebuilt by a client gets the case's own where the client left them out.
RUN_CONTROLS = ("max_tokens", "temperature")


@dataclass(frozen=True)
class ExpectedToolCall:
    """One expected call. `arguments` compares as a JSON value; `arguments_raw` as the exact string."""

    name: str
    arguments: Any = None
    arguments_raw: str | None = None

    @property
    def is_raw(self) -> bool:
        return self.arguments_raw is not None


@dataclass(frozen=True)
class ExpectedMessage:
    """The complete parsed message. None and "" both mean empty; no tool calls is `()`."""

    reasoning: str | None = None
    content: str | None = None
    tool_calls: tuple[ExpectedToolCall, ...] = ()


@dataclass(frozen=True)
class ExpectedError:
    """The request must be refused with this HTTP status; `message` is a substring of error.message."""

    status: int
    param: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class ExpectedPreflight:
    """The answer to a CORS preflight: HTTP status, response headers by lower-case name (a value
    must match exactly, None: the header must be absent) and a substring of the body."""

    status: int
    headers: Mapping[str, str | None] = field(default_factory=dict)
    body: str | None = None


@dataclass(frozen=True)
class Expectation:
    """What one profile must return: either `error`, or `message` + `finish_reason`, or (endpoint
    `preflight`) `preflight`; or `skip`, a known reason why the profile cannot run the case (the
    case is then not sent, and its skip does not count against the run's verdict).

    `stream_overrides` names the fields (of reasoning, content, tool_calls, finish_reason) where the
    reassembled stream knowingly differs from the non-streaming response; `stream_message` and
    `stream_finish_reason` are the values expected in streaming mode (equal to the non-streaming
    ones when not overridden). Use `for_mode(mode)` to get the expectation that applies to a mode.
    """

    error: ExpectedError | None = None
    message: ExpectedMessage | None = None
    finish_reason: str | None = None
    tool_call_streaming: Literal["whole", "incremental"] | None = None
    # Figures of the answer's usage object by their path in it ("completion_tokens_details.reasoning_tokens");
    # None: must be absent or null. Empty: usage is not checked.
    usage: Mapping[str, int | None] = field(default_factory=dict)
    stream_overrides: frozenset[str] = frozenset()
    stream_message: ExpectedMessage | None = None
    stream_finish_reason: str | None = None
    preflight: ExpectedPreflight | None = None
    skip: str | None = None
    # The reference outcome of a format-independent case (the format's own parse of its rendered turn):
    # the profile's documented rules (`conformance.record.server_rules`) say which differences pass.
    by_reference: bool = False
    # A known bug of the server, declared on the format (its reason and link): `message` is the deviating
    # answer, so the case fails as stale once the server answers the format's parse again.
    deviation: str | None = None
    # How a format-independent case's text was written: by the format's `chat_template`, or (its fallback)
    # from its `response_template`'s own delimiters; None: a case with a raw forced text
    rendered_with: Literal["chat_template", "response_template"] | None = None
    # Why the chat template could not write it (rendered_with `response_template`), as the suite found
    rendered_why: str | None = None

    def for_mode(self, mode: Mode) -> Expectation:
        """The expectation in `mode`, with the stream overrides applied for a stream (any granularity)."""
        if mode == "non-stream" or self.error is not None or self.skip is not None:
            return self
        return replace(self, message=self.stream_message, finish_reason=self.stream_finish_reason)


@dataclass(frozen=True)
class Natural:
    """Natural mode (no forced output): the tool a capable model is expected to call, if any."""

    expect_tool: str | None = None


@dataclass(frozen=True)
class SecondTurn:
    """A tool loop's second turn: the tool messages' contents (one per call of turn 1) and the turn the
    model writes next; rendered in a format, its forced text and reference (as a turn case's). `written`:
    turn 1 as the model wrote it, for a case with a raw forced text (a turn case's `turn` is that)."""

    tool_results: tuple[str, ...]
    turn: ExpectedMessage
    written: ExpectedMessage | None = None
    force: str | None = None
    reference: Expectation | None = None


@dataclass(frozen=True)
class Case:
    """One case, tools resolved. Treat `request` as read-only (deep-copy it before changing it)."""

    id: str
    description: str
    features: tuple[str, ...]
    references: tuple[str, ...]
    modes: tuple[Mode, ...]
    endpoint: Endpoint
    request: dict[str, Any]
    force: str | None
    expect: Mapping[str, Expectation]
    natural: Natural | None
    source: Path
    index: int  # position of the case in its file, from 0
    line: int  # line of the case in its file, from 1
    # The tiny checkpoint's variant (conformance.formats.tiny_checkpoint.VARIANTS) the case needs; None: the profile record's.
    fixture_variant: str | None = None
    # The response format `force` is written in (conformance.formats.registry; None: the default format's).
    format: str | None = None
    # A format-independent case: the assistant turn the model writes, rendered per format into `force`
    # (conformance.suite.format_cases), whose parse is `reference`, what every profile without an
    # expectation of its own is judged against.
    turn: ExpectedMessage | None = None
    reference: Expectation | None = None
    shape: str | None = None  # a change to a turn's rendered text (conformance.suite.format_cases.SHAPES)
    second_turn: SecondTurn | None = None
    # A case with a raw `force` whose reference outcome is its format's own parse of that text (YAML
    # `reference: parse`), judged as a turn case is; its profiles state only refusals and skips
    judged_by_parse: bool = False

    @property
    def written_turn(self) -> ExpectedMessage | None:
        """Turn 1 as the model wrote it, which a second turn sends back: `second_turn.written` (a case with a
        raw forced text), else the turn case's `turn`; None without a second turn."""
        return None if self.second_turn is None else self.second_turn.written or self.turn

    def tool_parameters(self) -> dict[str, dict[str, Any]]:
        """Each request tool's JSON Schema for its arguments, by function name (chat or responses shape)."""
        result = {}
        for tool in self.request.get("tools", []):
            function = tool.get("function", tool)
            result[function["name"]] = function.get("parameters", {})
        return result


def build_case(raw: dict[str, Any], index: int, tools: Mapping[str, Any], source: Path, line: int) -> Case:
    endpoint: Endpoint = raw.get("endpoint", "chat")
    request = copy.deepcopy(raw["request"])
    if "tools" in request:
        resolved = [copy.deepcopy(tools[t]) if isinstance(t, str) else t for t in request["tools"]]
        request["tools"] = [_responses_tool(t) for t in resolved] if endpoint == "responses" else resolved
    return Case(
        id=raw["id"],
        description=" ".join(raw["description"].split()),
        features=tuple(raw["features"]),
        references=tuple(raw.get("references", ())),
        modes=PREFLIGHT_MODES if endpoint == "preflight" else tuple(raw.get("modes", MODES)),
        endpoint=endpoint,
        request=request,
        force=raw.get("force"),
        expect={profile: build_expectation(e) for profile, e in raw.get("expect", {}).items()},
        natural=Natural(**raw["natural"]) if "natural" in raw else None,
        source=source,
        index=index,
        line=line,
        fixture_variant=raw.get("fixture_variant"),
        format=raw.get("format"),
        turn=build_message(raw["turn"]) if "turn" in raw else None,
        shape=raw.get("shape"),
        second_turn=_second_turn(raw["second_turn"]) if "second_turn" in raw else None,
        judged_by_parse=raw.get("reference") == "parse",
    )


def _second_turn(raw: Mapping[str, Any]) -> SecondTurn:
    written = build_message(raw["written"]) if "written" in raw else None
    return SecondTurn(tuple(raw["tool_results"]), build_message(raw["turn"]), written=written)


def _responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions tool object in the flat Responses API shape."""
    return {"type": "function", **tool["function"]}


def build_expectation(raw: Mapping[str, Any]) -> Expectation:
    if "preflight" in raw:
        return Expectation(preflight=ExpectedPreflight(**raw["preflight"]))
    if "error" in raw:
        return Expectation(error=ExpectedError(**raw["error"]))
    if "skip" in raw:
        return Expectation(skip=" ".join(raw["skip"].split()))
    message = build_message(raw["message"])
    overrides = raw.get("stream", {})
    return Expectation(
        message=message,
        finish_reason=raw["finish_reason"],
        tool_call_streaming=raw.get("tool_call_streaming"),
        usage=dict(raw.get("usage", {})),
        stream_overrides=frozenset(overrides),
        stream_message=_merge(message, overrides),
        stream_finish_reason=overrides.get("finish_reason", raw["finish_reason"]),
    )


def _merge(message: ExpectedMessage, overrides: Mapping[str, Any]) -> ExpectedMessage:
    fields = {key: overrides[key] for key in MESSAGE_FIELDS if key in overrides}
    if "tool_calls" in fields:
        fields["tool_calls"] = _build_calls(fields["tool_calls"])
    return replace(message, **fields)


def build_message(raw: Mapping[str, Any]) -> ExpectedMessage:
    return ExpectedMessage(
        reasoning=raw.get("reasoning"),
        content=raw.get("content"),
        tool_calls=_build_calls(raw.get("tool_calls", [])),
    )


def _build_calls(raw: list[Mapping[str, Any]]) -> tuple[ExpectedToolCall, ...]:
    return tuple(ExpectedToolCall(**call) for call in raw)
