"""Short notes a run's views add to a result's row, from the result alone."""

from __future__ import annotations

from conformance.record.results import CaseResult

WRITTEN_FROM_TEMPLATE = "written from the response_template's delimiters"


def rendered_note(result: CaseResult) -> str | None:
    """How the case's turn was written, where it was not by the format's chat template: `written from the
    response_template's delimiters: <why the chat template could not>` (None: by the chat template, or a case
    with a raw forced text)."""
    if result.rendered_with != "response_template":
        return None
    return f"{WRITTEN_FROM_TEMPLATE}: {result.rendered_why}" if result.rendered_why else WRITTEN_FROM_TEMPLATE
