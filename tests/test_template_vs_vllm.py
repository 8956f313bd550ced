"""Differential test: the audit's verdicts equal what vLLM 0.32's own code decides.

For every real fixture and every template of the generated mutation corpus, vLLM's functions are called
in-process with a minimal tokenizer stand-in (tests/vllm_decides.py): the engine-config step
(`ResponseTemplateReasoningParser`, which runs `_serving_template`) and the frontend step
(`ParserManager.get_parser` -> `_compose_parser` -> `validate_tokenizer_response_template`, then the
parser instantiation). No server is needed.
The stand-in is itself checked: for every variant of the tiny checkpoint, vLLM's decision with the real
tokenizer (loaded by vLLM's `get_tokenizer`) equals `audit_local` of the directory. Hypothesis adds
templates the corpus did not think of.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import regex
from hypothesis import HealthCheck, given, settings

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.template_rules import analyze_template_unbounded
from conformance.audit.template_worker import predict_vllm_startup
from conformance.formats.tiny_checkpoint import VARIANTS, build_fixture
from tests.audit_helpers import GENERATED_TEMPLATES, QWEN3_STYLE, fixture_tokenizer_configs, mutation_corpus
from tests.vllm_decides import vllm_decides, vllm_decides_for

pytestmark = pytest.mark.vllm


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


@pytest.mark.parametrize("variant", VARIANTS)
def test_audit_local_equals_vllm_with_the_real_tokenizer(variant: str, tmp_path: Path) -> None:
    from vllm.tokenizers import get_tokenizer

    directory = build_fixture(tmp_path / variant, variant)
    audit = audit_local(directory)
    assert audit.status == "ok"
    assert audit.vllm_0_32 == vllm_decides_for(get_tokenizer(str(directory)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=GENERATED_TEMPLATES)
def test_generated_templates_prediction_equals_vllm(template: object) -> None:
    tokenizer_config = {"response_template": template}
    assert analyze_template_unbounded(tokenizer_config).vllm_0_32 == vllm_decides(tokenizer_config)


@pytest.mark.parametrize("content_args", [
    {}, {"tag_pattern": "<(?P<name>\\w+)>(?P<value>.*?)</(?P=name)>"}, {"tag_pattern": "<(?P<key>\\w+"},
    {"tag_pattern": "<(?P<key>\\w+)>(?P<value>.*?)</(?P=key)>"},
])
def test_a_bad_tag_pattern_finding_means_vllm_fails_on_parsing(content_args: dict) -> None:
    """The loader lets xml-inline tag_pattern problems by; vLLM's parser trips over them on the first response."""
    from vllm.parser.chat_parsing import parse_response

    template = {**QWEN3_STYLE, "fields": {**QWEN3_STYLE["fields"], "tool_calls": {
        "open": "<tool_call>", "close": "</tool_call>", "content": "xml-inline", "content_args": content_args}}}
    findings = analyze_template_unbounded({"response_template": template}).findings
    try:
        parse_response("<|im_start|>assistant\n<tool_call><city>Paris</city></tool_call>", template, prefix="")
        vllm_fails = False
    except (ValueError, regex.error):
        vllm_fails = True
    assert [finding.code for finding in findings] == (["bad-tag-pattern"] if vllm_fails else [])
