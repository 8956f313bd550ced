"""Differential test: the audit's `vllm_0_33` verdicts equal what vLLM 0.33's own code decides.

0.33 cannot be imported next to 0.32: its functions run in one worker process under the hf-0.33
profile's PYTHONPATH (the overlay, `VllmCpuOverlay`, built on first use), asked the same way as
0.32 in-process (tests/vllm_decides.py): every real fixture and the whole mutation corpus in one
batch, then hypothesis's templates one by one. The same answers show that 0.33's new parser
combinations need no configuration of their own (conformance/audit/predictors/vllm_033.py). Then the real 0.33 server
(the hf-0.33 profile with each configuration's flags) on the fixture variants where 0.33's verdict
reads differently (no template: engine and frontend) or where its engine refuses (both fail fast), and
the test pool's hf-0.33 server on the full variant (the one that starts).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from conformance.audit.predictors import vllm_033 as audit_033
from conformance.audit.predictors.vllm_032 import CONFIGURATIONS
from conformance.audit.template_rules import analyze_template_unbounded
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.launch import Server
from conformance.servers.profiles import PROFILES
from tests.audit_helpers import GENERATED_TEMPLATES, fixture_tokenizer_configs, mutation_corpus
from tests.startup_attempts import StartupAttempts, assert_started_as_predicted
from tests.vllm_decides import STARTUPS, DecisionWorker, as_verdicts, overlay_worker

pytestmark = pytest.mark.vllm

# Start-ups outside CONFIGURATIONS that 0.33 accepts or words differently than 0.32.
MIXED = {"hf_reasoning_hermes_tools": ("hermes", "hf", True), "hf_reasoning_hermes_tools_no_auto": ("hermes", "hf", False)}
BEAM = {"tool_call_parser_hf": ("beam", None, True), "reasoning_parser_hf": (None, "beam", False),
        "both": ("beam", "beam", True)}
ASKED = {**STARTUPS, **MIXED, **{f"beam/{name}": startup for name, startup in BEAM.items()}}
CASES = [*sorted(fixture_tokenizer_configs().items()), *mutation_corpus()]


@pytest.fixture(scope="module")
def worker():
    worker = overlay_worker("0.33.0", ASKED)  # the overlay's vLLM, not this venv's 0.32
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def answers(worker: DecisionWorker) -> dict[str, dict[str, str | None]]:
    """vLLM 0.33's errors per start-up for every fixture and corpus template, asked in one batch."""
    return dict(zip([case_id for case_id, _ in CASES], worker.errors([config for _, config in CASES]), strict=True))


def _configurations(errors: dict[str, str | None]) -> dict[str, str | None]:
    return {name: errors[name] for name in STARTUPS}


def test_fixture_and_corpus_prediction_equals_vllm_033(answers) -> None:
    disagreements = {}
    for case_id, tokenizer_config in CASES:
        ours, theirs = analyze_template_unbounded(tokenizer_config).vllm_0_33, as_verdicts(_configurations(answers[case_id]))
        if ours != theirs:
            disagreements[case_id] = {"ours": ours, "vllm 0.33": theirs}
    assert not disagreements, disagreements
    assert len(CASES) > 500
    seen = {error for errors in answers.values() for error in _configurations(errors).values()}
    # the corpus reaches 0.33's own texts, in the engine and in the frontend
    assert {None, audit_033.ENGINE_MISSING, audit_033.frontend_missing(reasoning=False, tools=True)} <= seen


def test_the_new_parser_combinations_need_no_configuration_of_their_own(answers) -> None:
    """`--reasoning-parser hf --tool-call-parser hermes` without auto tool choice is `--reasoning-parser hf`;
    with it, no template makes it start; `beam` decides as `hf` does, naming its own flags."""
    combined = "--reasoning-parser hf and --tool-call-parser hermes cannot be combined"
    for case_id, _ in CASES:
        errors = answers[case_id]
        assert errors["hf_reasoning_hermes_tools_no_auto"] == errors["reasoning_parser_hf"], case_id
        assert errors["hf_reasoning_hermes_tools"] in (combined, errors["reasoning_parser_hf"]), case_id
        for name in BEAM:
            hf = errors[name] and errors[name].replace("-parser hf", "-parser beam")
            assert errors[f"beam/{name}"] == hf, case_id
    assert any(errors["hf_reasoning_hermes_tools"] == combined for errors in answers.values())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=GENERATED_TEMPLATES)
def test_generated_templates_prediction_equals_vllm_033(worker: DecisionWorker, template: object) -> None:
    tokenizer_config = {"response_template": template}
    (errors,) = worker.errors([tokenizer_config])
    assert analyze_template_unbounded(tokenizer_config).vllm_0_33 == as_verdicts(_configurations(errors))


def _hf_033(configuration: str):
    hf_033 = PROFILES["hf-0.33"]
    return dataclasses.replace(hf_033, launch=dataclasses.replace(hf_033.launch,
                                                                  flags=tuple(CONFIGURATIONS[configuration].split())))


def _verdict(model: Path, configuration: str):
    return analyze_template_unbounded(json.loads((model / "tokenizer_config.json").read_text())).vllm_0_33[configuration]


STARTUPS_033 = [("no-template", "both"), ("no-template", "reasoning_parser_hf"), ("no-template", "tool_call_parser_hf"),
                ("reasoning-content", "both")]


@pytest.fixture(scope="module")
def startups_033(tmp_path_factory: pytest.TempPathFactory) -> StartupAttempts:
    """hf-0.33 with each configuration's flags on each variant, all started together."""
    models = {variant: build_fixture(tmp_path_factory.mktemp("startups-033") / variant, variant)
              for variant, _ in STARTUPS_033}
    return StartupAttempts({(variant, configuration): (_hf_033(configuration), models[variant])
                            for variant, configuration in STARTUPS_033}, tmp_path_factory.mktemp("startup-logs-033"))


@pytest.mark.parametrize(("variant", "configuration"), STARTUPS_033)
def test_the_033_audit_predicts_what_the_real_033_server_does(startups_033: StartupAttempts, variant: str,
                                                               configuration: str) -> None:
    _, model = startups_033.attempts[(variant, configuration)]
    assert_started_as_predicted(startups_033.outcome((variant, configuration)), _verdict(model, configuration))


def test_the_pooled_033_server_starts_as_predicted(hf_033_server: Server) -> None:
    """The test pool's hf-0.33 server (started for the other real-tier tests anyway) runs with `both`."""
    assert hf_033_server.version == "0.33.0"
    assert " ".join(hf_033_server.profile.launch.flags) == CONFIGURATIONS["both"]
    assert _verdict(Path(hf_033_server.model), "both").starts
