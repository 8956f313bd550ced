"""vLLM 0.32's Rust frontend (`vllm-rs serve`) and a checkpoint's `response_template`: the verdict.

How the 0.32.0 frontend decides (learnt from the binary, `strings` and its answers, and from the
frontend's source in vllm-project/vllm `rust/`). The v0.32.0 tag itself could not be checked out here
(the repository is larger than the mirror allows), so the source references are to the nearest stored
versions of each file (commit given), whose messages the 0.32.0 binary carries verbatim; `file:line`
references without a commit are the binary's own (its tracing call sites). The differential test
(tests/test_audit_rust_vs_vllm_rs.py) is the proof that these rules are 0.32.0's.
Sources: `rust/src/parser/src/unified/hf/{mod.rs@1479002c, spec.rs@310ce882, template.rs@0de3f1b0,
pattern.rs@29868f91, content.rs@0de3f1b0, transform.rs@0de3f1b0}`, `rust/src/chat/src/output/default/mod.rs`.

1. Start-up. `vllm-rs serve` forwards `--reasoning-parser hf` (not the tool parser, and nothing for
   `none`) to its managed Python engine, whose engine configuration loads the template with the
   Python rules (`audit/template_rules.py`'s engine step): a template the Python engine refuses stops the whole
   server (the frontend logs `managed Python headless engine exited unexpectedly`); the reason is the
   engine's message. The frontend itself only logs a warning at start-up for a template it cannot
   execute (`src/chat/src/backend/hf.rs:139` in the binary: "the `hf` parser cannot execute the
   model's response_template").
2. Every chat request builds the output parser (`rust/src/chat/src/output/default/mod.rs`,
   `DefaultChatOutputProcessor::with_response_template` -> `resolve_optional_unified_parser`):
   a. the tool and reasoning selections must resolve to the same unified parser, else "unified
      parsing requires the tool and reasoning selections to resolve to the same parser; resolved
      tool=hf, reasoning=none" (before the template is looked at; `auto` resolves by model name, so
      the single-flag configurations are predicted with the other parser set to `none`);
   b. `hf` needs the compiled template, else "failed to initialize unified parser `hf`: " and the
      `HfTemplateError` (`rust/src/parser/src/unified/hf/mod.rs`): "the model's tokenizer_config.json
      provides no response_template" (key absent or null), "invalid response_template: ..." (schema),
      "unsupported response_template: ..." (valid, but not executable here).
   The HTTP answer is 500 with "failed to submit chat request: " before that message (the engine-free
   `vllm-rs render` answers the same message without the prefix, with 400).
3. Compiling the template (`ResponseTemplate::from_json`, `rust/src/parser/src/unified/hf/template.rs`):
   serde deserialisation first (`spec.rs`: unknown keys refused, strict types: `version` an unsigned
   integer, `repeats`/`optional`/`transform_each` booleans, `open`/`close`/`start_anchor` a string or
   a list of strings, errors located by their JSON path); then `version == 1` and a non-empty
   `fields`; then each field in order (`Region::compile`): its open then close anchor (both forms at
   once, empty lists or strings refused; a pattern must parse as Rust regex syntax and start with a
   literal prefix: `pattern.rs` `StreamingPattern::new`, see `rust_regex.py` and `rust_literals.py`), its `content_args`
   (`content.rs`), `join` without `repeats`, the transform (`transform.rs`: no interpolated
   placeholder), named groups without a transform, transform placeholders that are neither `content`
   nor an opener group, the field name (`content`, `thinking`, `reasoning_content`, `tool_calls`),
   text fields with a non-text parser or a transform, `join` on tool calls; then at most one implicit
   field; then the start anchor (required; a pattern must compile). "tokenizer is missing unified
   parser token" (a unified parser that needs special tokens) and "Required response_template fields
   missing from parsed output" belong to other parsers or to parsing a response: no template decides
   them at start-up or per request.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

import regex

from conformance.audit.predictors import rust_literals, rust_regex

RustOutcome = Literal["starts", "refuses_to_start", "starts_but_refuses_requests"]

# The configurations of CONFIGURATIONS, as the Rust frontend takes them (it has no --enable-auto-tool-choice).
RUST_CONFIGURATIONS: dict[str, str] = {
    "tool_call_parser_hf": "--tool-call-parser hf --reasoning-parser none",
    "reasoning_parser_hf": "--tool-call-parser none --reasoning-parser hf",
    "both": "--tool-call-parser hf --reasoning-parser hf",
}
SUBMIT_PREFIX = "failed to submit chat request: "
UNIFIED_PREFIX = "failed to initialize unified parser `hf`: "
MISSING = "the model's tokenizer_config.json provides no response_template"
REQUEST_STATUS = 500


@dataclass(frozen=True)
class RustVerdict:
    """Predicted behaviour of `vllm-rs serve` with one configuration."""

    outcome: RustOutcome
    error: str | None  # the engine's message (refuses_to_start) or a refused request's error.message
    http_status: int | None = None  # of every chat request, when they are refused


def selection_error(tool: str, reasoning: str) -> str:
    return ("unified parsing requires the tool and reasoning selections to resolve to the same parser; "
            f"resolved tool={tool}, reasoning={reasoning}")


def rust_verdicts(template: object, engine_error: str | None) -> dict[str, RustVerdict]:
    """The verdict per configuration for a tokenizer_config's `response_template` value (None when absent);
    `engine_error` is the Python engine's (audit/template_rules.py) for `--reasoning-parser hf`, None when it accepts it."""

    def refused(message: str) -> RustVerdict:
        return RustVerdict("starts_but_refuses_requests", SUBMIT_PREFIX + message, REQUEST_STATUS)

    template_error = frontend_template_error(template)
    both = refused(UNIFIED_PREFIX + template_error) if template_error else RustVerdict("starts", None)
    if engine_error is not None:
        both = RustVerdict("refuses_to_start", engine_error)
    reasoning = (RustVerdict("refuses_to_start", engine_error) if engine_error is not None
                 else refused(selection_error("none", "hf")))
    return {"tool_call_parser_hf": refused(selection_error("hf", "none")), "reasoning_parser_hf": reasoning,
            "both": both}


def frontend_template_error(template: object) -> str | None:
    """The frontend's `HfTemplateError` text for a `response_template` value, None when it compiles."""
    if template is None:
        return MISSING
    try:
        _compile(template)
    except _Invalid as error:
        return f"invalid response_template: {error}"
    except _Unsupported as error:
        return f"unsupported response_template: {error}"
    return None


class _Invalid(ValueError):
    pass


class _Unsupported(ValueError):
    pass


# --- serde's words ------------------------------------------------------------------------------------


def rust_debug(text: str) -> str:
    """Rust's `{:?}` of a string."""
    out = []
    for character in text:
        if character in "\\\"":
            out.append("\\" + character)
        elif character in "\n\r\t\0":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}[character])
        elif unicodedata.category(character) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") or (
                unicodedata.category(character) == "Zs" and character != " "):
            out.append(f"\\u{{{ord(character):x}}}")
        else:
            out.append(character)
    return '"' + "".join(out) + '"'


def _unexpected(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        shown = repr(value)
        return f"floating point `{shown if '.' in shown or 'e' in shown else shown + '.0'}`"
    if isinstance(value, str):
        return f"string {rust_debug(value)}"
    return "sequence" if isinstance(value, list) else "map"


@dataclass
class _Path:
    context: str
    segments: tuple[str, ...] = ()

    def __truediv__(self, segment: str) -> _Path:
        return _Path(self.context, (*self.segments, segment))

    def fail(self, message: str) -> _Invalid:
        if not self.segments:
            return _Invalid(f"{self.context}: {message}")
        path = "".join(s if s.startswith("[") else "." + s for s in self.segments)
        return _Invalid(f"{self.context}{path if path.startswith('.') else '.' + path}: {message}")


def _type(path: _Path, value: object, expected: str) -> _Invalid:
    return path.fail(f"invalid type: {_unexpected(value)}, expected {expected}")


def _u64(path: _Path, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type(path, value, "u64")
    if not 0 <= value < 2**64:
        raise path.fail(f"invalid value: integer `{value}`, expected u64")
    return value


def _bool(path: _Path, value: object) -> bool:
    if not isinstance(value, bool):
        raise _type(path, value, "a boolean")
    return value


def _string(path: _Path, value: object, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _type(path, value, "a string")
    return value


def _map(path: _Path, value: object) -> dict:
    if not isinstance(value, dict):
        raise _type(path, value, "a map")
    return value


def _literals(path: _Path, value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise path.fail("data did not match any variant of untagged enum Literals")


CONTENT_KINDS = ("text", "int", "float", "bool", "json", "xml-inline", "kv-lines")


def _content_kind(path: _Path, value: object) -> str:
    if isinstance(value, str):
        if value not in CONTENT_KINDS:
            raise path.fail(f"unknown variant `{value}`, expected one of "
                            + ", ".join(f"`{kind}`" for kind in CONTENT_KINDS))
        return value
    raise _type(path, value, "string or map")


def _struct(path: _Path, name: str, value: object, readers: dict[str, Any], defaults: dict[str, Any]) -> dict:
    """A `#[serde(deny_unknown_fields)]` struct: keys in document order, then the missing ones."""
    if not isinstance(value, dict):
        raise _type(path, value, f"struct {name}")
    out = dict(defaults)
    for key, item in value.items():
        if key not in readers:
            raise (path / key).fail(f"unknown field `{key}`, expected one of " + ", ".join(f"`{k}`" for k in readers))
        out[key] = readers[key](path / key, item)
    for key in readers:
        if key not in out:
            raise path.fail(f"missing field `{key}`")
    return out


_FIELD_READERS = {
    "open": _literals, "open_pattern": lambda p, v: _string(p, v, optional=True),
    "close": _literals, "close_pattern": lambda p, v: _string(p, v, optional=True),
    "content": _content_kind, "content_args": _map, "repeats": _bool,
    "join": lambda p, v: _string(p, v, optional=True), "optional": _bool,
    "transform": lambda p, v: v, "transform_each": _bool,
}
_FIELD_DEFAULTS = {"open": None, "open_pattern": None, "close": None, "close_pattern": None, "content": "text",
                   "content_args": {}, "repeats": False, "join": None, "optional": True, "transform": None,
                   "transform_each": False}


def _fields(path: _Path, value: object) -> list[tuple[str, dict]]:
    fields = _map(path, value)
    return [(key, _struct(path / key, "FieldSpec", spec, _FIELD_READERS, _FIELD_DEFAULTS)) for key, spec in fields.items()]


_TEMPLATE_READERS = {"version": _u64, "defaults": _map, "fields": _fields, "start_anchor": _literals,
                     "start_anchor_pattern": lambda p, v: _string(p, v, optional=True)}
_TEMPLATE_DEFAULTS = {"version": 1, "defaults": {}, "start_anchor": None, "start_anchor_pattern": None}


def _template_spec(value: object) -> dict:
    path = _Path("response_template")
    if isinstance(value, list):  # serde reads a struct from a sequence too, field by field
        out = dict(_TEMPLATE_DEFAULTS)
        for index, (key, reader) in enumerate(_TEMPLATE_READERS.items()):
            if index >= len(value):
                if key not in out:
                    raise path.fail(f"invalid length {len(value)}, expected struct TemplateSpec with 5 elements")
                continue
            out[key] = reader(path / f"[{index}]", value[index])
        if len(value) > len(_TEMPLATE_READERS):
            raise path.fail(f"invalid length {len(value)}, expected fewer elements in array")
        return out
    return _struct(path, "TemplateSpec", value, _TEMPLATE_READERS, _TEMPLATE_DEFAULTS)


# --- compiling (template.rs, content.rs, transform.rs) -----------------------------------------------


def _anchor(scope: str, spec: dict, literal_key: str, pattern_key: str) -> tuple[str, Any] | None:
    literals, pattern = spec[literal_key], spec[pattern_key]
    if literals is not None and pattern is not None:
        raise _Invalid(f"{scope}: cannot specify both '{literal_key}' and '{pattern_key}'")
    if literals is not None:
        if not literals:
            raise _Invalid(f"{scope}: '{literal_key}' list must contain at least one literal")
        if any(literal == "" for literal in literals):
            raise _Invalid(f"{scope}: '{literal_key}' literals cannot be empty strings")
        return ("literals", literals)
    return ("pattern", pattern) if pattern is not None else None


def _boundary_groups(scope: str, anchor: tuple[str, Any] | None) -> list[str]:
    """Compile a field's boundary as `StreamingPattern::new` does; its named groups."""
    if anchor is None or anchor[0] == "literals":
        return []
    pattern = anchor[1]
    try:
        tree = rust_regex.parse(pattern)
    except rust_regex.RustRegexError as error:
        raise _Unsupported(f"{scope}: regex {rust_debug(pattern)} is not supported by the Rust regex engine: "
                           f"{error}") from None
    if rust_literals.literal_prefixes(tree) is None:
        raise _Unsupported(f"{scope}: pattern {rust_debug(pattern)} must start with a literal prefix for streaming "
                           "matching (e.g. `<tool_call>` in `<tool_call>(?P<name>\\w+)`)")
    return rust_regex.group_names(tree)


def _compile_regex(scope: str, pattern: str) -> list[str]:
    """`content.rs` `compile_regex` (a meta regex, no prefix rule); its named groups."""
    try:
        return rust_regex.group_names(rust_regex.parse(pattern))
    except rust_regex.RustRegexError as error:
        raise _Unsupported(f"{scope}: regex {rust_debug(pattern)} is not supported by the Rust regex engine: "
                           f"error parsing pattern 0: {error}") from None


def _content_args(scope: str, kind: str, args: dict) -> None:
    context = _Path(f"{scope}: content_args")
    readers: dict[str, Any] = {"strip": _bool}
    if kind == "json":
        readers |= {"unquoted_keys": _bool, "allow_non_json": _bool, "string_delims": _string_pairs}
    elif kind == "xml-inline":
        readers = {"tag_pattern": lambda p, v: _string(p, v), "merge_duplicates": _bool}
    elif kind == "kv-lines":
        readers |= {"line_sep": lambda p, v: _string(p, v), "kv_sep": lambda p, v: _string(p, v)}
    values = {key: reader(context / key, args[key]) for key, reader in readers.items() if key in args}
    if kind == "json" and any("" in pair for pair in values.get("string_delims", [])):
        raise _Invalid(f"{context.context}: string_delims cannot be empty strings")
    if kind == "xml-inline":
        if "tag_pattern" not in values:
            raise context.fail("missing field `tag_pattern`")
        if "key" not in _compile_regex(scope, values["tag_pattern"]):
            raise _Invalid(f"{scope}: xml-inline: tag_pattern must have a named group 'key'. "
                           f"Pattern: {values['tag_pattern']}")
    if kind == "kv-lines" and values.get("line_sep") == "":
        raise _Invalid(f"{context.context}: line_sep cannot be empty")


def _string_pairs(path: _Path, value: object) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise _type(path, value, "a sequence")
    pairs = []
    for index, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2:
            raise _type(path / f"[{index}]", pair, "a tuple of size 2")
        pairs.append((_string(path / f"[{index}]" / "[0]", pair[0]), _string(path / f"[{index}]" / "[1]", pair[1])))
    return pairs


_PLACEHOLDER = regex.compile(r"\{\w+(?:\.\w+)*\}")


def _placeholder_roots(scope: str, transform: object) -> list[str]:
    """Compile a transform (`Transform::compile`); the root names of its placeholders, in order."""
    if isinstance(transform, dict):
        return [root for value in transform.values() for root in _placeholder_roots(scope, value)]
    if isinstance(transform, list):
        return [root for value in transform for root in _placeholder_roots(scope, value)]
    if isinstance(transform, str) and (found := _PLACEHOLDER.search(transform)):
        if found.span() == (0, len(transform)):
            return [transform[1:-1].split(".")[0]]
        raise _Invalid(f"{scope}: transform string {rust_debug(transform)} mixes a {{placeholder}} with literal text. "
                       'Use either a whole-string placeholder (e.g. "{content}") or a plain literal; '
                       "string interpolation is not supported.")
    return []


TEXT_FIELDS = ("content", "reasoning_content", "thinking")


def _compile_field(name: str, spec: dict) -> bool:
    """`Region::compile`; whether the field is implicit (no open anchor)."""
    scope = f"Field '{name}'"
    opener = _anchor(scope, spec, "open", "open_pattern")
    open_groups = _boundary_groups(scope, opener)
    close_groups = _boundary_groups(scope, _anchor(scope, spec, "close", "close_pattern"))
    _content_args(scope, spec["content"], spec["content_args"])
    if spec["join"] is not None and not spec["repeats"]:
        raise _Invalid(f"{scope}: 'join' requires 'repeats': true")
    transform = spec["transform"]
    roots = _placeholder_roots(scope, transform) if transform is not None else []
    if transform is None and spec["transform_each"]:
        raise _Invalid(f"{scope}: transform_each is set but no transform was provided")
    captured = open_groups + close_groups
    if transform is None and captured:
        shown = "[" + ", ".join(rust_debug(group) for group in captured) + "]"
        raise _Invalid(f"{scope}: open_pattern/close_pattern declares named group(s) {shown}, but the field has no "
                       "'transform'. Named captures are only surfaced through a 'transform' template (where they "
                       "appear alongside 'content'). Either add a 'transform' that uses the captures, or remove the "
                       "named groups from the pattern.")
    if transform is not None and not spec["transform_each"]:
        if stray := next((root for root in roots if root != "content" and root not in open_groups), None):
            raise _Invalid(f"{scope}: transform placeholder '{{{stray}}}' is neither 'content' nor a named group "
                           "of open_pattern")
    if name not in (*TEXT_FIELDS, "tool_calls"):
        raise _Unsupported(f"{scope}: only 'content', 'reasoning_content'/'thinking', and 'tool_calls' fields can "
                           "be reported")
    if name in TEXT_FIELDS and (spec["content"] != "text" or transform is not None):
        raise _Unsupported(f"{scope}: text and reasoning fields must use the 'text' content parser without a "
                           "transform")
    if name == "tool_calls" and spec["join"] is not None:
        raise _Unsupported(f"{scope}: 'join' requires each match to parse to a string")
    return opener is None


def _compile(template: object) -> None:
    """`ResponseTemplate::from_json`: raises _Invalid or _Unsupported with the frontend's message."""
    spec = _template_spec(template)
    if spec["version"] != 1:
        raise _Invalid(f"unsupported response_template version: {spec['version']}")
    if not spec["fields"]:
        raise _Invalid("response_template.fields must be a non-empty dict")
    implicit = [name for name, field in spec["fields"] if _compile_field(name, field)]
    if len(implicit) > 1:
        raise _Invalid("At most one field may omit 'open'/'open_pattern' (that field becomes the implicit-open / "
                       f"leftover sink). Found: {', '.join(implicit)}")
    anchor = _anchor("response_template", spec, "start_anchor", "start_anchor_pattern")
    if anchor is None:
        raise _Invalid("response_template must define 'start_anchor' or 'start_anchor_pattern'.")
    if anchor[0] == "pattern":
        _compile_regex("response_template", anchor[1])


__all__ = ["RUST_CONFIGURATIONS", "RustOutcome", "RustVerdict", "frontend_template_error", "rust_verdicts"]
