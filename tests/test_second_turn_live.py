"""The second turn against real vLLM 0.32 (vllm tier): every shipped second turn, rebuilt by each real client
library (openai-python, LangChain, LiteLLM, the AI SDK) and by the four hand-written ways of sending reasoning
back, from the server's own turn-1 answer, sent to hf and legacy.

Each is accepted and answered as forced; the prompt each server renders for it holds the turn-1 calls as the
chat template writes them; where vLLM reads reasoning is what its profile record says (`reasoning` renders,
`reasoning_content` alone is lost); the recording is judged again offline to the same results; and the two runs
compared as the gate does show the second turn's changed rendering, acknowledged by the shipped expectations.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.clients.second_turn import CLIENT_REBUILDERS, import_libraries
from conformance.record.case_model import rebuilder_of
from conformance.run.checks.second_turn import reasoning_fields_sent
from conformance.run.driver import Target
from conformance.run.engine import recheck, run_async
from conformance.servers.profiles import profile_record
from conformance.suite.cases import load_suite
from tests.second_turn_helpers import REBUILDERS

pytestmark = pytest.mark.vllm

PROFILES = ("legacy", "hf")


@pytest.fixture(scope="module")
def second_turn_runs(hf_server, legacy_server, tmp_path_factory):
    """The second-turn cases on legacy and hf at once (their first turns too), every rebuilder."""
    servers = {"legacy": legacy_server, "hf": hf_server}
    cases = [case for case in load_suite() if case.second_turn is not None]
    directories = {profile: tmp_path_factory.mktemp(profile) for profile in servers}
    import_libraries(CLIENT_REBUILDERS)  # before any request, as the commands do

    async def both():
        return await asyncio.gather(*(
            run_async(cases, Target(base_url=server.base_url, model=server.model, profile=profile, timeout=120),
                      directories[profile], rebuilders=REBUILDERS)
            for profile, server in servers.items()))

    outputs = dict(zip(servers, asyncio.run(both())))
    return cases, outputs, directories


def _second(output) -> list:
    return [t for t in output.transcripts if rebuilder_of(t.mode) is not None]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_client_s_second_turn_is_accepted_and_answered_as_forced(second_turn_runs, profile):
    cases, outputs, _ = second_turn_runs
    results = [r for r in outputs[profile].results if rebuilder_of(r.mode) is not None]
    assert {rebuilder_of(r.mode) for r in results} == set(REBUILDERS)
    assert len(results) == len(cases) * len(REBUILDERS)
    assert all(r.outcome == "pass" for r in results), [(r.name, r.reason) for r in results if r.outcome != "pass"]
    for transcript in _second(outputs[profile]):
        assert transcript.status == 200 and transcript.forcing_problems == [], (transcript.mode, transcript.forcing_problems)
        assert transcript.request["messages"][-1]["role"] == "tool"  # the client's own body, tool results last


@pytest.mark.parametrize("profile", PROFILES)
def test_the_prompt_each_server_renders_holds_the_turn_1_calls(second_turn_runs, profile):
    """As the tiny checkpoint's chat template writes a call: the calls the model wrote, except where the client
    sent hf's cast values back (the model wrote "3", hf answered 3): then those, and the check says why."""
    cases, outputs, _ = second_turn_runs
    written = {case.id: case.written_turn for case in cases}
    results = {(r.case_id, r.mode): r for r in outputs[profile].results}
    cast = []
    for transcript in _second(outputs[profile]):
        sent = transcript.prompts["sent"]
        assistant = next(m for m in transcript.request["messages"] if m.get("role") == "assistant")
        for call, back in zip(written[transcript.case_id].tool_calls, assistant["tool_calls"]):
            as_written = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
            as_sent = json.dumps({"name": call.name, "arguments": json.loads(back["function"]["arguments"])},
                                 ensure_ascii=False)
            assert f"<tool_call>\n{as_sent}\n</tool_call>" in sent, (transcript.case_id, transcript.mode, sent[-400:])
            if as_sent != as_written:
                cast.append(transcript.mode)
                check = next(c for c in results[(transcript.case_id, transcript.mode)].checks
                             if c.name == "second_turn_prompt")
                assert check.kind == "finding" and 'where it wrote {"city": "A", "days": "3"' in check.reason
        assert sent.rstrip().endswith("<|im_start|>assistant")
    # hf casts the string values to the schema's types (every client sends them back so); hermes does not
    assert (len(cast) == len(REBUILDERS)) if profile == "hf" else cast == [], cast


@pytest.mark.parametrize("profile", PROFILES)
def test_vllm_renders_reasoning_sent_back_from_the_fields_its_record_names(second_turn_runs, profile):
    assert profile_record(profile).reasoning_input_fields == ("reasoning", "reasoning_content")
    cases, outputs, _ = second_turn_runs
    reasoned = {case.id for case in cases if case.written_turn.reasoning}
    for transcript in _second(outputs[profile]):
        prompts = transcript.prompts
        assert prompts["sent_from"] == "prompt_token_ids"  # the prompt the answer was generated from
        if transcript.case_id not in reasoned:
            continue
        compact = {name: "".join(text.split()) for name, text in prompts.items()}
        assert compact["reference"] != compact["reference_without_reasoning"]  # the template renders reasoning
        sent_reasoning = bool(reasoning_fields_sent(transcript.request))
        assert compact["sent"] == compact["reference" if sent_reasoning else "reference_without_reasoning"], (
            transcript.mode, prompts["sent"][-300:])
    lost = [c for r in outputs[profile].results if r.mode == "turn2@no-reasoning" and r.case_id in reasoned
            for c in r.checks if c.name == "second_turn_prompt"]
    assert lost and all(c.kind == "finding" and "sent no reasoning back" in c.reason for c in lost)


@pytest.mark.parametrize("profile", PROFILES)
def test_vllm_s_tokenize_renders_reasoning_content_unlike_its_chat_request(second_turn_runs, profile, hf_server,
                                                                          legacy_server):
    """Why the prompt sent is read from the answer's prompt_token_ids: /tokenize does not rename
    `reasoning_content` to `reasoning` as a chat request does (vLLM 0.32), so its rendering drops it."""
    cases, outputs, _ = second_turn_runs
    server = {"hf": hf_server, "legacy": legacy_server}[profile]
    transcript = next(t for t in _second(outputs[profile]) if t.mode == "turn2@reasoning_content"
                      and t.case_id == "turn-reasoning-then-call")
    body = {"model": server.model, "messages": transcript.request["messages"], "tools": transcript.request["tools"],
            "add_generation_prompt": True}
    tokenized = _post(server.base_url.removesuffix("/v1") + "/tokenize", body)["tokens"]
    assert tokenized != transcript.response["prompt_token_ids"]
    assert len(tokenized) < len(transcript.response["prompt_token_ids"])  # the reasoning's tokens are missing


def _post(url: str, body: dict) -> dict:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), {
            "content-type": "application/json"}), timeout=60) as answer:
        return json.loads(answer.read())


def test_what_each_real_client_sends_back_is_recorded_and_judged(second_turn_runs):
    cases, outputs, _ = second_turn_runs
    reasoned = {case.id for case in cases if case.written_turn.reasoning}
    for transcript in _second(outputs["legacy"]):
        if rebuilder_of(transcript.mode) not in CLIENT_REBUILDERS or transcript.case_id not in reasoned:
            continue
        assistants = [m for m in transcript.request["messages"] if m.get("role") == "assistant"]
        assert len(assistants) == 1 and assistants[0]["tool_calls"], transcript.mode
        reasoning = reasoning_fields_sent(transcript.request)
        check = next(c for r in outputs["legacy"].results if (r.case_id, r.mode) == (transcript.case_id, transcript.mode)
                     for c in r.checks if c.name == "second_turn_prompt")
        assert (check.outcome == "pass") == bool(reasoning), (transcript.mode, reasoning, check.reason)
        # measured: openai-python sends `reasoning` back, LiteLLM and the AI SDK `reasoning_content`, LangChain none
        assert reasoning == {"openai-python": ["reasoning"], "litellm": ["reasoning_content"],
                             "ai-sdk": ["reasoning_content"], "langchain-openai": []}[rebuilder_of(transcript.mode)]


@pytest.mark.parametrize("profile", PROFILES)
def test_a_recorded_second_turn_is_judged_again_offline_to_the_same_results(second_turn_runs, profile):
    cases, outputs, _ = second_turn_runs
    again = {(r.case_id, r.mode): (r.outcome, [(c.name, c.outcome) for c in r.checks])
             for r in recheck(outputs[profile].transcripts, cases)}
    recorded = {(r.case_id, r.mode): (r.outcome, [(c.name, c.outcome) for c in r.checks])
                for r in outputs[profile].results}
    assert again == recorded


def test_the_gate_shows_the_second_turn_rendered_differently_and_the_shipped_file_acknowledges_it(
        second_turn_runs, tmp_path: Path):
    _, _, directories = second_turn_runs
    without = tmp_path / "without"
    assert main(["compare", str(directories["legacy"]), str(directories["hf"]), "--no-expect",
                 "--out", str(without)]) == 1
    differences = json.loads((without / "gate.json").read_text())["differences"]
    multi = [d for d in differences if d["kind"] == "multi_turn"]
    assert multi and all(d["field"] == "prompt" and d["mode"].startswith("turn2@") for d in multi)
    assert {d["mode"] for d in multi} >= {"turn2@reasoning", "turn2@openai-python"}
    shipped = tmp_path / "shipped"
    assert main(["compare", str(directories["legacy"]), str(directories["hf"]), "--out", str(shipped)]) == 0
    gate = json.loads((shipped / "gate.json").read_text())
    assert gate["verdict"]["unacknowledged"] == 0
