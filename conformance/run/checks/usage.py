"""The usage expectation: figures of the answer's usage object (cases/README.md, `usage`).

A pure check from (the figures a case expects, the transcript) to a `Check` of kind expectation. The
usage object is the one a client sees (`conformance.record.wire.usage_of`: the response's, or a stream's
final usage chunk); figures are named by their path inside it, as the gate names them without the
`usage.` prefix (`completion_tokens_details.reasoning_tokens`), and an expected None means absent or null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.record.outcomes import EXPECTATION, FAIL, PASS, Check
from conformance.record.transcript import Transcript
from conformance.record.wire import usage_of
from conformance.util.json_values import json_equal


def check_expected_usage(transcript: Transcript, expected: Mapping[str, int | None]) -> Check:
    """Each expected figure equals the answer's (as JSON values); an answer without a usage object fails."""
    usage = usage_of(transcript)
    if usage is None:
        return Check("expected_usage", FAIL, EXPECTATION, reason="the answer carries no usage object",
                     expected=dict(expected), actual=None)
    actual = {path: figure(usage, path) for path in expected}
    differing = [path for path in expected if not json_equal(actual[path], expected[path])]
    if differing:
        return Check("expected_usage", FAIL, EXPECTATION,
                     reason="usage differs in " + ", ".join(f"{path} ({actual[path]!r}, expected {expected[path]!r})"
                                                            for path in differing),
                     expected={path: expected[path] for path in differing},
                     actual={path: actual[path] for path in differing})
    return Check("expected_usage", PASS, EXPECTATION, expected=dict(expected), actual=actual)


def figure(usage: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted `path` inside a usage object (None: absent or null on the way)."""
    value: Any = usage
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value
