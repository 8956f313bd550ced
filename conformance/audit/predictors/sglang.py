"""SGLang 0.5.23 and a checkpoint's `response_template`: the start-up verdict, predicted from its code.

SGLang's server cannot run on these machines (its kernels on PyPI are CUDA-only; a CPU build needs a
source build and AMX), so this verdict is predicted from the code of the `sglang==0.5.23` wheel, and
`tests/test_audit_sglang_vs_sglang.py` proves it against that code (`tests/sglang_serving.py` calls
SGLang's own functions) over the mutation corpus and the fixtures. References are to files of the wheel.

1. Flags. The parser is named `response_template` for both flags (`--tool-call-parser`,
   `--reasoning-parser`; `parser_names.py:54`, `reasoning_parser_names.py:42`); `hf` is not a name
   SGLang knows (argparse refuses it). `auto` first detects from the chat template and only then reads
   the metadata (`template_detection.py:1047-1075`): an invalid template is then ignored with a warning
   ("Ignoring invalid response_template from tokenizer configuration: ..."), not predicted here.
2. The template. `_load_serving_templates` (`parser/response_template.py:187`): the tokenizer's
   `response_template` when it is a JSON object (else `init_kwargs`'), else ValueError "response_template
   is required". `_derive_serving_templates_from_json` loads it with the format's loader (the same file
   as vLLM 0.32's: `response_template.load_template`), checks the serving fields (`_check_serving_fields`: vLLM 0.32's
   serving check plus "response_template field 'tool_calls' needs 'open' or 'open_pattern' ..."), then
   loads every variant its detectors parse with: streaming (a content field added, all optional),
   reasoning-only, reasoning-to-answer (thinking, `normal`, content, tool_calls: a thinking field
   without an opener then makes two implicit fields), tool extraction and tool-to-answer.
3. `--reasoning-parser response_template`: the scheduler builds the reasoning parser at start-up,
   unguarded (`managers/scheduler.py:940`): any exception ends the scheduler ("Scheduler hit an
   exception", SIGQUIT to the server), so the server does not start.
4. `--tool-call-parser response_template`: at start-up only the detokenizer builds the tool detector
   (`managers/detokenizer_manager.py:160` -> `tool_close_tokens`, which swallows ValueError): a
   TypeError (the loader's, e.g. an unhashable content parser or a non-string pattern) ends the
   detokenizer and the server; a ValueError does not. Each chat request that sends tools (tool_choice not
   `none`) builds the detector again (`serving_chat.py:1873`), and `handle_request` answers its
   ValueError with HTTP 400 and the message; also "response_template has no 'tool_calls' field". Requests
   without tools never build it (`parses_without_tools` is False).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from conformance.audit.predictors.predictor import Predictor
from conformance.audit.predictors.vllm_032_answers import streaming_template  # the same derivation as vLLM 0.32's
from conformance.formats.response_template import check_serving, load_template

SGLangOutcome = Literal["starts", "refuses_to_start", "starts_but_refuses_tool_requests"]

# Keyed as CONFIGURATIONS (the vLLM ones), with SGLang's own flags.
SGLANG_CONFIGURATIONS: dict[str, str] = {
    "tool_call_parser_hf": "--tool-call-parser response_template",
    "reasoning_parser_hf": "--reasoning-parser response_template",
    "both": "--tool-call-parser response_template --reasoning-parser response_template",
}
MISSING = "response_template is required"
NO_TOOL_CALLS = "response_template has no 'tool_calls' field"
TOOL_CALLS_NEED_OPEN = ("response_template field 'tool_calls' needs 'open' or 'open_pattern' so tool calls can "
                        "be told apart from other text")
REQUEST_STATUS = 400
_PASSTHROUGH = "normal"


@dataclass(frozen=True)
class SGLangVerdict:
    """Predicted behaviour of an SGLang 0.5.23 server with one configuration."""

    outcome: SGLangOutcome
    error: str | None  # the exception that stops the server, or the refused requests' error.message
    http_status: int | None = None  # of chat requests with tools, when they are refused


class _Refused(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.type_error = not isinstance(error, ValueError)  # TypeError: not swallowed at start-up


def _load(spec: Any) -> Any:
    try:
        return load_template(spec)
    except (TypeError, ValueError) as error:
        raise _Refused(error) from None


def _check_serving_fields(loaded: Any) -> None:
    try:
        check_serving(loaded)
    except ValueError as error:
        raise _Refused(error) from None
    tool_calls = loaded.fields.get("tool_calls")
    if tool_calls is not None and tool_calls.open.compiled is None:
        raise _Refused(ValueError(TOOL_CALLS_NEED_OPEN))


def _optional(fields: dict) -> dict:
    return {name: {**copy.deepcopy(spec), "optional": True} for name, spec in fields.items()}


def _anchored(template: dict, fields: dict) -> dict:
    anchor = "start_anchor_pattern" if "start_anchor_pattern" in template else "start_anchor"
    return {anchor: template[anchor], "fields": fields}


def _derive(template: dict) -> set[str]:
    """`_derive_serving_templates_from_json`: every variant loaded; the source template's fields."""
    loaded = _load(template)
    _check_serving_fields(loaded)
    fields, source = template["fields"], set(loaded.fields)
    answer_opens = "content" in loaded.fields and loaded.fields["content"].open.compiled is not None
    _load(streaming_template(template))
    if "thinking" in source:
        _load(_anchored(template, _optional({"thinking": fields["thinking"]})))
        if answer_opens:
            reasoning_to_answer = {"thinking": fields["thinking"], _PASSTHROUGH: {}, "content": fields["content"]}
            if "tool_calls" in source:
                reasoning_to_answer["tool_calls"] = fields["tool_calls"]
            _load(_anchored(template, _optional(reasoning_to_answer)))
    if "tool_calls" in source:
        tool_calls = {**copy.deepcopy(fields["tool_calls"]), "optional": True}
        if tool_calls.pop("transform_each", False):
            tool_calls["transform"] = {"members": "{content}"}
        _load(_anchored(template, {_PASSTHROUGH: {}, "tool_calls": tool_calls}))
        if answer_opens:
            answer_fields = {name: fields[name] for name in ("thinking", "content") if name in source}
            _load(_anchored(template, {_PASSTHROUGH: {}, "tool_calls": tool_calls, **_optional(answer_fields)}))
    return source


def sglang_verdicts(template: dict | None) -> dict[str, SGLangVerdict]:
    """SGLang 0.5.23's behaviour per configuration for a resolved template (a dict, or None when absent)."""
    refused: _Refused | None
    try:
        if template is None:
            raise _Refused(ValueError(MISSING))
        fields, refused = _derive(template), None
    except _Refused as error:
        fields, refused = set(), error
    start_error = str(refused) if refused is not None else None
    tools_start = start_error if refused is not None and refused.type_error else None
    request_error = start_error or (None if "tool_calls" in fields else NO_TOOL_CALLS)

    def tools(start: str | None) -> SGLangVerdict:
        if start is not None:
            return SGLangVerdict("refuses_to_start", start)
        if request_error is not None:
            return SGLangVerdict("starts_but_refuses_tool_requests", request_error, REQUEST_STATUS)
        return SGLangVerdict("starts", None)

    return {
        "tool_call_parser_hf": tools(tools_start),
        "reasoning_parser_hf": SGLangVerdict("refuses_to_start", start_error) if start_error
        else SGLangVerdict("starts", None),
        "both": tools(start_error),
    }


PREDICTOR = Predictor("sglang_0_5_23", "SGLang 0.5.23", "outcome", lambda facts: sglang_verdicts(facts.template))  # from its code
