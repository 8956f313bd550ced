"""Differential test: the audit's `vllm_0_32_rust` verdicts equal what vLLM 0.32's real Rust frontend does.

A verdict has two parts (conformance/audit/predictors/vllm_rs.py): the managed Python engine's configuration step
(`--reasoning-parser hf` only; a refusal stops `vllm-rs serve`), then the frontend's per-request
parser. For every template of the mutation corpus the test asks the real binary's engine-free
`vllm-rs render` for the frontend part (one chat request per template) and vLLM's own engine-config
code in-process for the engine part. Real `vllm-rs serve` servers then show, on a few checkpoints,
that serving combines the two as predicted: a refused engine configuration stops the server with the
engine's message, a refused parser answers every chat request with HTTP 500 and the predicted message.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conformance.audit.predictors.vllm_rs import (
    RUST_CONFIGURATIONS,
    SUBMIT_PREFIX,
    UNIFIED_PREFIX,
    RustVerdict,
    frontend_template_error,
)
from conformance.audit.template_rules import analyze_template_unbounded
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.launch import Server
from conformance.servers.profile import Profile
from conformance.servers.profiles import PROFILES
from conformance.servers.runtimes.vllm_rs import ensure_binary
from tests.audit_helpers import QWEN3_STYLE, mutation_corpus
from tests.server_helpers import chat
from tests.startup_attempts import StartupAttempts
from tests.vllm_decides import TokenizerStandIn
from tests.vllm_rs_render import RenderFrontend

pytestmark = pytest.mark.vllm

CORPUS = mutation_corpus()
FLAGS = {name: tuple(flags.split()) for name, flags in RUST_CONFIGURATIONS.items()}


def engine_refusal(tokenizer_config: dict) -> str | None:
    """vLLM's engine configuration with `--reasoning-parser hf` (what `vllm-rs serve` forwards to it)."""
    from vllm.parser.response_template import ResponseTemplateReasoningParser

    try:
        ResponseTemplateReasoningParser(TokenizerStandIn(tokenizer_config))
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def observed(engine: str | None, status: int, message: str | None, forwards_reasoning: bool) -> RustVerdict:
    if forwards_reasoning and engine is not None:
        return RustVerdict("refuses_to_start", engine)
    if status == 200:
        return RustVerdict("starts", None)
    assert status == 400, (status, message)
    return RustVerdict("starts_but_refuses_requests", SUBMIT_PREFIX + message, 500)


def assert_corpus_agrees(render: RenderFrontend, release: str, engine_error) -> None:
    """For every corpus template with `both` flags: the audit's `release` verdict (e.g. "vllm_0_32_rust")
    equals what the binary's `vllm-rs render` and `engine_error(case_id, tokenizer_config)` (the managed
    engine's refusal, None: accepted) make of it, the frontend's message included."""
    disagreements, outcomes = {}, set()
    for case_id, tokenizer_config in CORPUS:
        status, message = render.answer(tokenizer_config, FLAGS["both"])
        predicted = getattr(analyze_template_unbounded(tokenizer_config), release)["both"]
        actual = observed(engine_error(case_id, tokenizer_config), status, message, True)
        frontend = frontend_template_error(tokenizer_config.get("response_template"))
        outcomes.add(actual.outcome)
        if predicted != actual or (frontend and UNIFIED_PREFIX + frontend) != message:
            disagreements[case_id] = {"predicted": predicted, "vllm-rs": actual, "frontend": frontend,
                                      "render": message}
    assert not disagreements, json.dumps({k: {s: str(v) for s, v in d.items()} for k, d in disagreements.items()},
                                         indent=1)
    assert outcomes == {"starts", "refuses_to_start", "starts_but_refuses_requests"}
    assert len(CORPUS) > 500


@pytest.fixture(scope="module")
def render(tmp_path_factory: pytest.TempPathFactory) -> RenderFrontend:
    base = build_fixture(tmp_path_factory.mktemp("tiny") / "full")
    return RenderFrontend(ensure_binary("0.32.0"), base, tmp_path_factory.mktemp("render"))


def test_corpus_prediction_equals_the_rust_frontend(render: RenderFrontend) -> None:
    """Per template: the verdict, and the frontend's own answer even where the engine stops the server
    first (so the frontend's rules are compared on every template)."""
    assert_corpus_agrees(render, "vllm_0_32_rust", lambda _, tokenizer_config: engine_refusal(tokenizer_config))


@pytest.mark.parametrize("configuration", ["tool_call_parser_hf", "reasoning_parser_hf"])
def test_one_hf_flag_refuses_every_request_whatever_the_template(render: RenderFrontend, configuration: str) -> None:
    forwards_reasoning = configuration == "reasoning_parser_hf"
    for case_id, tokenizer_config in CORPUS[::40]:
        predicted = analyze_template_unbounded(tokenizer_config).vllm_0_32_rust[configuration]
        answer = render.answer(tokenizer_config, FLAGS[configuration])
        assert predicted == observed(engine_refusal(tokenizer_config), *answer, forwards_reasoning), case_id


# Pieces of regex syntax, Python's and Rust's, that generated delimiter patterns are made of.
PATTERN_PIECES = [
    "<", ">", "a", "x", "\\|", "\\s", "\\d", "\\w", ".", "[ab]", "[a-z]", "[^<]", "\\n", "^", "$", "\\b", "(?i)",
    "(?:a|b)", "(?P<n>a)", "(?<m>b)", "(?=a)", "\\1", "{", "}", "(", ")", "[", "\\p{L}", "\\pL", "\\z", "\\Z",
    "\\<", "é", "ſ", "\\x41", "\\u0041", "(?s)", "(?-i:a)", "(?U)a*", "(?x)", "#", " ", "a{2}", "a{1,3}", "a{,2}",
    "a{0}", "(?:)*", "*", "+", "?", "??", "|", "\\.", "\\t", '"', "\\\\", "[[:alpha:]]", "[]a]", "[^]", "\\h",
    "\\e", "\\b{start}", "\\b{2}", "[\\d-z]", "\\Ax",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(PATTERN_PIECES), min_size=1, max_size=6), anchor=st.sampled_from(["open", "close"]))
@example(pieces=["[", "\\b{start}"], anchor="open")  # found: inside a class too, \b{start} is one escape (unclosed)
def test_generated_delimiter_patterns_equal_the_rust_frontend(render: RenderFrontend, pieces: list[str],
                                                              anchor: str) -> None:
    """The frontend's verdict on delimiter patterns the corpus did not think of, message for message."""
    assert_pattern_agrees(render, pieces, anchor)


def assert_pattern_agrees(render: RenderFrontend, pieces: list[str], anchor: str) -> None:
    """The thinking field's `anchor` given as the pattern `pieces` make: the binary's `vllm-rs render`
    answers with the audit's frontend message (none: it accepts)."""
    template = json.loads(json.dumps(QWEN3_STYLE))
    template["fields"]["thinking"] = {"open": "<think>", "close": "</think>"}
    del template["fields"]["thinking"][anchor]
    template["fields"]["thinking"][f"{anchor}_pattern"] = "".join(pieces)
    _, message = render.answer({"response_template": template}, FLAGS["both"])
    frontend = frontend_template_error(template)
    assert (frontend and UNIFIED_PREFIX + frontend) == message


def _non_literal_close() -> dict:
    template = json.loads(json.dumps(QWEN3_STYLE))
    template["fields"]["content"] = {"close_pattern": "\\s*(?:<\\|im_end\\|>|<\\|endoftext\\|>)"}
    return template


SERVED = {  # checkpoint (its response_template, None: none) and configuration, on real `vllm-rs serve`
    "non-literal-close/both": (_non_literal_close(), "both"),
    "full/tool-only": (QWEN3_STYLE, "tool_call_parser_hf"),
    "version-2/both": ({**QWEN3_STYLE, "version": 2}, "both"),
    "no-template/both": (None, "both"),
}


def _chat(running: Server) -> tuple[int, str | None]:
    """(status, error message) of one small chat request to a running server."""
    try:
        chat(running, {"model": running.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        return 200, None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())["error"]["message"]


def _checkpoint_config(directory: Path, template: dict | None) -> tuple[Path, dict]:
    """The tiny checkpoint in `directory` with `template` as its response_template (None: none), and its config."""
    checkpoint = build_fixture(directory)
    config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    config.pop("response_template")
    if template is not None:
        config["response_template"] = template
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(config))
    return checkpoint, config


def _rust_profile(configuration: str) -> Profile:
    rust = PROFILES["hf-rust"]
    return dataclasses.replace(rust, launch=dataclasses.replace(rust.launch, flags=FLAGS[configuration]))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[StartupAttempts, dict[str, dict]]:
    """Every SERVED checkpoint on real `vllm-rs serve`, all started together (as many as memory holds),
    one chat request to each that started; and each checkpoint's tokenizer config."""
    attempts, configs = {}, {}
    for case, (template, configuration) in SERVED.items():
        checkpoint, configs[case] = _checkpoint_config(tmp_path_factory.mktemp("served") / "checkpoint", template)
        attempts[case] = (_rust_profile(configuration), checkpoint)
    return StartupAttempts(attempts, tmp_path_factory.mktemp("served-logs"), while_up=_chat), configs


@pytest.mark.parametrize("case", sorted(SERVED))
def test_real_serve_does_what_was_predicted(case: str, served: tuple[StartupAttempts, dict[str, dict]]) -> None:
    attempts, configs = served
    predicted = analyze_template_unbounded(configs[case]).vllm_0_32_rust[SERVED[case][1]]
    outcome = attempts.outcome(case)
    if not outcome.started:
        assert predicted == RustVerdict("refuses_to_start", outcome.server_error), outcome
        return
    status, message = outcome.asked()
    actual = RustVerdict("starts", None) if status == 200 else RustVerdict("starts_but_refuses_requests", message, status)
    assert predicted == actual
