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

A case with a raw `force:` text is written in one format (`format:`, default the tiny checkpoint's) and a
run serving another skips it (`conformance.run.forcing_plan.other_format`). With `reference: parse` its
reference outcome is that format's parse of the text, and it is judged as a turn case is; otherwise by
the expectations it states per profile.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from conformance.formats.format import Deviation, Format
from conformance.formats.registry import DEFAULT_FORMAT
from conformance.formats.template_turn import REASONING_FIELDS, Unwritable, written_by_template
from conformance.formats.turn_text import RenderError, Subject, parse_whole, render, render_turn
from conformance.record.case_model import (
    MESSAGE_FIELDS,
    Case,
    Expectation,
    ExpectedMessage,
    ExpectedToolCall,
    SecondTurn,
    build_message,
)
from conformance.record.request_rules import as_requested, unparsed_fields
from conformance.suite.turn_shapes import SHAPES, Inexpressible, delimiter_texts
from conformance.util.bounded_worker import BoundedWorker, CallFailed, CallTimeout, CallTooExpensive

RENDER_TIMEOUT_S = 10.0  # one case of a checkpoint's own chat template (a warm worker renders one in milliseconds)
RENDER_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
BOUNDED_FAILURES_TO_GIVE_UP = 3  # in a row, nothing rendered yet: the template renders nothing within bounds
RENDER_WORKER = BoundedWorker(RENDER_MEMORY_BYTES)


def subject_of_format(form: Format) -> Subject | None:
    """What rendering and parsing need of a format (None: it has no chat template to render with)."""
    if form.chat_template is None:
        return None
    special = {"eos_token": form.eos_token, "pad_token": form.pad_token}
    return Subject(form.chat_template, dict(form.response_template), special,
                   turn_ends=tuple(token for token in form.end_tokens if token != form.eos_token))


def in_format(cases: Iterable[Case], form: Format) -> list[Case]:
    """The cases as a run on a checkpoint of `form` sends them: each turn case rendered, the rest as written.
    A checkpoint's own templates (`form.checkpoint`) are rendered in a worker bounded in time and memory."""
    subject = subject_of_format(form)
    if form.checkpoint is not None:
        return _bounded_in_format(list(cases), form, subject)
    return [one_in_format(case, form, subject) for case in cases]


def one_in_format(case: Case, form: Format, subject: Subject | None) -> Case:
    """One case as a run on a checkpoint of `form` sends it."""
    if case.turn is not None:
        return rendered(case, form, subject)
    if case.judged_by_parse:
        case = with_parsed_reference(case, form, subject)
    return with_second_turn(case, form, subject) if case.second_turn is not None else case


def with_parsed_reference(case: Case, form: Format, subject: Subject | None) -> Case:
    """A raw case judged by its format's parse (`reference: parse`), in a run serving that format: its reference
    outcome is the format's parse of `force` as the request's options make the answer
    (`conformance.record.request_rules`), and the format's declared deviations for it apply. A run serving
    another format skips the case (`conformance.run.forcing_plan.other_format`): it stays as written. ValueError
    naming the case when the format cannot parse the text."""
    assert case.force is not None
    if (case.format or DEFAULT_FORMAT.name) != form.name:
        return case
    where = f"{case.source}:{case.line}: case {case.id!r}: reference: parse"
    if subject is None:
        raise ValueError(f"{where}: the {form.name} format has no chat template to render the prompt it parses after")
    if unparsed := unparsed_fields(case.request):  # the request leaves these regions' text as content
        fields = {name: spec for name, spec in subject.response_template["fields"].items() if name not in unparsed}
        subject = replace(subject, response_template={**subject.response_template, "fields": fields})
    try:
        parsed = reference_of(_parsed(case, subject, case.force))
    except Inexpressible as exc:  # a case that judges nothing would pass unseen: the case file is wrong
        raise ValueError(f"{where}: the {form.name} format cannot parse the forced text ({exc}); state each "
                         "profile's answer instead") from None
    assert parsed.message is not None
    answer = as_requested(parsed.message, case.request)  # the contract's request rules (include_reasoning false)
    reference = replace(parsed, message=answer, stream_message=answer)
    return replace(case, reference=reference, expect={**case.expect, **deviations(case.id, form, reference)})


def _bounded_in_format(cases: list[Case], form: Format, subject: Subject | None) -> list[Case]:
    """`one_in_format` of each turn case in RENDER_WORKER: a case whose rendering overruns its bounds is a skip
    saying so; ValueError naming the checkpoint when the first few overrun and none rendered."""
    done, failures, rendered_any = [], 0, False
    for case in cases:
        if case.turn is None:  # written in a shipped format: never rendered in a checkpoint's own
            done.append(one_in_format(case, form, subject))
            continue
        try:
            done.append(RENDER_WORKER.call("conformance.suite.format_cases:one_in_format", (case, form, subject),
                                           RENDER_TIMEOUT_S))
            rendered_any = True
            continue
        except CallTimeout as exc:
            why = f"rendering it with the checkpoint's chat template {exc}"
        except CallTooExpensive as exc:
            why = f"rendering it with the checkpoint's chat template needed {exc}"
        except CallFailed as exc:
            why = f"rendering it failed: {exc}"
        failures += 1
        if not rendered_any and failures >= BOUNDED_FAILURES_TO_GIVE_UP:
            raise ValueError(f"{form.checkpoint}: chat_template: no format-independent case renders within "
                             f"bounds ({why})")
        done.append(_skipped(case, f"the {form.name} format cannot express this turn: {why}"))
    return done


def _skipped(case: Case, why: str) -> Case:
    skip = Expectation(skip=why)
    second = case.second_turn and replace(case.second_turn, force=None, reference=skip)
    return replace(case, force=None, reference=skip, second_turn=second)


def with_second_turn(case: Case, form: Format, subject: Subject | None) -> Case:
    """A case with a raw forced text and a second turn: the second turn rendered in the case's own format
    (a run serving another format skips the case, and so its second turn)."""
    assert case.second_turn is not None
    if (written_in := case.format or DEFAULT_FORMAT.name) != form.name:
        return replace(case, second_turn=replace(case.second_turn, reference=Expectation(
            skip=f"the case is written for the {written_in} format; this run serves {form.name}")))
    return replace(case, second_turn=_second_turn_in(case, None, form, subject))


def rendered(case: Case, form: Format, subject: Subject | None) -> Case:
    """A turn case in `form`: its forced text and reference outcome, or a skip saying why it cannot be."""
    try:
        raw, reference = _raw_and_reference(case, form, subject)
    except Inexpressible as exc:
        return replace(_skipped(case, f"the {form.name} format cannot express this turn: {exc}"), format=form.name)
    second = case.second_turn and _second_turn_in(case, reference, form, subject)
    return replace(case, force=raw, format=form.name, reference=reference,
                   expect={**case.expect, **deviations(case.id, form, reference)}, second_turn=second)


def second_turn_conversation(case: Case, first: ExpectedMessage, ids: Sequence[str],
                             api: bool = False) -> list[dict[str, Any]]:
    """The case's conversation, the turn-1 `first` as its model wrote it (calls named by `ids`) and the
    second turn's tool messages: what a turn-2 request holds. Arguments as chat templates read them
    (JSON values), or (`api`) as the API carries them, JSON text."""
    assert case.second_turn is not None
    message = assistant_message(first)
    if api and not first.content:  # no content is null on the wire: vLLM renders "" as a text part, a newline more
        message["content"] = None
    if first.reasoning:
        message["reasoning_content"] = first.reasoning
    for call, call_id in zip(message.get("tool_calls", []), ids):
        call["id"] = call_id
        if api:
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"], ensure_ascii=False)
    return [*case.request["messages"], message, *tool_messages(ids, case.second_turn.tool_results)]


def tool_messages(ids: Sequence[Any], results: Sequence[str]) -> list[dict[str, Any]]:
    """The tool messages answering the calls named by `ids` with `results`, in order, as the OpenAI API asks."""
    return [{"role": "tool", "tool_call_id": call_id, "content": result} for call_id, result in zip(ids, results)]


def _second_turn_in(case: Case, first: Expectation | None, form: Format, subject: Subject | None) -> SecondTurn:
    """The second turn in `form`: rendered after turn 1 as the model wrote it and the tool results, like a
    turn case (`first`, the format's parse of a turn case's turn 1, must hold as many calls as there are
    results)."""
    written = case.written_turn
    assert case.second_turn is not None and written is not None
    calls = len(first.message.tool_calls) if first is not None and first.message is not None else len(written.tool_calls)
    if calls != len(case.second_turn.tool_results):
        return replace(case.second_turn, reference=Expectation(
            skip=f"the {form.name} format reads {calls} call(s) in turn 1; the second turn "
                 f"answers {len(case.second_turn.tool_results)}"))
    ids = [f"call_{index}" for index in range(len(written.tool_calls))]
    conversation = second_turn_conversation(case, written, ids)
    turn2 = replace(case, request={**case.request, "messages": conversation}, turn=case.second_turn.turn,
                    shape=None, second_turn=None)
    try:
        raw, reference = _raw_and_reference(turn2, form, subject)
    except Inexpressible as exc:
        return replace(case.second_turn, reference=Expectation(
            skip=f"the {form.name} format cannot express the second turn: {exc}"))
    return replace(case.second_turn, force=raw, reference=reference)


def _raw_and_reference(case: Case, form: Format, subject: Subject | None) -> tuple[str, Expectation]:
    """The text the format's model writes for the case's turn (its delimiters filled in, its shape applied),
    and what the format means by it: written by its chat template, else (a checkpoint's own format) from its
    response_template's delimiters."""
    assert case.turn is not None
    if (why := _cannot_express(case.turn, form, subject)) is not None:
        raise Inexpressible(why)
    assert subject is not None
    texts = delimiter_texts(form)
    way: Literal["chat_template", "response_template"] = "chat_template"
    why = None
    try:
        raw, parsed = _written(case, subject, texts, way)
    except Inexpressible as exc:
        if form.checkpoint is None:
            raise
        way, why = "response_template", str(exc)
        try:
            raw, parsed = _written(case, subject, texts, way)
        except Inexpressible as fallback:
            raise Inexpressible(f"{exc}; nor can its response_template's delimiters write it: {fallback}") from None
    if case.shape is not None:
        raw = SHAPES[case.shape](raw, texts)
        parsed = _parsed(case, subject, raw)
    return raw, replace(reference_of(parsed), rendered_with=way, rendered_why=why)


def _written(case: Case, subject: Subject, texts: Mapping[str, str],
             way: Literal["chat_template", "response_template"]) -> tuple[str, dict[str, Any]]:
    """The case's turn written `way`, and its parse."""
    assert case.turn is not None
    turn = with_delimiters(case.turn, texts)
    # the round trip holds the format's two templates together on the plain turn (its delimiters as plain
    # text, not cut); what the format makes of the delimiters or of the cut is then the reference
    plain = with_delimiters(case.turn, dict.fromkeys(texts, "x"))
    raw, parsed = _render_and_parse(case, subject, plain, way)
    if (lost := round_trip_loss(plain, reference_of(parsed))) is not None:
        writer = "the chat template" if way == "chat_template" else "the fallback"
        raise Inexpressible(f"its two templates disagree: {writer} writes {raw!r} and the "
                            f"response_template parses {lost}")
    if turn is not plain:
        raw, parsed = _render_and_parse(case, subject, turn, way)
    return raw, parsed


def _render_and_parse(case: Case, subject: Subject, turn: ExpectedMessage,
                      way: Literal["chat_template", "response_template"]) -> tuple[str, dict[str, Any]]:
    """The turn written `way` after the case's conversation, and the format's parse of it."""
    if way == "response_template":
        try:
            raw = written_by_template(subject.response_template, assistant_message(turn))
        except Unwritable as exc:
            raise Inexpressible(str(exc)) from exc
    else:
        try:
            _, raw = render_turn(subject, case.request.get("tools") or [], assistant_message(turn),
                                 list(case.request["messages"]))
        except RenderError as exc:
            raise Inexpressible(f"its chat template cannot render the turn: {exc}") from exc
    if not raw:
        raise Inexpressible(f"its {way} writes the turn as no text at all")
    return raw, _parsed(case, subject, raw)


def _parsed(case: Case, subject: Subject, raw: str) -> dict[str, Any]:
    tools = case.request.get("tools") or []
    prompt = render(subject, list(case.request["messages"]), tools, add_generation_prompt=True,
                    **(case.request.get("chat_template_kwargs") or {}))  # the prompt the server renders
    parsed = parse_whole(subject, prompt, raw, tools)
    if parsed.error is not None or parsed.message is None:
        raise Inexpressible(f"its response_template cannot parse the text: {parsed.error}")
    return parsed.message


# {{name}} in a turn's text: the format's own delimiter of that name (`turn_shapes.delimiter_texts`)
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def with_delimiters(turn: ExpectedMessage, texts: Mapping[str, str]) -> ExpectedMessage:
    """The turn with each {{name}} in its texts and argument strings replaced by the format's delimiter (the
    same object when it names none); Inexpressible for a name the format has no delimiter for."""

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            def one(match: re.Match[str]) -> str:
                if match.group(1) not in texts:
                    raise Inexpressible(f"it has no {match.group(1)} delimiter")
                return texts[match.group(1)]
            return PLACEHOLDER.sub(one, value)
        if isinstance(value, dict):
            return {key: fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [fill(item) for item in value]
        return value

    filled = replace(turn, reasoning=fill(turn.reasoning), content=fill(turn.content),
                     tool_calls=tuple(replace(call, arguments=fill(call.arguments)) for call in turn.tool_calls))
    return turn if filled == turn else filled


def deviations(case_id: str, form: Format, reference: Expectation) -> dict[str, Expectation]:
    """The expectations of the profiles with a known bug on this case in `form` (its `deviations`): the
    reference with the deviating fields in the modes where the bug shows (one entry per mode, or one for
    both), marked with their reasons and links."""
    assert reference.message is not None
    by_profile: dict[str, list[Deviation]] = {}
    for deviation in form.deviations:
        if deviation.case == case_id:
            by_profile.setdefault(deviation.profile, []).append(deviation)
    expect = {}
    for profile, known in by_profile.items():
        if any(deviation.skip for deviation in known):
            expect[profile] = Expectation(skip="; ".join(f"{d.reason} ({d.link})" for d in known if d.skip))
            continue

        def in_mode(mode: str) -> ExpectedMessage:
            message = reference.message
            for deviation in known:
                if mode in deviation.modes:
                    changed = build_message(deviation.message)
                    message = replace(message, **{name: getattr(changed, name) for name in deviation.message})
            return message

        def finish_in(mode: str, parsed: str | None) -> str | None:
            return next((d.finish_reason for d in known if mode in d.modes and d.finish_reason), parsed)

        whole, streamed = in_mode("non-stream"), in_mode("stream")
        whole_finish = finish_in("non-stream", reference.finish_reason)
        stream_finish = finish_in("stream", reference.stream_finish_reason)
        differing = [name for name in MESSAGE_FIELDS if getattr(whole, name) != getattr(streamed, name)]
        expect[profile] = replace(
            reference, message=whole, stream_message=streamed, finish_reason=whole_finish,
            stream_finish_reason=stream_finish,
            deviation="; ".join(dict.fromkeys(f"{d.reason} ({d.link})" for d in known)),
            stream_overrides=frozenset(differing + (["finish_reason"] if whole_finish != stream_finish else [])))
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
