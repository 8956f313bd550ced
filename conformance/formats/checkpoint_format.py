"""The response format of a checkpoint directory with no shipped record: a `Format` read from its own files
(its chat template, `response_template`, added and end tokens, as `checkpoint_clone.read_source` reads a
clone's source), named `checkpoint:<dirname>`. A checkpoint whose two templates are a shipped record's, byte
for byte, is served as that record. Its legacy parsers are unknown (none), its templates untrusted: the
suite renders them bounded (`conformance.suite.format_cases`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from conformance.formats.checkpoint_clone import read_source, source_files
from conformance.formats.format import Format, Variant
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS, register_checkpoint_format

CHECKPOINT_PREFIX = "checkpoint:"
PROBE_TEXT = "ok"  # plain content: what any format's model may write


def _as_is(template: dict[str, Any]) -> dict[str, Any]:
    return template


def format_of_checkpoint(directory: Path) -> Format:
    """The shipped record whose chat template and response_template the checkpoint in `directory` carries,
    else its own format, registered under `checkpoint:<dirname>`. CloneInputError (a ValueError naming the file
    and the field) for files that cannot be read."""
    read = read_source(source_files(directory), str(directory))
    own = read.form
    for record in FORMATS.values():
        if record.chat_template == own.chat_template and dict(record.response_template) == dict(own.response_template):
            return record
    form = replace(own, name=f"{CHECKPOINT_PREFIX}{directory.resolve().name}",
                   description=f"the format of the checkpoint {directory} (no shipped record)", probe_text=PROBE_TEXT,
                   variants=(Variant("full", "the checkpoint's own response_template", _as_is),),
                   checkpoint=str(directory))
    register_checkpoint_format(form)
    return form


def served_format(told: str | None, model: Path | str | None) -> Format:
    """The format a run serves: the record `told` (--format), else a local checkpoint directory's (`model`),
    else the default format (a Hub repo id, or the tiny checkpoint)."""
    if told is not None:
        return FORMATS[told]
    if model is not None and Path(model).is_dir():
        return format_of_checkpoint(Path(model))
    return DEFAULT_FORMAT
