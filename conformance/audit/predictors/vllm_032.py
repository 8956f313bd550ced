"""vLLM 0.32's start-up verdicts for a checkpoint's `response_template`, and its Rust frontend's.

The Python frontend's rules follow `vllm/parser/response_template.py` / `parser_manager.py` statement by
statement, so the messages are vLLM's own (contract sections 1.4 and 6); `tests/test_template_vs_vllm.py`
proves the agreement against vLLM's code. vLLM 0.33 applies the same rules with other texts for a
missing template (`predictors/vllm_033.py`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from conformance.audit.predictors.predictor import Predictor
from conformance.audit.predictors.vllm_rs import rust_verdicts
from conformance.formats.response_template import THINKING, TOOL_CALLS

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
# A checkpoint whose config.json says `model_type: gpt_oss` is served through vLLM's harmony parser, which
# takes only its own parsers (vllm/parser/harmony.py, checked at start-up by parser_manager.py's
# validate_parser_tokenizer once the hf parsers themselves were built): the reasoning parser is checked first.
HARMONY_MODEL_TYPES = frozenset({"gpt_oss"})
HARMONY_REASONING = "Harmony requires GptOssReasoningParser, got ResponseTemplateReasoningParser."
HARMONY_TOOLS = "Harmony requires GptOssToolParser, got ResponseTemplateToolParser."


@dataclass(frozen=True)
class StartupVerdict:
    """Predicted outcome of starting vLLM (0.32 or 0.33) with one flag combination."""

    starts: bool
    error: str | None  # vLLM's own innermost message when it does not start


def python_verdicts(template: dict | None, serving_error: str | None, fields: Collection[str],
                    engine_missing: str = MISSING_TEMPLATE,
                    frontend_missing: Callable[[bool, bool], str] = lambda reasoning, tools: MISSING_TEMPLATE,
                    harmony: bool = False) -> dict[str, StartupVerdict]:
    """The first error each configuration hits, in vLLM 0.32's order (contract 1.4), with a release's texts
    for a missing template (the engine's; the frontend's given whether it validates for reasoning, tools);
    `harmony`: the checkpoint is served through the harmony parser, which then refuses the hf parsers.

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

    engine = engine_error(template, serving_error, engine_missing)
    errors = {
        "tool_call_parser_hf": frontend(reasoning=False, tools=True) or (HARMONY_TOOLS if harmony else None),
        "reasoning_parser_hf": engine or frontend(reasoning=True, tools=False) or (HARMONY_REASONING if harmony else None),
        "both": engine or frontend(reasoning=True, tools=True) or (HARMONY_REASONING if harmony else None),
    }
    return {name: StartupVerdict(starts=error is None, error=error) for name, error in errors.items()}


def engine_error(template: dict | None, serving_error: str | None, missing: str = MISSING_TEMPLATE) -> str | None:
    """What the engine configuration says about the template with `--reasoning-parser hf`."""
    return missing if template is None else serving_error


PREDICTORS = (
    Predictor("vllm_0_32", "vLLM 0.32", "startup", lambda facts: python_verdicts(
        facts.template, facts.serving_error, facts.fields, harmony=facts.model_type in HARMONY_MODEL_TYPES)),
    Predictor("vllm_0_32_rust", "vllm-rs 0.32", "outcome", lambda facts: rust_verdicts(
        facts.raw_template, engine_error(facts.template, facts.serving_error))),  # `vllm-rs serve` (predictors/vllm_rs.py)
)
