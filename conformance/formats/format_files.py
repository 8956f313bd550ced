"""Response formats kept as data: one folder per format under `conformance/formats/shipped/` (`format.json`,
`response_template.json`, `chat_template.jinja` where the family has one, `sample_raw.txt`, `SOURCE.txt`),
validated against `schemas/format.schema.json`; a broken folder raises `FormatFileError` naming the file
and the field."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from conformance.formats.format import Deviation, Format, StreamBug, Variant
from conformance.util.locations import format_path
from conformance.util.package_paths import PACKAGE_DIR, load_schema
from conformance.util.safe_yaml import UnreadableFile, read_text

SHIPPED_FORMATS_DIR = PACKAGE_DIR / "formats" / "shipped"
MAX_FORMAT_FILE_CHARS = 1_000_000
VARIANTS = (Variant("full", "the family's response_template", lambda template: template),
            Variant("no-template", "no response_template at all", lambda template: None))


class FormatFileError(ValueError):
    """A format folder that cannot be read; the message names the file (and the field)."""


def load_format(directory: Path) -> Format:
    """The format record kept in `directory`."""
    record = _json(directory / "format.json")
    for error in jsonschema.Draft202012Validator(load_schema("format.schema.json")).iter_errors(record):
        raise FormatFileError(f"{directory / 'format.json'}: {format_path(list(error.absolute_path)) or 'the record'}: "
                              f"{error.message}")
    if record["name"] != directory.name:
        raise FormatFileError(f"{directory / 'format.json'}: name: {record['name']!r} is not its folder's name")
    template = _json(directory / "response_template.json")
    if not isinstance(template, dict):
        raise FormatFileError(f"{directory / 'response_template.json'}: not a JSON object")
    chat = directory / "chat_template.jinja"
    sample = directory / "sample_raw.txt"
    return Format(
        name=record["name"], description=record["description"], provenance=record["provenance"],
        chat_template=_text(chat) if chat.is_file() else None, response_template=template,
        delimiter_tokens=tuple(record["delimiter_tokens"]), special_tokens=tuple(record["special_tokens"]),
        eos_token=record["eos_token"], pad_token=record["pad_token"], probe_text=record["probe_text"],
        legacy_flags=tuple(record["legacy_flags"]), variants=VARIANTS, model_type=record["model_type"],
        stop_tokens=tuple(record["stop_tokens"]), legacy_env=dict(record["legacy_env"]),
        sample_raw=_text(sample) if sample.is_file() else None,
        deviations=tuple(Deviation(**{"message": {}, **entry, "modes": tuple(entry["modes"])})
                         for entry in record.get("deviations", [])),
        stream_bugs=tuple(StreamBug(**{**entry, "modes": tuple(entry["modes"])})
                          for entry in record.get("stream_bugs", [])),
    )


def shipped_formats() -> list[Format]:
    """Every format kept under `conformance/formats/shipped/`, by name."""
    return [load_format(directory) for directory in sorted(SHIPPED_FORMATS_DIR.iterdir()) if directory.is_dir()]


def _text(path: Path) -> str:
    try:
        text = read_text(path)
    except (OSError, UnreadableFile) as exc:
        raise FormatFileError(f"{path}: cannot read: {exc}") from exc
    if len(text) > MAX_FORMAT_FILE_CHARS:
        raise FormatFileError(f"{path}: over {MAX_FORMAT_FILE_CHARS} characters")
    return text


def _json(path: Path) -> object:
    try:
        return json.loads(_text(path))
    except (ValueError, RecursionError) as exc:
        raise FormatFileError(f"{path}: not valid JSON: {exc}") from exc
