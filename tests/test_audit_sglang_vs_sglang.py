"""Differential test: the audit's `sglang_0_5_23` verdicts equal what SGLang 0.5.23's own code decides.

SGLang's server cannot run here (CUDA-only kernels), so its start-up and request functions are called in
a child process (`tests/sglang_serving.py`, SGLang's whole wheel from the suite's cache on its path) over
the mutation corpus, the real fixtures, templates aimed at SGLang's own serving rules, and every variant
of the tiny checkpoint read with the real tokenizer.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.implementations.registry import sglang_install
from conformance.audit.predictors.sglang import MISSING, NO_TOOL_CALLS, SGLANG_CONFIGURATIONS, TOOL_CALLS_NEED_OPEN
from conformance.audit.template_rules import analyze_template_unbounded
from conformance.formats.qwen3_hermes import RESPONSE_TEMPLATE_FULL
from conformance.formats.tiny_checkpoint import VARIANTS, build_fixture
from tests.audit_helpers import fixture_tokenizer_configs, mutation_corpus

CHILD = Path(__file__).resolve().parent / "sglang_serving.py"
CHILD_TIMEOUT_S = 600


def sglang_answers(entries: list[dict]) -> dict:
    """SGLang's decisions for tokenizer_configs (or `{"directory": ...}` checkpoints), from its own code, and
    its parser names."""
    environment = {**os.environ, "PYTHONPATH": str(sglang_install())}
    done = subprocess.run([sys.executable, str(CHILD)], input=json.dumps(entries), capture_output=True, text=True,
                          env=environment, timeout=CHILD_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def sglang_decides(entries: list[dict]) -> list[dict]:
    return sglang_answers(entries)["decisions"]


def _template(**fields: dict | None) -> dict:
    template = copy.deepcopy(RESPONSE_TEMPLATE_FULL)
    for name, spec in fields.items():
        if spec is None:
            template["fields"].pop(name)
        else:
            template["fields"][name] = spec
    return template


_TOOL_CALLS = RESPONSE_TEMPLATE_FULL["fields"]["tool_calls"]
_ANSWER = {"open": "<answer>", "close": "</answer>"}
_NAMED_OPENER = {"open_pattern": '<tool_call name="(?P<name>\\w+)">', "close": "</tool_call>", "repeats": True,
                 "content": "json", "transform_each": True,
                 "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}
# SGLang's own serving rules: the tool field's opener, the variants its detectors load, the derived templates.
SGLANG_TEMPLATES = {
    "tool-calls-without-opener": _template(content=_ANSWER, tool_calls={k: v for k, v in _TOOL_CALLS.items() if k != "open"}),
    "implicit-thinking-with-answer-opener": _template(thinking={"close": "</think>"}, content=_ANSWER),
    "implicit-thinking-with-answer-opener-no-tools": _template(thinking={"close": "</think>"}, content=_ANSWER, tool_calls=None),
    "answer-opener": _template(content=_ANSWER),
    "no-content-field": _template(content=None),
    "transform-each": _template(tool_calls={**_TOOL_CALLS, "transform_each": True}),
    "transform-each-named-opener": _template(tool_calls=_NAMED_OPENER),
    "pattern-anchor-answer-opener": {**{k: v for k, v in _template(content=_ANSWER).items() if k != "start_anchor"},
                                     "start_anchor_pattern": "<\\|im_start\\|>assistant\\n"},
    "only-tool-calls": _template(thinking=None, content=None),
    "only-implicit-thinking": _template(thinking={"close": "</think>"}, content=None, tool_calls=None),
}
CASES = [*mutation_corpus(), *sorted(fixture_tokenizer_configs().items()),
         *((name, {"response_template": template}) for name, template in SGLANG_TEMPLATES.items())]


@pytest.fixture(scope="module")
def answers() -> dict:
    return sglang_answers([config for _, config in CASES])


@pytest.fixture(scope="module")
def decisions(answers: dict) -> dict[str, dict]:
    return dict(zip([case_id for case_id, _ in CASES], answers["decisions"]))


def test_the_configurations_name_the_parser_sglang_accepts(answers: dict) -> None:
    for flags in SGLANG_CONFIGURATIONS.values():
        for flag, name in zip(flags.split()[::2], flags.split()[1::2]):
            assert name in answers["tool_call_parsers" if flag == "--tool-call-parser" else "reasoning_parsers"]
    assert "hf" not in answers["tool_call_parsers"] and "hf" not in answers["reasoning_parsers"]


def _predicted(tokenizer_config: dict) -> dict:
    return {name: asdict(verdict) for name, verdict in analyze_template_unbounded(tokenizer_config).sglang_0_5_23.items()}


def test_prediction_equals_sglang_over_the_corpus(decisions: dict[str, dict]) -> None:
    disagreements = {case_id: {"ours": _predicted(config), "sglang": decisions[case_id]}
                     for case_id, config in CASES if _predicted(config) != decisions[case_id]}
    assert not disagreements, disagreements
    assert len(CASES) > 500


def test_the_corpus_covers_every_kind_of_sglang_decision(decisions: dict[str, dict]) -> None:
    """The corpus is only a proof if it exercises each way SGLang decides."""
    seen = {(verdict["outcome"], verdict["http_status"]) for decision in decisions.values() for verdict in decision.values()}
    assert seen == {("starts", None), ("refuses_to_start", None), ("starts_but_refuses_tool_requests", 400)}
    errors = {verdict["error"] for decision in decisions.values() for verdict in decision.values()}
    for message in (MISSING, NO_TOOL_CALLS, TOOL_CALLS_NEED_OPEN, "unhashable type: 'list'",
                    "first argument must be a string or compiled pattern", "Unsupported response_template version: 2"):
        assert message in errors, message
    assert any(error and error.startswith("At most one field may omit") and error.endswith("Found: thinking, normal")
               for error in errors)
    # a TypeError stops even a tool-parser-only server (the detokenizer does not swallow it); a ValueError does not
    tool_only = {decision["tool_call_parser_hf"]["outcome"] for decision in decisions.values()}
    assert tool_only == {"starts", "refuses_to_start", "starts_but_refuses_tool_requests"}


@pytest.fixture(scope="module")
def real_tokenizer_decisions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Every tiny-checkpoint variant, and SGLang's decisions with the real tokenizer (one child process)."""
    directories = [build_fixture(tmp_path_factory.mktemp(variant) / variant, variant) for variant in VARIANTS]
    found = sglang_decides([{"directory": str(directory)} for directory in directories])
    return {variant: (directory, decision) for variant, directory, decision in zip(VARIANTS, directories, found)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_audit_local_equals_sglang_with_the_real_tokenizer(variant: str, real_tokenizer_decisions: dict) -> None:
    directory, decision = real_tokenizer_decisions[variant]
    audit = audit_local(directory)
    assert audit.status == "ok"
    assert {name: asdict(verdict) for name, verdict in audit.sglang_0_5_23.items()} == decision
