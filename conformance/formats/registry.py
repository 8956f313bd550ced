"""Every response format the suite speaks: the tiny checkpoint's (`DEFAULT_FORMAT`, a record in code) and each
one kept as data under `conformance/formats/shipped/`."""

from __future__ import annotations

from conformance.formats.format import Format
from conformance.formats.format_files import shipped_formats
from conformance.formats.qwen3_hermes import QWEN3_HERMES

FORMATS: dict[str, Format] = {record.name: record for record in (QWEN3_HERMES, *shipped_formats())}
DEFAULT_FORMAT = QWEN3_HERMES
# formats read from a checkpoint directory this process serves (`checkpoint_format`), by name
_CHECKPOINT_FORMATS: dict[str, Format] = {}


def register_checkpoint_format(form: Format) -> None:
    """Make the format read from a checkpoint known by its name (`checkpoint:<dirname>`) for this process."""
    _CHECKPOINT_FORMATS[form.name] = form


def format_named(name: str | None) -> Format:
    """The record of response format `name` (None: the default format, as a recording made before formats
    were recorded); ValueError naming the known ones for a name without one."""
    if name is None:
        return DEFAULT_FORMAT
    try:
        return FORMATS[name] if name in FORMATS else _CHECKPOINT_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown response format {name!r} (known: {', '.join(FORMATS)}; a checkpoint's own is "
                         "known to the process that read it)") from None
