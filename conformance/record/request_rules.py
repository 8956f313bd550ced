"""The contract's request rules: options under which the answer is not everything the format's parse finds in
the text the model wrote, the same for every server (docs/vllm-0.32-contract.md names each one's section).

A case judged by its format's parse (`conformance.suite.format_cases`) applies the rules its request triggers to
that parse, which gives the reference every profile is judged against. A server that does otherwise deviates.
An option with no rule here makes a case that cannot be judged by the parse (`conformance.suite.cases` refuses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from conformance.record.case_model import MESSAGE_FIELDS, ExpectedMessage


@dataclass(frozen=True)
class RequestRule:
    option: str
    value: bool | str | None  # None: the option absent or empty
    description: str
    contract: str  # its section of the contract document
    drops: tuple[str, ...] = ()  # the message fields the answer leaves out (`MESSAGE_FIELDS`)
    unparsed: tuple[str, ...] = ()  # the response_template's fields not parsed: their text stays content

    def applies_to(self, request: Mapping[str, Any]) -> bool:
        value = request.get(self.option)
        if self.value is None:
            return not value
        return type(value) is type(self.value) and value == self.value


UNPARSED_CALLS = "the model's calls are not parsed: their text comes back as content, raw, delimiters included"
REQUEST_RULES = (
    RequestRule("include_reasoning", False, "include_reasoning false removes the reasoning from the message and from "
                "every stream delta; content and tool calls are left intact", "contract 3.9", drops=("reasoning",)),
    RequestRule("tool_choice", "none", f"tool_choice none: {UNPARSED_CALLS}", "contract 3.11", unparsed=("tool_calls",)),
    RequestRule("tools", None, f"no tools offered: {UNPARSED_CALLS}", "contract 3.11", unparsed=("tool_calls",)),
)
assert all(field in MESSAGE_FIELDS for rule in REQUEST_RULES for field in rule.drops)


def as_requested(message: ExpectedMessage, request: Mapping[str, Any]) -> ExpectedMessage:
    """`message` (a format's parse) as the request's options make the answer (`REQUEST_RULES`)."""
    dropped = {field for rule in REQUEST_RULES if rule.applies_to(request) for field in rule.drops}
    return replace(message, **{field: () if field == "tool_calls" else None for field in sorted(dropped)})


def unparsed_fields(request: Mapping[str, Any]) -> frozenset[str]:
    """The response_template's fields the request's options leave unparsed (`REQUEST_RULES`)."""
    return frozenset(field for rule in REQUEST_RULES if rule.applies_to(request) for field in rule.unparsed)
