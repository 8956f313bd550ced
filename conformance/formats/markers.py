"""The template markers checked for leaks: the literal delimiters of a served checkpoint's own
response_template (open/close strings, and regexes that are a literal behind optional whitespace),
never another format's; the default format's (the tiny checkpoint's) only when no template is known."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conformance.formats.checkpoint_files import FetchError, read_tokenizer_config
from conformance.formats.format import Format
from conformance.formats.registry import DEFAULT_FORMAT

# The default format's delimiters: the markers checked when the served checkpoint's template is unknown.
DEFAULT_MARKERS = DEFAULT_FORMAT.delimiter_tokens


def template_markers(response_template: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The delimiters of a response_template: literal open/close strings, plus the literal text of
    open_pattern/close_pattern regexes that are a literal behind optional whitespace (e.g.
    `\\s*<tool_call>`); the default format's when the template is unknown (None), none of another
    format's when the template names no literal delimiter."""
    if not isinstance(response_template, Mapping):
        return DEFAULT_MARKERS
    markers: list[str] = []
    for spec in (response_template.get("fields") or {}).values():
        if not isinstance(spec, Mapping):
            continue
        for key in ("open", "close", "open_pattern", "close_pattern"):
            values = spec.get(key)
            for value in [values] if isinstance(values, str) else values or []:
                literal = _pattern_literal(value) if key.endswith("_pattern") else value
                if isinstance(literal, str) and literal.strip() and literal not in markers:
                    markers.append(literal)
    return tuple(markers)


_REGEX_METACHARACTERS = set("()[]{}|?*+^$.")


def _pattern_literal(pattern: Any) -> str | None:
    """The literal a regex matches once optional leading/trailing whitespace is set aside, or None."""
    if not isinstance(pattern, str):
        return None
    for affix in ("\\s*", "\\s+", "\\n*", "\\n+"):
        pattern = pattern.removeprefix(affix).removesuffix(affix)
    literal, escaped = [], False
    for char in pattern:
        if escaped:
            if char.isalnum():  # \d, \w, \s ...: a character class, not a literal
                return None
            literal.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in _REGEX_METACHARACTERS:
            return None
        else:
            literal.append(char)
    return "".join(literal) if not escaped else None


class CheckpointError(Exception):
    """A local checkpoint's tokenizer_config.json cannot be read."""


def markers_for_checkpoint(checkpoint: Path | None, form: Format | None = None) -> tuple[str, ...]:
    """The delimiters checked for leaks: from the checkpoint's response_template; with no checkpoint, from
    the response format it is told to write (`form`), else the defaults."""
    if checkpoint is None:
        return template_markers(form.response_template if form is not None else None)

    try:
        config = read_tokenizer_config(checkpoint / "tokenizer_config.json")
    except FetchError as exc:  # it names the file (and line); say which directory
        raise CheckpointError(f"{checkpoint}/{exc}") from exc
    return template_markers(config.get("response_template"))
