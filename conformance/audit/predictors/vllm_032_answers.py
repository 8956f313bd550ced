"""What vLLM 0.32 `hf` answers to a case's forced output, predicted offline: its parser fork's events,
shaped as its server shapes them.

The parse is vLLM 0.32's own fork (`vllm/parser/chat_parsing/`, loaded as a stand-alone package: no
engine, no torch); everything around it mirrors the server, statement by statement, from vLLM 0.32.0's
source (paths under `vllm/`):
1. Refusals before generation. `entrypoints/openai/chat_completion/protocol.py` `check_tool_usage`:
   `tools: []` (400, param `tools`); `tool_choice` defaults to `auto` when tools are given, else `none`;
   a `tool_choice` other than `none`/null without tools (400, param `tool_choice`). Then
   `parser/response_template.py` `ResponseTemplateParser.adjust_request`: with tools and a tool_choice
   other than `none`, strict tools, `required`, a named choice, `parallel_tool_calls: false` (in that
   order) are refused, 400 "response_template parsing cannot guarantee ...".
2. The output. The forced text, as the tokenizer spells it; `max_tokens` (or `max_completion_tokens`)
   cuts it after that many tokens, finish reason `length` (`v1/core/sched/utils.py` `check_stop`: the
   stop token is checked first, so a text of exactly `max_tokens` tokens is `length` too); otherwise
   `stop`, and the stop token's text is not part of the output.
3. The prefix: the prompt the chat template renders (with the request's `chat_template_kwargs` and
   `reasoning_effort`, `protocol.py` `build_chat_params`), decoded back from its tokens.
4. The parse (`parser/response_template.py` `_ResponseStream`): the template in its streaming form
   (`_streaming_template`: a `content` field added when every field has an opener, every field
   optional); chunks of thinking go to reasoning, unless `include_reasoning: false` drops them; chunks
   of thinking and content to content; a tool region, when tool parsing is on, gives its calls when it
   closes (a region cut off by the end of the output is finalised and closed as generated), none if
   any call lacks a name or arguments (`_to_tool_calls`), arguments kept when a string, else JSON
   (`ensure_ascii=False`); a malformed region gives nothing. With tool parsing off (`tool_choice`
   `none`, which is also the default without tools) the region's text goes to content.
   `_tool_parsing_enabled`: on for `auto` and for null (the server runs with auto tool choice).
5. The answer. Non-streaming (`serving.py` `chat_completion_full_generator`): reasoning dropped when
   `include_reasoning` is false; tool calls only with `tool_choice` `auto` (a null choice parses them
   but builds the message without them); finish reason `tool_calls` whenever calls were returned, even
   when generation was cut (`length`). Streaming (`chat_completion_stream_generator`): the parser is fed
   token by token and every call it emits is sent; finish reason `tool_calls` only when calls were
   sent and generation stopped (`stop`).
6. The Responses API (`entrypoints/openai/responses/`): `tool_choice` defaults to `auto`, tools or not
   (`protocol.py`), so tool parsing is on unless `none`; only `adjust_request`'s refusals apply;
   `max_output_tokens` cuts the output; the answer (`serving.py` `_make_response_output_items` ->
   `utils.py` `build_response_output_items`) is a reasoning item (unless `include_reasoning` is false), a
   message item when there is content and a function_call item per parsed call; its status is
   `incomplete` when generation was cut (`length`), else `completed`, in both modes (streaming feeds
   `parse_delta` token by token).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from conformance.formats.checkpoint_files import read_tokenizer_config
from conformance.formats.turn_text import render
from conformance.record.case_model import Case, ExpectedError, Mode
from conformance.record.outcomes import FAIL, Check
from conformance.record.transcript import ServerStamp, Transcript
from conformance.record.wire import Message, ToolCall, message_view, read_stream, response_message
from conformance.run.checks.expectations import check_expected_error, check_expected_message, expected_view
from conformance.servers.profiles import expectation_for, profile_record

Endpoint = Literal["chat", "responses"]
LIMIT_KEYS: dict[Endpoint, tuple[str, ...]] = {"chat": ("max_completion_tokens", "max_tokens"),
                                               "responses": ("max_output_tokens",)}
THINKING, CONTENT, TOOL_CALLS = "thinking", "content", "tool_calls"
GUARANTEE_REFUSAL = "response_template parsing cannot guarantee {} without a format-compatible structural grammar"
EMPTY_TOOLS = "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely."
CHOICE_WITHOUT_TOOLS = "When using `tool_choice`, `tools` must be set."


# (case id, mode) -> why the prediction and vLLM 0.32 hf part there: none on the shipped cases, offline
# (tests/test_hf_prediction.py) or against the real server (tests/test_live_conformance.py).
EXPLAINED_DIFFERENCES: dict[tuple[str, Mode], str] = {}


@dataclass(frozen=True)
class Refusal:
    """The request is refused before generation."""

    status: int
    param: str | None
    message: str


Prediction = Message | Refusal


@dataclass(frozen=True)
class HfCheckpoint:
    """What the prediction needs of the served checkpoint: its directory (the tokenizer) and the round trip's
    subject (chat template, response_template, special tokens)."""

    directory: Path
    subject: Any

    @classmethod
    def load(cls, directory: Path) -> HfCheckpoint:
        from conformance.audit.roundtrip.roundtrip import subject_of

        directory = Path(directory)
        config = read_tokenizer_config(directory / "tokenizer_config.json")
        subject = subject_of(config, {name: directory / name for name in ("chat_template.jinja",)
                                      if (directory / name).is_file()})
        if isinstance(subject, str):
            raise ValueError(f"{directory}: {subject}")
        return cls(directory, subject)

    @property
    def tokenizer(self) -> Any:
        return _tokenizer(str(self.directory))


@cache
def _tokenizer(directory: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


@cache
def _fork() -> Any:
    """vLLM 0.32's chat_parsing fork from this environment, loaded without vLLM."""
    from conformance.audit.implementations.registry import IMPLEMENTATIONS
    from conformance.audit.implementations.worker import load_implementation

    return load_implementation("folder", str(IMPLEMENTATIONS["vllm-0.32"].locate()), name="vllm_0_32_chat_parsing")


def streaming_template(template: dict[str, Any]) -> dict[str, Any]:
    """`_streaming_template`'s input to the loader: a content field added when every field has an opener,
    every field optional (vLLM 0.32 and SGLang 0.5.23 alike)."""
    result = copy.deepcopy(template)
    fields = result["fields"]
    if CONTENT not in fields and all("open" in spec or "open_pattern" in spec for spec in fields.values()):
        fields[CONTENT] = {}
    for spec in fields.values():
        spec["optional"] = True
    return result


def _tool_choice(request: Mapping[str, Any], endpoint: Endpoint) -> Any:
    if "tool_choice" not in request and (request.get("tools") or endpoint == "responses"):
        return "auto"
    return request.get("tool_choice", "none")


def _is_strict(tool: Mapping[str, Any]) -> bool:
    function = tool.get("function")
    return bool(tool.get("strict") or (isinstance(function, Mapping) and function.get("strict")))


def refusal(request: Mapping[str, Any], endpoint: Endpoint = "chat") -> Refusal | None:
    """The 400 vLLM 0.32 hf answers before generating (section 1 of the module docstring), if any."""
    tools, choice = request.get("tools"), _tool_choice(request, endpoint)
    if endpoint == "chat" and tools == []:
        return Refusal(400, "tools", EMPTY_TOOLS)
    if endpoint == "chat" and choice not in ("none", None) and not tools:
        return Refusal(400, "tool_choice", CHOICE_WITHOUT_TOOLS)
    if not tools or choice == "none":
        return None
    for guarantee, parameter, applies in (
        ("strict tools", "tools", any(_is_strict(tool) for tool in tools)),
        ("required tool choice", "tool_choice", choice == "required"),
        ("named tool choice", "tool_choice", isinstance(choice, Mapping)),
        ("parallel_tool_calls=False", "parallel_tool_calls", request.get("parallel_tool_calls", True) is False),
    ):
        if applies:
            return Refusal(400, parameter, GUARANTEE_REFUSAL.format(guarantee))
    return None


def generated(checkpoint: HfCheckpoint, force: str, request: Mapping[str, Any],
              endpoint: Endpoint = "chat") -> tuple[list[str], str]:
    """The output's text pieces as the engine streams them (one token each, incomplete UTF-8 held back, as the
    incremental detokenizer does) and the engine's finish reason."""
    tokenizer = checkpoint.tokenizer
    ids = tokenizer.encode(force, add_special_tokens=False)
    limit = next((request[key] for key in LIMIT_KEYS[endpoint] if request.get(key)), None)
    finish = "stop"
    if limit is not None and len(ids) >= limit:
        ids, finish = ids[:limit], "length"
    pieces, shown = [], ""
    for end in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:end], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if text.endswith("\ufffd") and end < len(ids):
            continue
        pieces.append(text[len(shown):])
        shown = text
    return [piece for piece in pieces if piece], finish


def prefix(checkpoint: HfCheckpoint, request: Mapping[str, Any]) -> str:
    """The rendered prompt the parser starts after (section 3)."""
    kwargs = dict(request.get("chat_template_kwargs") or {})
    if request.get("reasoning_effort") is not None:
        kwargs.setdefault("reasoning_effort", request["reasoning_effort"])
        kwargs.setdefault("enable_thinking", request["reasoning_effort"] != "none")
    return render(checkpoint.subject, list(request.get("messages", [])), list(request.get("tools") or []),
                  add_generation_prompt=True, **kwargs)


def _calls(value: Any) -> list[tuple[str, str]]:
    """`_to_tool_calls`: (name, arguments) of each call in a region's value, or none if one is incomplete."""
    calls = []
    for item in value if isinstance(value, list) else [value]:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            return []
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name or arguments is None:
            return []
        calls.append((name, arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)))
    return calls


@dataclass
class _Routed:
    reasoning: str = ""
    content: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)


def _parse(checkpoint: HfCheckpoint, request: Mapping[str, Any], pieces: Sequence[str], parse_tools: bool) -> _Routed:
    """`_ResponseStream`: feed the pieces, finalise, route the events (section 4)."""
    include_reasoning = request.get("include_reasoning", True) is not False
    template = streaming_template(checkpoint.subject.response_template)
    parser = _fork().ResponseParser(template, prefix=prefix(checkpoint, request), tools=list(request.get("tools") or []))
    prefix_end = len(parser.input_text)
    routed = _Routed()
    events = [event for piece in pieces for event in parser.feed(piece)]
    if len(parser.input_text) > prefix_end:
        events += parser.finalize()[1]
    for event in events:
        field, kind = event.get("field"), event["type"]
        if field == TOOL_CALLS:
            if not parse_tools:
                routed.content += (event["text"] if kind == "region_chunk"
                                   else parser.input_text[max(event["start"], prefix_end):event["end"]])
            elif kind == "region_close":
                routed.calls += _calls(event.get("value"))
        elif kind == "region_chunk" and field == THINKING:
            routed.reasoning += event["text"] if include_reasoning else ""
        elif kind == "region_chunk" and field == CONTENT:
            routed.content += event["text"]
    return routed


def predict(checkpoint: HfCheckpoint, request: Mapping[str, Any], force: str, mode: Mode,
            endpoint: Endpoint = "chat") -> Prediction:
    """vLLM 0.32 hf's answer to a `request` whose output is forced to `force` (a Responses API answer's
    status stands in for its finish reason, as in the case files)."""
    if (refused := refusal(request, endpoint)) is not None:
        return refused
    pieces, finish = generated(checkpoint, force, request, endpoint)
    choice = _tool_choice(request, endpoint)
    routed = _parse(checkpoint, request, pieces if mode == "stream" else ["".join(pieces)], parse_tools=choice != "none")
    if endpoint == "responses":
        calls, finish_reason = routed.calls, "incomplete" if finish == "length" else "completed"
    elif mode == "stream":
        calls = routed.calls
        finish_reason = "tool_calls" if calls and finish == "stop" else finish
    else:
        calls = routed.calls if choice == "auto" else []
        finish_reason = "tool_calls" if calls else finish
    return Message(reasoning=routed.reasoning or None, content=routed.content or None,
                   tool_calls=[ToolCall(name, arguments) for name, arguments in calls], finish_reason=finish_reason,
                   reasoning_keys={"reasoning"} if routed.reasoning else set())


# --- holding the prediction against an expectation or a recording ------------------------------------


def _as_transcript(case_id: str, mode: Mode, refused: Refusal) -> Any:
    """A predicted refusal as the transcript of one, for the checks that read transcripts."""
    return Transcript(case_id, mode, "hf", "chat", ServerStamp("predicted", "predicted", "hf"), {}, status=refused.status,
                      error_body={"error": {"message": refused.message, "param": refused.param}})


def judge_expectation(case: Case, mode: Mode, prediction: Prediction) -> Any:
    """The prediction judged as an answer against the case's `hf` expectation (a checks.Check)."""
    expectation = expectation_for(case, "hf")
    assert expectation is not None, f"case {case.id} has no hf expectation to judge the prediction against"
    if expectation.error is not None:
        if isinstance(prediction, Message):
            return Check("expected_error", FAIL, reason="predicted an answer, expected a refusal")
        return check_expected_error(_as_transcript(case.id, mode, prediction), expectation.error)
    if isinstance(prediction, Refusal):
        return Check("expected_message", FAIL, reason=f"predicted a refusal ({prediction.message}), expected an answer")
    rules = profile_record("hf").rules if expectation.by_reference else ()  # as the live judge judges hf
    return check_expected_message(prediction, expected_view(case, "hf", mode), rules)


def judge_recording(transcript: Any, prediction: Prediction) -> Any:
    """A recorded hf answer judged against the prediction taken as its expectation (a checks.Check)."""
    if isinstance(prediction, Refusal):
        return check_expected_error(transcript, ExpectedError(prediction.status, prediction.param, prediction.message))
    if transcript.status != 200:
        return Check("expected_message", FAIL, reason=f"predicted an answer, the server answered {transcript.status}")
    recorded = read_stream(transcript).message if transcript.mode == "stream" else response_message(transcript)
    return check_expected_message(recorded, message_view(prediction))
