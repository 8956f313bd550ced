"""The request side (fast tier): each client idiom sends exactly the body of its case in
cases/client_idioms.yaml (captured on a loopback replay server), and hands its caller the client's
own error, carrying the server's message, when that body is refused."""

from __future__ import annotations

import json

import pytest

from conformance.clients.idioms import IDIOMS, idiom_body, run_idioms
from conformance.clients.replay_server import Answer, running
from conformance.suite.cases import load_suite

CASES = {case.id: case for case in load_suite() if "client_idiom" in case.features}


def answered(case_id: str) -> Answer:
    """A 200 answer with one call of the case's first tool."""
    name = CASES[case_id].request["tools"][0]["function"]["name"]
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": '{"city": "Paris"}'}}
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "model", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    return Answer(200, "application/json", (json.dumps(body).encode(),))


def refused(case_id: str) -> Answer:
    error = CASES[case_id].expect["hf"].error
    body = {"error": {"message": error.message, "type": "BadRequestError", "param": error.param, "code": error.status}}
    return Answer(error.status, "application/json", (json.dumps(body).encode(),))


@pytest.fixture(scope="module")
def runs():
    with running() as server:
        requests = {case_id: case.request for case_id, case in CASES.items()}
        ok = run_idioms(server, requests, {case_id: answered(case_id) for case_id in CASES})
        no = run_idioms(server, requests, {case_id: refused(case_id) for case_id in CASES})
    return ok, no


def test_every_idiom_case_has_an_idiom_and_every_client_has_idioms():
    assert {idiom.case_id for idiom in IDIOMS} == set(CASES)
    assert {idiom.client for idiom in IDIOMS} == {"openai-python", "langchain-openai", "litellm", "ai-sdk"}


def test_each_idiom_sends_exactly_its_cases_body(runs):
    ok, _ = runs
    assert len(ok) == len(IDIOMS)
    for run in ok:
        assert run.sent == idiom_body(CASES[run.idiom.case_id].request), run.idiom.name
        assert not run.raised and "Paris" in run.surfaced, (run.idiom.name, run.surfaced)


def test_a_refused_idiom_raises_the_clients_error_with_the_servers_message(runs):
    _, no = runs
    assert len(no) == len(IDIOMS)
    for run in no:
        assert run.raised, run.idiom.name
        assert CASES[run.idiom.case_id].expect["hf"].error.message in run.surfaced, (run.idiom.name, run.surfaced)


def test_the_clients_command_records_what_each_idiom_hands_its_caller(tmp_path):
    from client_samples import write_recording
    from engine_helpers import error_transcript

    from conformance.cli import main
    from conformance.clients.record import CLIENTS_FILE, read_recording

    case = CASES["client-idiom-tool-choice-required"]
    error = case.expect["hf"].error
    transcript = error_transcript(400, {"error": {"message": error.message, "param": error.param, "code": 400}})
    transcript.case_id, transcript.request = case.id, {"model": "tiny", **case.request}
    assert main(["clients", str(write_recording(tmp_path, [transcript]))]) == 0
    _, _, idioms = read_recording(tmp_path / CLIENTS_FILE)
    assert sorted(i.client for i in idioms) == ["ai-sdk", "langchain-openai", "litellm"]
    assert all(i.raised and error.message in i.surfaced and i.status == 400 for i in idioms)
    assert all(i.sent == idiom_body(case.request) for i in idioms)
    report = (tmp_path / "clients.md").read_text()
    assert "## Client idioms: what the caller gets" in report and '| LangChain bind_tools(tool_choice="required") |' in report
