"""Cases in a response format: a format-independent case (`turn:`) becomes the raw text the format's
model writes for that turn, and its reference outcome, what the format means by that text.

The turn (reasoning, content, tool calls) is rendered with the format's own chat template after the
case's conversation, as `apply_chat_template` renders it, up to its end-of-turn text
(`conformance.formats.turn_text.render_turn`); that raw text is what the servers are forced to emit.
The reference is the same text parsed by transformers' `parse_response` with the format's
response_template, turned into the OpenAI message: every profile without an expectation of its own for
the case is judged against it, its documented rules allowed (`conformance.record.server_rules`). A turn
the format cannot express (reasoning in a format with no reasoning field, a chat template that cannot
render it) is a skip that says why, for every profile.

A case with a raw `force:` text stays as it is: it is written in one format (`format:`, default the
tiny checkpoint's) and a run serving another skips it (`conformance.run.engine.other_format`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from conformance.formats.format import Format
from conformance.formats.turn_text import RenderError, Subject, parse_whole, render_turn
from conformance.record.case_model import (
    MESSAGE_FIELDS,
    Case,
    Expectation,
    ExpectedMessage,
    ExpectedToolCall,
    build_message,
)

REASONING_FIELDS = ("thinking", "reasoning_content", "reasoning")


def subject_of_format(form: Format) -> Subject | None:
    """What rendering and parsing need of a format (None: it has no chat template to render with)."""
    if form.chat_template is None:
        return None
    special = {"eos_token": form.eos_token, "pad_token": form.pad_token}
    return Subject(form.chat_template, dict(form.response_template), special,
                   turn_ends=tuple(token for token in form.end_tokens if token != form.eos_token))


def in_format(cases: Iterable[Case], form: Format) -> list[Case]:
    """The cases as a run on a checkpoint of `form` sends them: each turn case rendered, the rest as written."""
    subject = subject_of_format(form)
    return [case if case.turn is None else rendered(case, form, subject) for case in cases]


def rendered(case: Case, form: Format, subject: Subject | None) -> Case:
    """A turn case in `form`: its forced text and reference outcome, or a skip saying why it cannot be."""
    assert case.turn is not None
    why = _cannot_express(case.turn, form, subject)
    if why is None:
        assert subject is not None
        tools = case.request.get("tools") or []
        try:
            prompt, raw = render_turn(subject, tools, assistant_message(case.turn), list(case.request["messages"]))
        except RenderError as exc:
            why = f"its chat template cannot render the turn: {exc}"
        else:
            parsed = parse_whole(subject, prompt, raw, tools)
            if parsed.error is not None or parsed.message is None:
                why = f"its response_template cannot parse the turn its chat template renders: {parsed.error}"
            elif not raw:
                why = "its chat template renders the turn as no text at all"
            else:
                reference = reference_of(parsed.message)
                if (lost := round_trip_loss(case.turn, reference)) is None:
                    return replace(case, force=raw, format=form.name, reference=reference,
                                   expect={**case.expect, **deviations(case.id, form, reference)})
                why = (f"its two templates disagree: the chat template writes {raw!r} and the response_template "
                       f"parses {lost}")
    return replace(case, force=None, format=form.name,
                   reference=Expectation(skip=f"the {form.name} format cannot express this turn: {why}"))


def deviations(case_id: str, form: Format, reference: Expectation) -> dict[str, Expectation]:
    """The expectations of the profiles with a known bug on this case in `form` (its `deviations`): the
    reference with the deviating fields in the modes where the bug shows, marked with its reason and link."""
    assert reference.message is not None
    expect = {}
    for deviation in form.deviations:
        if deviation.case != case_id:
            continue
        changed = build_message(deviation.message)
        deviating = replace(reference.message, **{name: getattr(changed, name) for name in deviation.message})
        whole = deviating if "non-stream" in deviation.modes else reference.message
        streamed = deviating if "stream" in deviation.modes else reference.message
        expect[deviation.profile] = replace(
            reference, message=whole, stream_message=streamed, deviation=f"{deviation.reason} ({deviation.link})",
            stream_overrides=frozenset(name for name in MESSAGE_FIELDS if getattr(whole, name) != getattr(streamed, name)))
    return expect


def round_trip_loss(turn: ExpectedMessage, reference: Expectation) -> str | None:
    """What the format's parse of its own rendering lost or changed of the turn (None: it gave the turn
    back, text fields compared stripped as the `text` parser strips them)."""
    assert reference.message is not None
    got = reference.message
    for name in ("reasoning", "content"):
        wanted, parsed = (getattr(turn, name) or "").strip(), (getattr(got, name) or "").strip()
        if wanted != parsed:
            return f"{name} {parsed!r}, not {wanted!r}"
    wanted_calls = [(call.name, call.arguments) for call in turn.tool_calls]
    parsed_calls = [(call.name, call.arguments) for call in got.tool_calls]
    if wanted_calls != parsed_calls:
        return f"tool calls {parsed_calls!r}, not {wanted_calls!r}"
    return None


def _cannot_express(turn: ExpectedMessage, form: Format, subject: Subject | None) -> str | None:
    fields = form.response_template.get("fields") or {}
    if subject is None:
        return "no chat template of the family is known to render it with"
    if turn.reasoning and not any(name in fields for name in REASONING_FIELDS):
        return "its response_template has no reasoning field"
    if turn.content and "content" not in fields:
        return "its response_template has no content field"
    if turn.tool_calls and "tool_calls" not in fields:
        return "its response_template has no tool_calls field"
    return None


def assistant_message(turn: ExpectedMessage) -> dict[str, Any]:
    """The turn as an assistant message a chat template renders (reasoning under `reasoning`; the
    renderer adds the other names templates read)."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content or ""}
    if turn.reasoning:
        message["reasoning"] = turn.reasoning
    if turn.tool_calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                                 for call in turn.tool_calls]
    return message


def reference_of(parsed: dict[str, Any]) -> Expectation:
    """The OpenAI message of a format's parse (`parse_response`'s dict): what every profile must answer."""
    reasoning = next((parsed[name] for name in REASONING_FIELDS if isinstance(parsed.get(name), str)), None)
    calls = tuple(ExpectedToolCall(name=str(function.get("name")), arguments=function.get("arguments"))
                  for call in parsed.get("tool_calls") or [] if isinstance(call, dict)
                  for function in [call.get("function", call)] if isinstance(function, dict))
    content = parsed.get("content") if isinstance(parsed.get("content"), str) else None
    message = ExpectedMessage(reasoning=reasoning, content=content, tool_calls=calls)
    finish_reason = "tool_calls" if calls else "stop"
    return Expectation(message=message, finish_reason=finish_reason, stream_message=message,
                       stream_finish_reason=finish_reason, by_reference=True)
