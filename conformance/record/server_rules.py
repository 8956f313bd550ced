"""A server's documented rules: the only differences from a format's own meaning that pass.

A format-independent case is judged against its reference outcome, the format's own parse of the
text the model wrote (`conformance.suite.format_cases`). Where a server departs from that parse on
purpose, and says so in its documentation or code, the departure is a `ServerRule` on the server's
profile record (`conformance.servers.profile.Profile.rules`): a name, what it allows, where the server
says so, and `normalize`, which maps a message view (`conformance.record.wire.message_view`: reasoning,
content, tool_calls, finish_reason) to the form in which the rule's difference disappears. An answer
that equals the reference once both are normalized by every rule of its profile passes, and the check
names the rules it needed; anything else a server does differently fails.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

View = Mapping[str, Any]


@dataclass(frozen=True)
class ServerRule:
    name: str
    description: str
    source: str  # where the server documents the behaviour (a link, a file of its source)
    normalize: Callable[[View], dict[str, Any]]


def _text_fields(view: View, change: Callable[[str], str | None]) -> dict[str, Any]:
    shaped = dict(view)
    for key in ("reasoning", "content"):
        if isinstance(shaped.get(key), str):
            shaped[key] = change(shaped[key]) or None
    return shaped


KEEPS_REGION_WHITESPACE = ServerRule(
    name="keeps_region_whitespace",
    description="a region's text keeps the whitespace around it that the format's `text` parser strips "
                "(reasoning \"\\nx\\n\" where the format means \"x\")",
    source="docs/vllm-0.32-contract.md#3.7 (\"whitespace kept exactly\"); vLLM 0.32 vllm/parser/response_template/",
    normalize=lambda view: _text_fields(view, str.strip),
)


def _without_blank_content(view: View) -> dict[str, Any]:
    shaped = dict(view)
    if isinstance(shaped.get("content"), str) and not shaped["content"].strip():
        shaped["content"] = None
    return shaped


SEPARATOR_WHITESPACE_AS_CONTENT = ServerRule(
    name="separator_whitespace_as_content",
    description="whitespace between two regions (after reasoning, between calls) is returned as content",
    source="docs/vllm-0.32-contract.md#3.7 (\"the rest content\") and the shipped cases' content \"\\n\\n\"",
    normalize=_without_blank_content,
)


def normalized(view: View, rules: Sequence[ServerRule]) -> dict[str, Any]:
    """`view` with every rule's normalization applied, in order."""
    shaped = dict(view)
    for rule in rules:
        shaped = rule.normalize(shaped)
    return shaped


STREAM_KEEPS_REGION_WHITESPACE = ServerRule(
    name="stream_keeps_region_whitespace",
    description="its stream keeps the whitespace around a region's text that its non-streaming answer and the "
                "format's `text` parser strip",
    source="recorded from transformers serve 5.23 and pinned by the shipped case reasoning-then-one-call "
           "(cases/tool_calls.yaml: it strips the non-streaming reasoning and content of the newlines its stream keeps)",
    normalize=KEEPS_REGION_WHITESPACE.normalize,
)
