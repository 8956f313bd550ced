"""The hf-rust profile (vLLM 0.32's Rust frontend, vllm-rs): its log's telling line (fast tier, recorded
logs), and on the real binary: the whole default case set judged, the request patterns hf refuses,
forcing by token ids, the per-request refusal of a non-literal delimiter pattern, and nothing of
the process tree (the binary and its managed Python engine) left after a stop."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conformance.formats.qwen3_hermes import NON_LITERAL_CLOSE_PATTERN
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.servers.forcing import forcing_extra_body, token_grammar_body
from conformance.servers.launch import Server, ServerStartError, descendant_pids, launch, pid_alive
from conformance.servers.profiles import expectation_for
from conformance.servers.vllm import find_vllm_error
from conformance.servers.vllm_rs import find_vllm_rs_error
from conformance.suite.cases import load_suite

DATA = Path(__file__).with_name("data")
REQUEST_PATTERNS = ("tool-choice-required", "tool-choice-named", "parallel-tool-calls-false", "strict-tool")
END_OF_TURN = 402  # <|im_end|> in the fixture's tokenizer
ADDED_MARKERS = {403: "<think>", 404: "</think>", 405: "<tool_call>", 406: "</tool_call>"}


# -- fast tier: the telling line of a vllm-rs log ------------------------------------------------


def test_a_failure_of_the_frontend_itself_is_the_root_of_its_caused_by_list() -> None:
    log = (DATA / "vllm-rs-frontend-failure.log").read_text()  # recorded: `vllm-rs serve /tmp/nonexistent-model`
    assert find_vllm_rs_error(log) == (
        "tokenizer error: failed to fetch model '/tmp/nonexistent-model': request error: error sending request for "
        "url (https://huggingface.co/api/models//tmp/nonexistent-model/revision/main): client error (Connect): dns "
        "error: failed to lookup address information: Name or service not known")
    assert find_vllm_error(log) is None  # vLLM's finder sees nothing in the frontend's coloured lines


def test_a_failure_of_the_managed_engine_is_the_engines_own_line() -> None:
    log = (DATA / "vllm-rs-engine-failure.log").read_text()  # recorded: `-- --dtype bogus` (excerpt)
    assert find_vllm_rs_error(log) == ("main.py serve: error: argument --dtype: invalid choice: 'bogus' (choose "
                                       "from 'auto', 'bfloat16', 'float', 'float16', 'float32', 'half')")


# -- real vllm-rs -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_rust_run(hf_rust_server: Server, tmp_path_factory: pytest.TempPathFactory):
    target = Target(base_url=hf_rust_server.base_url, model=hf_rust_server.model, profile="hf-rust",
                    version=hf_rust_server.version)
    return run(load_suite(), target, tmp_path_factory.mktemp("hf-rust-run"))


def test_the_default_case_set_runs_on_hf_rust_with_every_result_pass_or_an_allowed_skip(hf_rust_run) -> None:
    results = hf_rust_run.results
    not_passed = [(r.case_id, r.mode, r.outcome, r.skip_kind, r.reason) for r in results
                  if r.outcome != "pass" and not (r.outcome == "skip" and r.skip_allowed and r.skip_kind)]
    assert not_passed == []
    assert len(results) == sum(len(case.modes) for case in load_suite())
    # Forced outputs are verified token by token, except where vllm-rs returns no ids for hidden reasoning.
    forced = [t for t in hf_rust_run.transcripts if t.forced and t.endpoint == "chat" and t.status == 200]
    unverified = {t.case_id for t in forced if t.forcing_problems != []}
    assert forced and unverified == {t.case_id for t in forced if t.request.get("include_reasoning") is False}


def test_the_request_patterns_hf_refuses_are_accepted_by_hf_rust_as_the_cases_record(hf_rust_run) -> None:
    cases = {case.id: case for case in load_suite()}
    results = {(r.case_id, r.mode): r for r in hf_rust_run.results}
    statuses = {(t.case_id, t.mode): t.status for t in hf_rust_run.transcripts}
    for case_id in REQUEST_PATTERNS:
        assert cases[case_id].expect["hf"].error.status == 400  # the Python frontend refuses it
        assert expectation_for(cases[case_id], "hf-rust").error is None  # the Rust frontend answers it
        for mode in ("non-stream", "stream"):
            assert statuses[(case_id, mode)] == 200
            assert results[(case_id, mode)].outcome == "pass", results[(case_id, mode)].reason


def _post(server: Server, path: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(server.root_url + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_grammar_naming_token_ids_forces_added_tokens_where_a_regex_fails(hf_rust_server: Server) -> None:
    text = '<think>\nplan\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    status, answer = _post(hf_rust_server, "/tokenize",
                           {"model": hf_rust_server.model, "prompt": text, "add_special_tokens": False})
    ids = json.loads(answer)["tokens"]
    assert status == 200 and set(ADDED_MARKERS) <= set(ids)
    body = {"model": hf_rust_server.model, "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
            "max_tokens": len(ids) + 8}
    status, answer = _post(hf_rust_server, "/v1/chat/completions", {**body, **token_grammar_body(text, ids)})
    assert status == 200
    assert json.loads(answer)["choices"][0]["token_ids"] == [*ids, END_OF_TURN]  # exactly those ids, then the end
    status, answer = _post(hf_rust_server, "/v1/chat/completions", {**body, **forcing_extra_body(text)})
    assert status == 500, answer  # the regex route: llguidance refuses the added token it let through


def _tree(pid: int) -> dict[int, str]:
    pids = [pid, *descendant_pids(pid)]
    return {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode() for p in pids if pid_alive(p)}


@pytest.mark.vllm
def test_a_non_literal_delimiter_pattern_starts_then_refuses_every_chat_request_and_the_tree_stops(tmp_path) -> None:
    model = build_fixture(tmp_path / "non-literal", "non-literal-pattern")
    with launch("hf-rust", model, log_dir=tmp_path) as server:
        tree = _tree(server.pid)
        requests = [{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
                    {"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 8, "stream": True,
                     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]}]
        answers = [_post(server, "/v1/chat/completions", {"model": server.model, **body}) for body in requests]
    assert any("vllm-rs serve" in command for command in tree.values())
    assert any("vllm.entrypoints.cli.main serve" in command and "--headless" in command for command in tree.values())
    assert [pid for pid in tree if pid_alive(pid)] == []  # the binary and its managed engine, all gone
    for status, answer in answers:
        message = json.loads(answer)["error"]["message"]
        assert status == 500, answer
        assert message.startswith("failed to submit chat request: failed to initialize unified parser `hf`: "
                                  "unsupported response_template: Field 'content': pattern "
                                  f"{json.dumps(NON_LITERAL_CLOSE_PATTERN)} must start with a literal prefix "
                                  "for streaming matching"), message


@pytest.mark.vllm
def test_a_bad_engine_flag_fails_the_start_with_the_engines_own_line(tiny_checkpoint: Path, tmp_path) -> None:
    with pytest.raises(ServerStartError, match="exited with code") as raised:
        with launch("hf-rust", tiny_checkpoint, extra_args=["--dtype", "bogus"], log_dir=tmp_path, timeout=120):
            pytest.fail("the block must not run")
    assert raised.value.server_error.startswith("main.py serve: error: argument --dtype: invalid choice: 'bogus'")
