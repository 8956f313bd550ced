"""Differential test: the audit's verdicts equal what vLLM 0.32's own code decides.

For every real fixture and every template of the generated mutation corpus, vLLM's functions are called
in-process with a minimal tokenizer stand-in (`response_template` attribute and `init_kwargs`, as
transformers exposes them): the engine-config step (`ResponseTemplateReasoningParser`, which runs
`_serving_template`) and the frontend step (`ParserManager.get_parser` -> `_compose_parser` ->
`validate_tokenizer_response_template`, then the parser instantiation). No server is needed.
"""

from __future__ import annotations

import pytest

from conformance.template import StartupVerdict, analyze_template_unbounded, predict_vllm_startup
from tests.audit_helpers import fixture_tokenizer_configs, mutation_corpus

pytestmark = pytest.mark.vllm


class TokenizerStandIn:
    """What vLLM reads from a transformers tokenizer for the hf parser, and little else."""

    def __init__(self, tokenizer_config: dict) -> None:
        self.response_template = tokenizer_config.get("response_template")
        self.init_kwargs = dict(tokenizer_config)

    def get_vocab(self) -> dict[str, int]:
        return {}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(character) for character in text]

    def decode(self, token_ids, **kwargs) -> str:
        return "".join(map(chr, token_ids))


def vllm_decides(tokenizer_config: dict) -> dict[str, StartupVerdict]:
    """vLLM 0.32's decision per configuration, in its startup order (engine config, then frontend)."""
    from vllm.parser.parser_manager import ParserManager
    from vllm.parser.response_template import ResponseTemplateReasoningParser

    tokenizer = TokenizerStandIn(tokenizer_config)

    def engine_config() -> str | None:  # only with --reasoning-parser hf
        try:
            ResponseTemplateReasoningParser(tokenizer)
        except (TypeError, ValueError) as exc:
            return str(exc)
        return None

    def frontend(tools: bool, reasoning: bool) -> str | None:
        try:
            ParserManager.get_parser(
                tool_parser_name="hf" if tools else None, reasoning_parser_name="hf" if reasoning else None,
                enable_auto_tools=tools, model_name="checkpoint", tokenizer=tokenizer,
            )
        except TypeError as exc:
            return str(exc)
        return None

    errors = {
        "tool_call_parser_hf": frontend(tools=True, reasoning=False),
        "reasoning_parser_hf": engine_config() or frontend(tools=False, reasoning=True),
        "both": engine_config() or frontend(tools=True, reasoning=True),
    }
    return {name: StartupVerdict(starts=error is None, error=error) for name, error in errors.items()}


def vllm_loader_error(tokenizer_config: dict) -> str | None:
    from vllm.parser.chat_parsing.response_templates import load_response_template

    try:
        load_response_template(tokenizer_config["response_template"])
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


CORPUS = mutation_corpus()


@pytest.mark.parametrize("repo", sorted(fixture_tokenizer_configs()))
def test_fixture_prediction_equals_vllm(repo: str) -> None:
    tokenizer_config = fixture_tokenizer_configs()[repo]
    assert predict_vllm_startup(tokenizer_config) == vllm_decides(tokenizer_config)


def test_corpus_prediction_equals_vllm() -> None:
    disagreements = {}
    for case_id, tokenizer_config in CORPUS:
        ours, theirs = analyze_template_unbounded(tokenizer_config).vllm_0_32, vllm_decides(tokenizer_config)
        if ours != theirs:
            disagreements[case_id] = {"ours": ours, "vllm": theirs}
    assert not disagreements, disagreements
    assert len(CORPUS) > 400


def test_corpus_load_errors_equal_vllm_loader() -> None:
    """`response_template.valid/error` is the loader's verdict, message for message."""
    for case_id, tokenizer_config in CORPUS:
        if not isinstance(tokenizer_config.get("response_template"), dict):
            continue
        analysis = analyze_template_unbounded(tokenizer_config)
        expected = vllm_loader_error(tokenizer_config)
        assert (analysis.valid, analysis.error) == (expected is None, expected), case_id


def test_corpus_covers_every_outcome() -> None:
    """The corpus is only a proof if it exercises each kind of decision vLLM makes."""
    seen = {verdict.error.split(":")[0] if verdict.error else "starts"
            for _, config in CORPUS for verdict in vllm_decides(config).values()}
    for expected in ("starts", "The hf parser requires `response_template` metadata in the tokenizer configuration",
                     "Invalid response_template metadata", "Unsupported response_template version",
                     "--reasoning-parser hf requires a response_template with a thinking field",
                     "--tool-call-parser hf requires a response_template with a tool_calls field",
                     "response_template contains unsupported semantic fields",
                     "unhashable type"):
        assert expected in seen, expected
