"""Round-trip subjects for the tests: the tiny checkpoint's templates, and a corrected pair."""

from __future__ import annotations

import copy

from conformance.audit.roundtrip.roundtrip import Subject
from conformance.formats.qwen3_hermes import CHAT_TEMPLATE, RESPONSE_TEMPLATE_FULL
from conformance.formats.tiny_checkpoint import response_template_for

SPECIAL_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}


def tiny_subject(variant: str = "full") -> Subject:
    """The tiny checkpoint's own pair: an argument containing `</tool_call>` closes the call early."""
    return Subject(CHAT_TEMPLATE, response_template_for(variant), dict(SPECIAL_TOKENS))


def corrected_subject() -> Subject:
    """The tiny pair with both of its round-trip bugs fixed: the chat template escapes `<` inside the
    arguments' JSON (so no delimiter can appear there), and the tool-call opener swallows the whitespace
    before it (so the newline between two calls does not reopen, and empty, the implicit content)."""
    chat_template = CHAT_TEMPLATE.replace("{{- call.arguments | tojson }}",
                                          "{{- call.arguments | tojson | replace('<', '\\\\u003c') }}")
    assert chat_template != CHAT_TEMPLATE
    response_template = copy.deepcopy(RESPONSE_TEMPLATE_FULL)
    tool_calls = response_template["fields"]["tool_calls"]
    del tool_calls["open"]
    tool_calls["open_pattern"] = r"\s*<tool_call>"
    return Subject(chat_template, response_template, dict(SPECIAL_TOKENS))
