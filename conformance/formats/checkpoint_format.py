"""The response format of a checkpoint directory with no shipped record: a `Format` read from its own files
(its chat template, `response_template`, added and end tokens, as `checkpoint_clone.read_source` reads a
clone's source), named `checkpoint:<dirname>`. A checkpoint whose chat template is a shipped record's (byte for
byte but for surrounding whitespace, as the audit tells a family) is served as that record, its
response_template edited or not, as the tiny checkpoint's variants are. Its legacy parsers are unknown (none), its templates untrusted: the
suite renders them bounded (`conformance.suite.format_cases`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from conformance.formats.checkpoint_clone import read_source, source_files
from conformance.formats.checkpoint_files import TOKENIZER_CONFIG
from conformance.formats.format import Format, Variant
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS, register_checkpoint_format

CHECKPOINT_PREFIX = "checkpoint:"
PROBE_TEXT = "ok"  # plain content: what any format's model may write


def _as_is(template: dict[str, Any]) -> dict[str, Any]:
    return template


CHECKPOINT_VARIANTS = (Variant("full", "the checkpoint's own response_template", _as_is),)


def record_of_chat_template(chat_template: str | None) -> Format | None:
    """The shipped record whose chat template this is (None: none, or no chat template)."""
    if not isinstance(chat_template, str):
        return None
    return next((form for form in FORMATS.values()
                 if form.chat_template is not None and form.chat_template.strip() == chat_template.strip()), None)


def format_of_checkpoint(directory: Path) -> Format:
    """The shipped record whose chat template the checkpoint in `directory` carries, else its own format,
    registered under `checkpoint:<dirname>`. CloneInputError (a ValueError naming the file and the field) for
    files that cannot be read."""
    own = read_source(source_files(directory), str(directory)).form
    if (record := record_of_chat_template(own.chat_template)) is not None:
        return record
    form = replace(own, name=f"{CHECKPOINT_PREFIX}{directory.resolve().name}",
                   description=f"the format of the checkpoint {directory} (no shipped record)", probe_text=PROBE_TEXT,
                   variants=CHECKPOINT_VARIANTS,
                   checkpoint=str(directory))
    register_checkpoint_format(form)
    return form


def served_format(told: str | None, model: Path | str | None) -> Format:
    """The format a run serves: the record `told` (--format), else a local checkpoint directory's (`model`),
    else the default format (a Hub repo id, the tiny checkpoint, a directory with no tokenizer_config.json)."""
    if told is not None:
        return FORMATS[told]
    if model is not None and (Path(model) / TOKENIZER_CONFIG).exists():
        return format_of_checkpoint(Path(model))
    return DEFAULT_FORMAT
