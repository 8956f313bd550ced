"""A `response_template` loaded as vLLM 0.32's vendored loader loads it
(`vllm/parser/chat_parsing/response_templates.py`) and checked as its serving adapter checks it
(`vllm/parser/response_template.py`), statement by statement, so the messages are vLLM's own. Patterns are
compiled with the `regex` module, as vLLM does. The audit's verdicts and every predictor start here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import regex

TEMPLATE_KEY = "response_template"


LEGACY_KEY = "response_schema"


THINKING, CONTENT, TOOL_CALLS = "thinking", "content", "tool_calls"


SERVING_FIELDS = frozenset({THINKING, CONTENT, TOOL_CALLS})


# Keys of vLLM's CONTENT_PARSERS; a dict so that `x in CONTENT_PARSERS` fails exactly like vLLM's
# (`TypeError: unhashable type` for a list or dict).
CONTENT_PARSERS: dict[str, None] = dict.fromkeys(
    ["text", "int", "float", "bool", "json", "xml-inline", "kv-lines"]
)


_TEMPLATE_KEYS = {"version", "defaults", "fields", "start_anchor", "start_anchor_pattern"}


_FIELD_KEYS = {
    "open", "open_pattern", "close", "close_pattern", "content", "content_args",
    "repeats", "join", "optional", "transform", "transform_each",
}


_PLACEHOLDER = regex.compile(r"\{(\w+(?:\.\w+)*)\}")


@dataclass
class Anchor:
    compiled: Any  # regex.Pattern or None
    literals: list[str] | None
    source: str | None  # the regex text, for patterns


@dataclass
class LoadedField:
    name: str
    open: Anchor
    close: Anchor
    content: str
    content_args: Any
    repeats: bool
    join: Any
    transform: Any


def _compile_anchor(scope: str, spec: dict, literal_key: str, pattern_key: str) -> Anchor:
    if literal_key in spec and pattern_key in spec:
        raise ValueError(f"{scope}: cannot specify both '{literal_key}' and '{pattern_key}'")
    if literal_key in spec:
        raw = spec[literal_key]
        if isinstance(raw, str):
            literals = [raw]
        elif isinstance(raw, list):
            if not raw:
                raise ValueError(f"{scope}: '{literal_key}' list must contain at least one literal")
            if not all(isinstance(s, str) for s in raw):
                raise ValueError(f"{scope}: '{literal_key}' list must contain only strings")
            literals = list(dict.fromkeys(raw))
        else:
            raise ValueError(
                f"{scope}: '{literal_key}' must be a string or list of strings, got {type(raw).__name__}"
            )
        if any(s == "" for s in literals):
            raise ValueError(f"{scope}: '{literal_key}' literals cannot be empty strings")
        ordered = sorted(literals, key=len, reverse=True)
        compiled = regex.compile("|".join(regex.escape(s) for s in ordered), regex.DOTALL)
        return Anchor(compiled, literals, None)
    if pattern_key in spec:
        try:
            return Anchor(regex.compile(spec[pattern_key], regex.DOTALL), None, spec[pattern_key])
        except regex.error as exc:
            raise ValueError(f"{scope}: invalid {pattern_key} regex: {exc}") from exc
    return Anchor(None, None, None)


def _check_shape(spec: Any) -> None:
    if not isinstance(spec, dict):
        raise ValueError(f"response_template must be a dict, got {type(spec).__name__}")
    version = spec.get("version", 1)
    if version != 1:
        raise ValueError(f"Unsupported response_template version: {version}")
    if unknown := set(spec) - _TEMPLATE_KEYS:
        raise ValueError(f"Unknown keys in response_template: {sorted(unknown)}")
    if not isinstance(spec.get("defaults", {}), dict):
        raise ValueError("response_template.defaults must be a dict")
    fields = spec.get("fields", {})
    if not isinstance(fields, dict) or not fields:
        raise ValueError("response_template.fields must be a non-empty dict")


def _check_transform_strings(scope: str, transform: Any) -> None:
    if isinstance(transform, dict):
        for value in transform.values():
            _check_transform_strings(scope, value)
    elif isinstance(transform, list):
        for value in transform:
            _check_transform_strings(scope, value)
    elif isinstance(transform, str) and _PLACEHOLDER.search(transform) and not _PLACEHOLDER.fullmatch(transform):
        raise ValueError(
            f"{scope}: transform string {transform!r} mixes a {{placeholder}} with literal text. "
            'Use either a whole-string placeholder (e.g. "{content}") or a plain literal; '
            "string interpolation is not supported."
        )


def _build_field(name: str, spec: Any) -> LoadedField:
    scope = f"Field '{name}'"
    if not isinstance(spec, dict):
        raise ValueError(f"{scope} must be a dict")
    if unknown := set(spec) - _FIELD_KEYS:
        raise ValueError(f"{scope}: unknown keys {sorted(unknown)}")
    content = spec.get("content", "text")
    if content not in CONTENT_PARSERS:
        raise ValueError(f"{scope}: unknown content parser '{content}'. Available: {sorted(CONTENT_PARSERS)}")
    open_anchor = _compile_anchor(scope, spec, "open", "open_pattern")
    close_anchor = _compile_anchor(scope, spec, "close", "close_pattern")
    join = spec.get("join")
    if join is not None and not isinstance(join, str):
        raise ValueError(f"{scope}: 'join' must be a string, got {type(join).__name__}")
    if join is not None and not spec.get("repeats", False):
        raise ValueError(f"{scope}: 'join' requires 'repeats': true")
    transform = spec.get("transform")
    transform_each = spec.get("transform_each", False)
    if not isinstance(transform_each, bool):
        raise ValueError(f"{scope}: transform_each must be a bool, got {type(transform_each).__name__}")
    if transform_each and transform is None:
        raise ValueError(f"{scope}: transform_each is set but no transform was provided")
    if transform is not None:
        _check_transform_strings(scope, transform)
    else:
        captured = set()
        for anchor in (open_anchor, close_anchor):
            if anchor.compiled is not None:
                captured |= set(anchor.compiled.groupindex)
        if captured:
            raise ValueError(
                f"{scope}: open_pattern/close_pattern declares named group(s) "
                f"{sorted(captured)}, but the field has no 'transform'. Named captures "
                f"are only surfaced through a 'transform' template (where they appear "
                f"alongside 'content'). Either add a 'transform' that uses the captures, or "
                f"remove the named groups from the pattern."
            )
    return LoadedField(
        name=name,
        open=open_anchor,
        close=close_anchor,
        content=content,
        content_args=spec.get("content_args", {}),
        repeats=bool(spec.get("repeats", False)),
        join=join,
        transform=transform,
    )


@dataclass
class LoadedTemplate:
    fields: dict[str, LoadedField]
    defaults: dict
    start_anchor: Anchor


def load_template(spec: Any) -> LoadedTemplate:
    """Mirror of `load_response_template`: raises ValueError/TypeError with vLLM's message."""
    _check_shape(spec)
    fields = {name: _build_field(name, raw) for name, raw in spec["fields"].items()}
    implicit = [name for name, built in fields.items() if built.open.compiled is None]
    if len(implicit) > 1:
        raise ValueError(
            "At most one field may omit 'open'/'open_pattern' (that field becomes the "
            f"implicit-open / leftover sink). Found: {', '.join(implicit)}"
        )
    start_anchor = _compile_anchor("response_template", spec, "start_anchor", "start_anchor_pattern")
    if start_anchor.compiled is None:
        raise ValueError("response_template must define 'start_anchor' or 'start_anchor_pattern'.")
    return LoadedTemplate(fields=fields, defaults=spec.get("defaults", {}), start_anchor=start_anchor)


def check_serving(loaded: LoadedTemplate) -> None:
    """Mirror of `validate_response_template_for_serving` (after loading)."""
    unsupported = (set(loaded.fields) - SERVING_FIELDS) | (set(loaded.defaults) - {"role"})
    if unsupported:
        raise ValueError(
            "response_template contains unsupported semantic fields: "
            f"{sorted(unsupported)}. Supported fields are: {sorted(SERVING_FIELDS)}"
        )
    for name in (THINKING, CONTENT):
        built = loaded.fields.get(name)
        if built is not None and (built.content != "text" or built.transform is not None or built.join is not None):
            raise ValueError(
                f"response_template field {name!r} uses semantics that cannot be streamed by the OpenAI serving adapter"
            )
