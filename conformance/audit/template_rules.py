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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import regex

from conformance.audit.predictors.predictor import TemplateFacts
from conformance.audit.predictors.registry import PREDICTOR_KEYS, PREDICTORS
from conformance.formats.response_template import (
    LEGACY_KEY,
    TEMPLATE_KEY,
    Anchor,
    LoadedField,
    LoadedTemplate,
    check_serving,
    load_template,
)

REGEX_SEARCH_TIMEOUT_S = 0.2
ANALYSIS_TIMEOUT_S = 20.0
_PROBE_RUN_LENGTH = 2000
_SHOWN_PATTERN_CHARS = 40


@dataclass(frozen=True)
class Finding:
    """Something a checkpoint owner should know; `code` is stable, `message` is for people."""

    code: str
    message: str


@dataclass(frozen=True, init=False)
class TemplateAnalysis:
    metadata_key: str  # "response_template", "response_schema", "both" or "none"
    present: bool  # a `response_template` key exists
    valid: bool  # it loads under the format's rules (vLLM's vendored loader)
    error: str | None  # the loader's message, or why the value is not usable at all
    regions: str  # short description of the regions the template recognises
    findings: tuple[Finding, ...]
    # {predictor key: {configuration: verdict}}, in the registry's order (conformance.audit.predictors.registry)
    predictions: Mapping[str, Mapping[str, Any]]

    def __init__(self, metadata_key: str, present: bool, valid: bool, error: str | None, regions: str,
                 findings: tuple[Finding, ...], predictions: Mapping[str, Mapping[str, Any]] | None = None,
                 **by_key: Mapping[str, Any]) -> None:
        """`by_key` replaces single predictions by their key (`vllm_0_33=...`, as `dataclasses.replace` passes it)."""
        if unknown := sorted(set(by_key) - set(PREDICTOR_KEYS)):
            raise TypeError(f"unknown prediction(s): {', '.join(unknown)}")
        for name, value in (("metadata_key", metadata_key), ("present", present), ("valid", valid), ("error", error),
                            ("regions", regions), ("findings", findings),
                            ("predictions", {**(predictions or {}), **by_key})):
            object.__setattr__(self, name, value)

    def __getattr__(self, key: str) -> Mapping[str, Any]:
        """A prediction by its key: `analysis.vllm_0_32`."""
        predictions = self.__dict__.get("predictions") or {}  # not yet set while unpickling
        if key in predictions:
            return predictions[key]
        raise AttributeError(key)


class TemplateAnalysisTimeout(RuntimeError):
    """The analysis of one template did not finish within the time limit."""


class TemplateTooExpensive(RuntimeError):
    """The analysis of one template needed more memory than the worker may have
    (`conformance.audit.template_worker.WORKER_MEMORY_BYTES`)."""


def _resolve(tokenizer_config: dict) -> dict | None:
    """Mirror of `resolve_response_template`: only a dict counts, anything else is absent."""
    template = tokenizer_config.get(TEMPLATE_KEY)
    return template if isinstance(template, dict) else None


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


def analyze_template_unbounded(tokenizer_config: dict, model_type: str | None = None) -> TemplateAnalysis:
    """The whole analysis in this process (`model_type`: config.json's). Only for trusted input; see
    `analyze_template`."""
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
    facts = TemplateFacts(template, tokenizer_config.get(TEMPLATE_KEY), serving_error, frozenset(fields), model_type)
    return TemplateAnalysis(
        metadata_key=metadata_key,
        present=present,
        valid=loaded is not None,
        error=load_error,
        regions=_describe(loaded) if loaded is not None else "",
        findings=tuple(findings),
        predictions={predictor.key: predictor.predict(facts) for predictor in PREDICTORS},
    )
