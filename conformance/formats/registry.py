"""Every response format the suite speaks, one line each; `DEFAULT_FORMAT` is the tiny checkpoint's."""

from __future__ import annotations

from conformance.formats.format import Format
from conformance.formats.qwen3_hermes import QWEN3_HERMES

FORMATS: dict[str, Format] = {record.name: record for record in (QWEN3_HERMES,)}
DEFAULT_FORMAT = QWEN3_HERMES
