"""Every response format the suite speaks: the tiny checkpoint's (`DEFAULT_FORMAT`, a record in code) and each
one kept as data under `conformance/formats/shipped/`."""

from __future__ import annotations

from conformance.formats.format import Format
from conformance.formats.format_files import shipped_formats
from conformance.formats.qwen3_hermes import QWEN3_HERMES

FORMATS: dict[str, Format] = {record.name: record for record in (QWEN3_HERMES, *shipped_formats())}
DEFAULT_FORMAT = QWEN3_HERMES
