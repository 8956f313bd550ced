"""`response_template` rules and vLLM 0.32 (and 0.33) startup verdicts, without importing vLLM.

The load rules mirror vLLM 0.32's vendored loader (`vllm/parser/chat_parsing/response_templates.py`) and
the serving checks of `vllm/parser/response_template.py` / `parser_manager.py` statement by statement, so
the messages are vLLM's own (contract sections 1.4 and 6). `tests/test_template_vs_vllm.py` proves the
agreement against vLLM's code. Patterns are compiled with the `regex` module, as vLLM does, so compile
errors read the same.

Templates come from checkpoints and are untrusted: `analyze_template` runs the analysis in a worker process
with a wall-clock limit (a regex can take minutes to compile), and every regex is probed with bounded-time
searches so a catastrophic pattern becomes a finding instead of a hang.
vLLM 0.33 applies the same rules with other texts for a missing template (`predictors/vllm_033.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import regex

from conformance.audit.predictors import vllm_033 as audit_033
from conformance.audit.predictors.sglang import SGLangVerdict, sglang_verdicts
from conformance.audit.predictors.vllm_rs import RustVerdict, rust_verdicts
from conformance.formats.response_template import (
    LEGACY_KEY,
    TEMPLATE_KEY,
    THINKING,
    TOOL_CALLS,
    Anchor,
    LoadedField,
    LoadedTemplate,
    check_serving,
    load_template,
)

# The three server configurations the audit predicts, keyed as in reports and `expect`.
CONFIGURATIONS: dict[str, str] = {
    "tool_call_parser_hf": "--enable-auto-tool-choice --tool-call-parser hf",
    "reasoning_parser_hf": "--reasoning-parser hf",
    "both": "--enable-auto-tool-choice --tool-call-parser hf --reasoning-parser hf",
}


# vLLM 0.32's own messages (vllm/parser/response_template.py).
MISSING_TEMPLATE = "The hf parser requires `response_template` metadata in the tokenizer configuration"


INVALID_PREFIX = "Invalid response_template metadata: "


THINKING_REQUIRED = "--reasoning-parser hf requires a response_template with a thinking field"


TOOL_CALLS_REQUIRED = "--tool-call-parser hf requires a response_template with a tool_calls field"


REGEX_SEARCH_TIMEOUT_S = 0.2


ANALYSIS_TIMEOUT_S = 20.0


_PROBE_RUN_LENGTH = 2000


_SHOWN_PATTERN_CHARS = 40


@dataclass(frozen=True)
class StartupVerdict:
    """Predicted outcome of starting vLLM (0.32 or 0.33) with one flag combination."""

    starts: bool
    error: str | None  # vLLM's own innermost message when it does not start


@dataclass(frozen=True)
class Finding:
    """Something a checkpoint owner should know; `code` is stable, `message` is for people."""

    code: str
    message: str


@dataclass(frozen=True)
class TemplateAnalysis:
    metadata_key: str  # "response_template", "response_schema", "both" or "none"
    present: bool  # a `response_template` key exists
    valid: bool  # it loads under the format's rules (vLLM's vendored loader)
    error: str | None  # the loader's message, or why the value is not usable at all
    regions: str  # short description of the regions the template recognises
    findings: tuple[Finding, ...]
    vllm_0_32: dict[str, StartupVerdict] = field(default_factory=dict)
    vllm_0_32_rust: dict[str, RustVerdict] = field(default_factory=dict)  # `vllm-rs serve` (predictors/vllm_rs.py)
    vllm_0_33: dict[str, StartupVerdict] = field(default_factory=dict)  # predictors/vllm_033.py
    vllm_0_33_rust: dict[str, RustVerdict] = field(default_factory=dict)  # 0.32's frontend rules, 0.33's engine
    sglang_0_5_23: dict[str, SGLangVerdict] = field(default_factory=dict)  # SGLang's server (predictors/sglang.py)


class TemplateAnalysisTimeout(RuntimeError):
    """The analysis of one template did not finish within the time limit."""


class TemplateTooExpensive(RuntimeError):
    """The analysis of one template needed more memory than the worker may have
    (`conformance.audit.template_worker.WORKER_MEMORY_BYTES`)."""


def _resolve(tokenizer_config: dict) -> dict | None:
    """Mirror of `resolve_response_template`: only a dict counts, anything else is absent."""
    template = tokenizer_config.get(TEMPLATE_KEY)
    return template if isinstance(template, dict) else None


def _verdicts(template: dict | None, serving_error: str | None, fields: set[str],
              engine_missing: str = MISSING_TEMPLATE,
              frontend_missing: Callable[[bool, bool], str] = lambda reasoning, tools: MISSING_TEMPLATE,
              ) -> dict[str, StartupVerdict]:
    """The first error each configuration hits, in vLLM 0.32's order (contract 1.4), with a release's texts
    for a missing template (the engine's; the frontend's given whether it validates for reasoning, tools).

    `--reasoning-parser hf` first fails in the engine config (`_serving_template`, raw message); the
    frontend (`validate_tokenizer_response_template`) then prefixes loader errors and checks the fields.
    """

    def frontend(reasoning: bool, tools: bool) -> str | None:
        if template is None:
            return frontend_missing(reasoning, tools)
        if serving_error is not None:
            return INVALID_PREFIX + serving_error
        if reasoning and THINKING not in fields:
            return THINKING_REQUIRED
        if tools and TOOL_CALLS not in fields:
            return TOOL_CALLS_REQUIRED
        return None

    engine_error = _engine_error(template, serving_error, engine_missing)
    errors = {
        "tool_call_parser_hf": frontend(reasoning=False, tools=True),
        "reasoning_parser_hf": engine_error or frontend(reasoning=True, tools=False),
        "both": engine_error or frontend(reasoning=True, tools=True),
    }
    return {name: StartupVerdict(starts=error is None, error=error) for name, error in errors.items()}


def _engine_error(template: dict | None, serving_error: str | None, missing: str = MISSING_TEMPLATE) -> str | None:
    """What the engine configuration says about the template with `--reasoning-parser hf`."""
    return missing if template is None else serving_error


def _show_anchor(anchor: Anchor) -> str:
    if anchor.literals is not None:
        return " | ".join(repr(s) for s in anchor.literals)
    text = anchor.source if len(anchor.source) <= _SHOWN_PATTERN_CHARS else anchor.source[:_SHOWN_PATTERN_CHARS] + "…"
    return f"/{text}/"


def _describe(loaded: LoadedTemplate) -> str:
    parts = []
    for built in loaded.fields.values():
        opener = _show_anchor(built.open) if built.open.compiled is not None else "(implicit)"
        closer = _show_anchor(built.close) if built.close.compiled is not None else "(end)"
        extras = [built.content]
        extras += [name for name, on in (("repeats", built.repeats), ("transform", built.transform is not None)) if on]
        parts.append(f"{built.name}: {opener} … {closer} [{', '.join(extras)}]")
    return "; ".join(parts)


def _leading_literal(pattern_text: str) -> str:
    """The literal text a pattern starts with (e.g. `<tc>` for `<tc>(a+)+$`), so probes get past it."""
    literal = []
    index = 0
    while index < len(pattern_text):
        character = pattern_text[index]
        if character == "\\" and index + 1 < len(pattern_text) and not pattern_text[index + 1].isalnum():
            literal.append(pattern_text[index + 1])
            index += 2
            continue
        if character in "\\()[]{}*+?|^$.":
            break
        literal.append(character)
        index += 1
    return "".join(literal)


def _probes(pattern_text: str) -> list[str]:
    """Inputs that make a backtracking-prone pattern explode: its leading literal (or nothing), a long run
    of one character, then a misfit."""
    characters = sorted(set(pattern_text) | set("a0 \n<>{}\"'|_:"))
    prefixes = dict.fromkeys(["", _leading_literal(pattern_text)])
    return [prefix + c * _PROBE_RUN_LENGTH + "\x00" for prefix in prefixes for c in characters]


def _slow_pattern(compiled: Any, source: str) -> bool:
    try:
        for probe in _probes(source):
            compiled.search(probe, timeout=REGEX_SEARCH_TIMEOUT_S)
    except TimeoutError:
        return True
    return False


def _slow_regex(where: str) -> Finding:
    return Finding(
        "slow-regex",
        f"{where}: a search took over {REGEX_SEARCH_TIMEOUT_S}s on a {_PROBE_RUN_LENGTH}-character input "
        "(catastrophic backtracking); vLLM runs this pattern on model output",
    )


def _regex_findings(loaded: LoadedTemplate) -> list[Finding]:
    findings = []
    anchors = [("start_anchor_pattern", loaded.start_anchor)]
    for built in loaded.fields.values():
        anchors += [(f"fields.{built.name}.open_pattern", built.open), (f"fields.{built.name}.close_pattern", built.close)]
    for where, anchor in anchors:
        if anchor.source is not None and _slow_pattern(anchor.compiled, anchor.source):
            findings.append(_slow_regex(where))
    for built in loaded.fields.values():
        if built.content == "xml-inline" and (finding := _tag_pattern_finding(built)) is not None:
            findings.append(finding)
    return findings


def _tag_pattern_finding(built: LoadedField) -> Finding | None:
    """What vLLM's xml-inline parser will trip over: it reads `content_args.tag_pattern` (a regex with a named
    group `key`) only when a response is parsed, so the loader lets these through."""
    where = f"fields.{built.name}.content_args.tag_pattern"
    tag_pattern = built.content_args.get("tag_pattern") if isinstance(built.content_args, dict) else None
    if tag_pattern is None:
        problem = "missing; the xml-inline content parser needs a regex with a named group 'key'"
    else:
        try:
            compiled = regex.compile(tag_pattern, regex.DOTALL)
        except (regex.error, TypeError) as exc:
            problem = str(exc)
        else:
            if _slow_pattern(compiled, tag_pattern):
                return _slow_regex(where)
            if "key" not in compiled.groupindex:
                problem = "has no named group 'key'; vLLM fails on the first tag it matches"
            else:
                return None
    return Finding("bad-tag-pattern", f"{where}: {problem} (vLLM fails only when a response is parsed)")


def _json_type(value: object) -> str:
    names = {str: "string", list: "array", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _metadata_key(tokenizer_config: dict) -> str:
    has_template, has_legacy = TEMPLATE_KEY in tokenizer_config, LEGACY_KEY in tokenizer_config
    if has_template and has_legacy:
        return "both"
    return TEMPLATE_KEY if has_template else LEGACY_KEY if has_legacy else "none"


def analyze_template_unbounded(tokenizer_config: dict) -> TemplateAnalysis:
    """The whole analysis in this process. Only for trusted input; see `analyze_template`."""
    metadata_key = _metadata_key(tokenizer_config)
    present = TEMPLATE_KEY in tokenizer_config
    template = _resolve(tokenizer_config)
    findings: list[Finding] = []
    if metadata_key in (LEGACY_KEY, "both"):
        findings.append(Finding(
            "legacy-response-schema",
            "`response_schema` is the transformers 5.0-5.14 format; vLLM 0.32 ignores it"
            + ("" if template is not None else " (add a `response_template` for the hf parser)"),
        ))
    loaded: LoadedTemplate | None = None
    load_error = serving_error = None
    if present and template is None:
        load_error = (
            f"`response_template` is a JSON {_json_type(tokenizer_config[TEMPLATE_KEY])}, not an object; "
            "vLLM 0.32 treats it as missing"
        )
        findings.append(Finding("template-not-object", load_error))
    elif template is not None:
        try:
            loaded = load_template(template)
        except (TypeError, ValueError) as exc:
            load_error = serving_error = str(exc)
        if loaded is not None:
            try:
                check_serving(loaded)
            except ValueError as exc:
                serving_error = str(exc)
            findings += _regex_findings(loaded)
        if isinstance(template.get("fields"), dict) and "reasoning_content" in template["fields"]:
            findings.append(Finding(
                "reasoning-content-field",
                "the template names its reasoning field `reasoning_content` (a transformers convention); "
                "vLLM 0.32 serving accepts only `thinking`, `content` and `tool_calls`: rename it to `thinking`",
            ))
        if serving_error is not None and load_error is None:
            findings.append(Finding("not-servable", f"loads, but vLLM 0.32 serving rejects it: {serving_error}"))
    fields = set(loaded.fields) if loaded else set()
    raw_template = tokenizer_config.get(TEMPLATE_KEY)
    return TemplateAnalysis(
        metadata_key=metadata_key,
        present=present,
        valid=loaded is not None,
        error=load_error,
        regions=_describe(loaded) if loaded is not None else "",
        findings=tuple(findings),
        vllm_0_32=_verdicts(template, serving_error, fields),
        vllm_0_32_rust=rust_verdicts(raw_template, _engine_error(template, serving_error)),
        vllm_0_33=_verdicts(template, serving_error, fields, audit_033.ENGINE_MISSING, audit_033.frontend_missing),
        vllm_0_33_rust=rust_verdicts(raw_template, _engine_error(template, serving_error, audit_033.ENGINE_MISSING)),
        sglang_0_5_23=sglang_verdicts(template),
    )
