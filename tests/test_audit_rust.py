"""The audit's prediction for vLLM 0.32's Rust frontend (fast tier; the real binary: test_audit_rust_vs_vllm_rs.py)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.predictors import rust_literals, rust_regex
from conformance.audit.predictors.vllm_rs import RustVerdict
from conformance.audit.template_rules import analyze_template_unbounded
from conformance.formats.tiny_checkpoint import VARIANTS, build_fixture
from conformance.util import exit_codes
from conformance.util.package_paths import load_schema
from tests.audit_helpers import DELIMITER_PATTERNS, QWEN3_STYLE, mutation_corpus

# What real `vllm-rs serve` 0.32.0 answered to every chat request for this template
# (docs: ../shared/facts/rust-frontend.md, and test_audit_rust_vs_vllm_rs.py on the real server).
NON_LITERAL_CLOSE = "\\s*(?:<\\|im_end\\|>|<\\|endoftext\\|>)"
OBSERVED_500 = ("failed to submit chat request: failed to initialize unified parser `hf`: unsupported "
                "response_template: Field 'content': pattern \"\\\\s*(?:<\\\\|im_end\\\\|>|<\\\\|endoftext\\\\|>)\" "
                "must start with a literal prefix for streaming matching (e.g. `<tool_call>` in "
                "`<tool_call>(?P<name>\\w+)`)")


def non_literal_template() -> dict:
    template = copy.deepcopy(QWEN3_STYLE)
    template["fields"]["content"] = {"close_pattern": NON_LITERAL_CLOSE}
    return template


def test_a_non_literal_delimiter_starts_but_refuses_every_request() -> None:
    analysis = analyze_template_unbounded({"response_template": non_literal_template()})
    assert analysis.vllm_0_32["both"].starts  # the Python frontend serves it
    assert analysis.vllm_0_32_rust["both"] == RustVerdict("starts_but_refuses_requests", OBSERVED_500, 500)


def test_the_rust_frontend_serves_the_tiny_checkpoints_template() -> None:
    verdicts = analyze_template_unbounded({"response_template": QWEN3_STYLE}).vllm_0_32_rust
    assert verdicts["both"] == RustVerdict("starts", None)
    assert verdicts["tool_call_parser_hf"].outcome == "starts_but_refuses_requests"
    assert verdicts["tool_call_parser_hf"].error.endswith("resolved tool=hf, reasoning=none")
    assert verdicts["reasoning_parser_hf"].error.endswith("resolved tool=none, reasoning=hf")


def test_a_template_the_python_engine_refuses_stops_the_rust_server_with_the_engines_message() -> None:
    analysis = analyze_template_unbounded({"response_template": {**QWEN3_STYLE, "version": 2}})
    for name in ("both", "reasoning_parser_hf"):  # the two that forward --reasoning-parser hf to the engine
        assert analysis.vllm_0_32_rust[name] == RustVerdict("refuses_to_start", "Unsupported response_template version: 2")
    assert analysis.vllm_0_32_rust["tool_call_parser_hf"].outcome == "starts_but_refuses_requests"


ACCEPTED = {"open-optional-newline", "open-alternation", "open-case-insensitive", "open-counted", "open-class-prefix"}


@pytest.mark.parametrize("kind", sorted(DELIMITER_PATTERNS))
def test_delimiter_patterns_of_the_corpus(kind: str) -> None:
    """Each delimiter mutation on the thinking field of the tiny checkpoint's template: the Python
    frontend serves all of them; the Rust one only those whose matches start with a literal."""
    corpus = dict(mutation_corpus(random_cases=0))
    analysis = analyze_template_unbounded(corpus[f"qwen3-style/thinking-{kind}"])
    assert analysis.vllm_0_32["both"].starts
    verdict = analysis.vllm_0_32_rust["both"]
    if kind in ACCEPTED:
        assert verdict == RustVerdict("starts", None)
    else:
        assert verdict.outcome == "starts_but_refuses_requests" and verdict.http_status == 500
        assert verdict.error.startswith("failed to submit chat request: failed to initialize unified parser `hf`: "
                                        "unsupported response_template: Field 'thinking': ")


@pytest.mark.parametrize("pattern, prefixes", [  # the frontend's own test vectors (rust/.../hf/pattern.rs)
    (r"<\|tool_call>call:(?P<name>\w+)", ["<|tool_call>call:"]),
    (r'<atem:invoke\b[^>]*?\bname="(?P<name>[^"]+)">', ["<atem:invoke"]),
    (r"to=(?:user|commentary)<\|message\|>", ["to=user<|message|>", "to=commentary<|message|>"]),
    (r"\n?</response>", ["\n</response>", "</response>"]),
    (r"(?:^|<think>\s*)", None), (r"(?:<\|m\|>)?[^<]*<\|c\|>", None), (r".*x", None),
])
def test_literal_prefixes_follow_the_frontend(pattern: str, prefixes: list[str] | None) -> None:
    assert rust_literals.literal_prefixes(rust_regex.parse(pattern)) == prefixes


def test_regex_errors_read_as_regex_syntax_writes_them() -> None:
    with pytest.raises(rust_regex.RustRegexError) as error:
        rust_regex.parse("[z-a]")
    assert str(error.value) == ("regex parse error:\n    [z-a]\n     ^^^\n"
                                "error: invalid character class range, the start must be <= the end")
    with pytest.raises(rust_regex.RustRegexError, match="nested parentheses/brackets"):
        rust_regex.parse("(" * 5000 + ")" * 5000)  # deep nesting is an error, never a crash


def test_the_reports_carry_the_rust_verdicts(tmp_path: Path) -> None:
    directory = tmp_path / "non-literal"
    directory.mkdir()
    (directory / "tokenizer_config.json").write_text(json.dumps({"response_template": non_literal_template()}))
    markdown = tmp_path / "audit.md"
    completed = subprocess.run([sys.executable, "-m", "conformance", "audit", "--local", str(directory),
                                "--json", "-", "--markdown", str(markdown)], capture_output=True, text=True)
    assert completed.returncode == exit_codes.OK, completed.stderr
    report = json.loads(completed.stdout)
    jsonschema.validate(report, load_schema("audit-report.schema.json"))
    checkpoint = report["checkpoints"][0]
    assert checkpoint["vllm_0_32"]["both"] == {"starts": True, "error": None}  # today's consumers are unchanged
    assert checkpoint["vllm_0_32_rust"]["both"] == {"outcome": "starts_but_refuses_requests", "error": OBSERVED_500,
                                                    "http_status": 500}
    assert report["rust_configurations"]["both"] == "--tool-call-parser hf --reasoning-parser hf"
    text = markdown.read_text()
    assert "| 500/500/500 |" in text  # tool, reasoning (each alone), both
    assert "answers every chat request HTTP 500: " in text and "must start with a literal prefix" in text


def test_the_non_literal_pattern_fixture_variant_is_predicted_to_refuse_every_request(tmp_path: Path) -> None:
    """The tiny checkpoint variant the live hf-rust 500 test serves (conformance/formats/tiny_checkpoint.py)."""
    if "non-literal-pattern" not in VARIANTS:
        pytest.skip("the fixture variant non-literal-pattern is added on another branch")
    audit = audit_local(build_fixture(tmp_path / "checkpoint", "non-literal-pattern"))
    verdict = audit.vllm_0_32_rust["both"]
    assert verdict.outcome == "starts_but_refuses_requests" and verdict.http_status == 500
    assert "must start with a literal prefix for streaming matching" in verdict.error
