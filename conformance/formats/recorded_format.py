"""A checkpoint's own response format kept with the run that served it (`response_format.json` beside its
transcripts.jsonl), so that the recording alone can be judged again: `conformance recheck` and `conformance
compare` read it and register the format before rendering the cases in it. A shipped record needs no such file
(its name says it all); a run on a checkpoint's own format (`checkpoint:<dirname>`, `checkpoint_format`) writes
it, since only the process that read the checkpoint knew the format.

The file is read as untrusted input: bounded, validated against `schemas/recorded-format.schema.json`, its
name the one the transcripts give; a missing or broken file is `FormatFileError` naming the file and the
field. Its templates stay the checkpoint's, untrusted: the format keeps `checkpoint` (the directory the run
read, as recorded), so the suite renders them bounded as it did in the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from conformance.formats.checkpoint_format import CHECKPOINT_PREFIX, CHECKPOINT_VARIANTS
from conformance.formats.format import Format
from conformance.formats.format_files import FormatFileError
from conformance.formats.registry import FORMATS, format_named, register_checkpoint_format
from conformance.util.files import read_bounded, write_atomically
from conformance.util.json_codec import parse_json
from conformance.util.locations import format_path
from conformance.util.package_paths import load_schema

RECORDED_FORMAT_FILE = "response_format.json"
RECORDED_FORMAT_SCHEMA = "recorded-format.schema.json"
MAX_RECORDED_FORMAT_BYTES = 12 * 1024 * 1024  # two checkpoint files of at most 5 MiB each, and tokens
# the Format fields the file holds, in its order (the rest are a checkpoint format's constants)
FIELDS = ("name", "description", "provenance", "checkpoint", "chat_template", "response_template",
          "delimiter_tokens", "special_tokens", "eos_token", "pad_token", "stop_tokens", "probe_text", "model_type")
TUPLE_FIELDS = ("delimiter_tokens", "special_tokens", "stop_tokens")


def needs_record(form: Format) -> bool:
    """Whether a run serving `form` must keep its record: a checkpoint's own format (no shipped record)."""
    return form.checkpoint is not None and form.name not in FORMATS


def format_document(form: Format) -> dict[str, Any]:
    """What `response_format.json` holds of `form`."""
    return {key: list(value) if key in TUPLE_FIELDS else dict(value) if key == "response_template" else value
            for key in FIELDS for value in [getattr(form, key)]}


def write_recorded_format(run_dir: Path, form: Format) -> Path:
    """Write `form`'s record into the run directory `run_dir`; its path."""
    path = run_dir / RECORDED_FORMAT_FILE
    write_atomically(path, json.dumps(format_document(form), indent=1, ensure_ascii=False) + "\n")
    return path


def read_recorded_format(path: Path, name: str | None = None) -> Format:
    """The format recorded in `path` (named `name`, when given: the transcripts' own); FormatFileError naming
    the file and the field for one that is missing, not bounded JSON, not the schema's, or of another name."""
    try:
        document = parse_json(read_bounded(path, MAX_RECORDED_FORMAT_BYTES, "a recorded response format"))
    except FileNotFoundError:
        raise FormatFileError(f"{path}: missing: the run's response format {name or ''} is a checkpoint's own, "
                              f"and re-judging it needs its record, which the run writes there") from None
    except OSError as exc:  # a FIFO, a device, too large, no permission
        raise FormatFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise FormatFileError(f"{path}: not valid JSON: {exc}") from exc
    validator = jsonschema.Draft202012Validator(load_schema(RECORDED_FORMAT_SCHEMA))
    for error in sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path)):
        raise FormatFileError(f"{path}: {format_path(list(error.absolute_path)) or 'the record'}: {error.message[:300]}")
    if name is not None and document["name"] != name:
        raise FormatFileError(f"{path}: name: {document['name']!r} is not the run's response format {name!r}")
    values = {key: tuple(document[key]) if key in TUPLE_FIELDS else document[key] for key in FIELDS}
    return Format(**values, legacy_flags=(), variants=CHECKPOINT_VARIANTS)


def format_of_run(name: str | None, run_dir: Path) -> Format:
    """The response format `name` a run recorded in `run_dir` speaks: a shipped record (None: the default), else
    a checkpoint's own read from the run's `response_format.json` and registered for this process.
    FormatFileError (a ValueError) naming the file and the field, or the unknown name."""
    if name is None or name in FORMATS or not name.startswith(CHECKPOINT_PREFIX):
        return format_named(name)  # a shipped one, or a ValueError naming the known ones
    form = read_recorded_format(run_dir / RECORDED_FORMAT_FILE, name)
    register_checkpoint_format(form)
    return form
