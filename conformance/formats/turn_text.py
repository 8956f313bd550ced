"""An assistant turn as text and back, the way a checkpoint's two templates see it: its chat template
renders a conversation (transformers' own renderer, the special tokens as variables, the tools) and
its response_template parses the model's raw output (transformers' `parse_response`, what
`tokenizer.parse_response` calls). The audit's round trip searches these for disagreements; a
format-independent case is rendered into a format's raw text with them, and its reference outcome
is that text parsed back.

The templates are untrusted where a checkpoint brings them: call these in a bounded child process
(`conformance.audit.roundtrip.worker`) for a checkpoint's own; a shipped format's are the package's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from conformance.formats.markers import template_markers

USER_MESSAGE = {"role": "user", "content": "Use the tools."}


@dataclass(frozen=True)
class Subject:
    """What a round trip needs of a checkpoint."""

    chat_template: str
    response_template: dict[str, Any]
    special_tokens: dict[str, str]
    turn_ends: tuple[str, ...] = ()  # texts besides the eos token that end the model's turn (its stop tokens)

    @property
    def eos(self) -> str | None:
        return self.special_tokens.get("eos_token")

    @cached_property
    def delimiters(self) -> tuple[str, ...]:
        """The template's literal delimiters, its start anchors, string delimiters and the eos token."""
        found = list(template_markers(self.response_template))
        anchors = self.response_template.get("start_anchor")
        found += [anchors] if isinstance(anchors, str) else list(anchors or [])
        for spec in self.response_template.get("fields", {}).values():
            for pair in (spec.get("content_args") or {}).get("string_delims") or []:
                found += list(pair)
        if self.eos:
            found.append(self.eos)
        return tuple(dict.fromkeys(d for d in found if isinstance(d, str) and d.strip()))

    @cached_property
    def reserved(self) -> str:
        """Characters the format reserves: the json parser's sentinels when string delimiters are set."""
        fields = self.response_template.get("fields", {}).values()
        return "\x01\x02" if any((spec.get("content_args") or {}).get("string_delims") for spec in fields) else ""

    def field_named(self, *names: str) -> str | None:
        return next((name for name in names if name in self.response_template.get("fields", {})), None)




class RenderError(Exception):
    """The chat template could not render the conversation."""


def render(subject: Subject, messages: list[dict], tools: list[dict], add_generation_prompt: bool,
           **template_kwargs: Any) -> str:
    """The conversation as `apply_chat_template(..., tokenize=False, **template_kwargs)` renders it."""
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        rendered, _ = render_jinja_template(
            conversations=[messages], tools=tools or None, chat_template=subject.chat_template,
            add_generation_prompt=add_generation_prompt, **subject.special_tokens, **template_kwargs,
        )
    except Exception as error:  # a checkpoint's template may raise anything (raise_exception, undefined...)
        raise RenderError(f"{type(error).__name__}: {error}") from None
    return rendered[0]


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """The message as chat templates read it: reasoning under each name templates use."""
    rendered = dict(message)
    if "reasoning" in message:
        rendered["reasoning_content"] = rendered["thinking"] = message["reasoning"]
    return rendered


def render_turn(subject: Subject, tools: list[dict], message: dict[str, Any],
                conversation: list[dict] | None = None) -> tuple[str, str]:
    """(prompt, raw output) for the assistant `message` answering `conversation` (default: one user
    message asking to use the tools) with `tools` available. The raw output ends before the turn's
    final end-of-turn text (the eos token, or one of `subject.turn_ends`): a server stops on it and
    does not hand it to its parser."""
    conversation = conversation or [USER_MESSAGE]
    prompt = render(subject, conversation, tools, add_generation_prompt=True)
    whole = render(subject, [*conversation, template_message(message)], tools, add_generation_prompt=False)
    if not whole.startswith(prompt):
        raise RenderError("the rendered conversation does not start with the rendered generation prompt: "
                          f"prompt ends {prompt[-60:]!r}, conversation there reads {whole[len(prompt) - 60:len(prompt)]!r}")
    raw = whole[len(prompt):]
    for end_text in (subject.eos, *subject.turn_ends):
        if end_text and (end := raw.rfind(end_text)) != -1 and not raw[end + len(end_text):].strip():
            return prompt, raw[:end]
    return prompt, raw


@dataclass(frozen=True)
class Parsed:
    """A parser's answer: the message, or the error it raised."""

    message: dict[str, Any] | None
    error: str | None = None

    def same(self, other: Parsed) -> bool:
        if self.error is not None or other.error is not None:
            return (self.error or "").split(":")[0] == (other.error or "").split(":")[0]
        return canonical(self.message) == canonical(other.message)


def canonical(value: Any) -> str:
    """JSON text that tells types apart (1 vs 1.0 vs true) and ignores key order."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def parse_whole(subject: Subject, prompt: str, raw: str, tools: list[dict]) -> Parsed:
    from transformers.utils.chat_parsing import parse_response

    try:
        return Parsed(parse_response(raw, subject.response_template, prefix=prompt, tools=tools))
    except Exception as error:
        return Parsed(None, f"{type(error).__name__}: {error}")


def parse_chunked(subject: Subject, prompt: str, chunks: list[str], tools: list[dict]) -> Parsed:
    from transformers.utils.chat_parsing import ResponseParser

    try:
        parser = ResponseParser(subject.response_template, prefix=prompt, tools=tools)
        for chunk in chunks:
            parser.feed(chunk)
        message, _ = parser.finalize()
        return Parsed(message)
    except Exception as error:
        return Parsed(None, f"{type(error).__name__}: {error}")
