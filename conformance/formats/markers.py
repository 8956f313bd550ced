"""The template markers checked for leaks: the literal delimiters of a served checkpoint's own
response_template (open/close strings, and regexes that are a literal behind optional whitespace),
never another format's; the default format's (the tiny checkpoint's) only when no template is known."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import regex

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
                literal = pattern_literal(value) if key.endswith("_pattern") else value
                if isinstance(literal, str) and literal.strip() and literal not in markers:
                    markers.append(literal)
    return tuple(markers)


_REGEX_METACHARACTERS = set("()[]{}|?*+^$.")


def pattern_literal(pattern: Any) -> str | None:
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


# A tag in a chat template's text: `<tools>`, `</tool_call>`, `<|im_start|>`, `<|turn>`, `<|"|>`, `<｜Assistant｜>`
# (not an instruction's example such as `<function=example_name>`).
_TEMPLATE_TAG = regex.compile(r'</?[|｜]?[\w"|｜▁-]{1,62}>')


def pattern_literal_runs(pattern: str) -> list[str]:
    """The runs of literal text a regex always spells where it matches them: `\\s*<tool_call>\\s*<function=(?P<n>\\w+)>`
    gives `<tool_call>` and `<function=` (and `>`); an alternation gives each branch's runs. A character a
    quantifier makes optional or repeated ends the run before it; classes, groups' headers and escapes like
    `\\s` end a run too."""
    runs: list[str] = []
    run: list[str] = []

    def cut() -> None:
        if run:
            runs.append("".join(run))
            run.clear()

    index = 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "\\" and index < len(pattern):
            escaped = pattern[index]
            index += 1
            if escaped.isalnum():  # \s, \d, \n, \1 ...: not one fixed literal character here
                cut()
            else:
                run.append(escaped)
        elif char == "[":  # a class: skip to its closing bracket
            cut()
            index += pattern[index:index + 1] == "^"
            index += pattern[index:index + 1] == "]"
            while index < len(pattern) and pattern[index] != "]":
                index += 2 if pattern[index] == "\\" else 1
            index += 1
        elif char == "(":
            cut()
            if pattern[index:index + 1] == "?":  # a group's header: (?:, (?P<name>, (?<=, (?i) ...
                header = regex.match(r"\?(?:P?<(?![=!])[^>]*>|P=[^)]*\)|<[=!]|[:=!>|]|[a-zA-Z-]*[:)])", pattern[index:])
                index += header.end() if header else 1
        elif char in "?*+" or (char == "{" and regex.match(r"\d*(?:,\d*)?\}", pattern[index:])):
            if run:  # the character before a quantifier is optional or repeated
                run.pop()
            cut()
            if char == "{":
                index = pattern.index("}", index) + 1
        elif char in "|)^$.":
            cut()
        else:
            run.append(char)
    cut()
    return runs


def template_delimiters(response_template: Mapping[str, Any] | None, chat_template: str | None,
                        known_tokens: Sequence[str] = ()) -> tuple[str, ...]:
    """Every literal delimiter of a checkpoint's two templates, each to be one token of its tiny clone: the
    response_template's fields' open/close literals and the literal runs of their patterns (and of their
    `content_args` patterns), split at whitespace, with the checkpoint's own tokens (`known_tokens`) cut out
    and plain words dropped (`<|channel>thought` gives no `thought`); and every tag the chat template's text
    writes (`<tools>`, `<|im_start|>`). Tokens the checkpoint already has are not repeated."""
    pieces: list[str] = []
    fields = response_template.get("fields") if isinstance(response_template, Mapping) else None
    for spec in (fields or {}).values() if isinstance(fields, Mapping) else ():
        if not isinstance(spec, Mapping):
            continue
        args = spec.get("content_args")
        patterns = [value for key, value in (args.items() if isinstance(args, Mapping) else ())
                    if key.endswith("pattern")]
        for key in ("open", "close", "open_pattern", "close_pattern"):
            values = spec.get(key)
            values = [values] if isinstance(values, str) else values if isinstance(values, list) else []
            if key.endswith("_pattern"):
                patterns += values
            else:
                pieces += [value for value in values if isinstance(value, str)]
        for pattern in patterns:
            pieces += pattern_literal_runs(pattern) if isinstance(pattern, str) else []
    known = sorted(set(known_tokens), key=len, reverse=True)
    cutter = regex.compile("|".join(regex.escape(token) for token in known)) if known else None
    found: list[str] = []
    for piece in pieces:
        for word in piece.split():
            for part in cutter.split(word) if cutter else [word]:
                if len(part) > 1 and not regex.fullmatch(r"\w+", part):
                    found.append(part)
    found += _TEMPLATE_TAG.findall(chat_template or "")
    return tuple(token for token in dict.fromkeys(found) if token not in set(known_tokens))
