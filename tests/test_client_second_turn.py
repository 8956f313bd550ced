"""The real clients' turn 2 of a tool loop (fast tier): each library runs its documented loop against
the loopback replay server, which captures the turn-2 body it really sends; what each sends back of
the server's assistant message (reasoning, content, arguments, extra fields) is asserted as measured."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from conformance.clients.node_ai_sdk import NODE_PROJECT_ENV
from conformance.clients.replay_server import Answer, running
from conformance.clients.second_turn import CLIENT_REBUILDERS, unavailable
from conformance.run.second_turn import TurnBody, TurnJob, answer_message

SYSTEM, USER = {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather and time in Zürich?"}
TOOLS = [{"type": "function", "function": {"name": name, "description": f"The {name}.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}} for name in ("get_weather", "get_time")]
REQUEST = {"messages": [SYSTEM, USER], "tools": TOOLS, "max_tokens": 64}


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def answer(**message: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "tool_calls"}]}


JOBS = {job.key: job for job in (
    # vLLM 0.32 answers reasoning under `reasoning`; compact arguments with a non-ASCII character
    TurnJob("reasoning", REQUEST, answer(content=None, reasoning="Look it up.",
                                         tool_calls=[call("call_r1", "get_weather", '{"city":"Zürich"}')]), ("sunny",)),
    TurnJob("reasoning_content", REQUEST, answer(content=None, reasoning_content="Look it up.", refusal=None,
                                                 tool_calls=[call("call_c1", "get_weather", '{"city": "Bern"}')]),
            ("rain",)),
    TurnJob("parallel", {**REQUEST, "tool_choice": "required"}, answer(content="", tool_calls=[
        call("call_p1", "get_weather", '{"city": "Zürich"}'), call("call_p2", "get_time", '{"city": "Bern"}')]),
            ("sunny", "noon")),
    TurnJob("content-absent", REQUEST, answer(tool_calls=[call("call_a1", "get_time", '{"city": "Bern"}')]), ("noon",)),
    TurnJob("no-id", REQUEST, answer(content=None, tool_calls=[call(None, "get_weather", '{"city": "Bern"}')]),
            ("mist",)),
    TurnJob("not-json", REQUEST, answer(content=None, tool_calls=[call("call_n1", "get_weather", '{"city": Bern')]),
            ("snow",)),
    TurnJob("arguments-object", REQUEST,
            answer(content=None, tool_calls=[call("call_o1", "get_weather", {"city": "Bern"})]), ("fog",)),
    TurnJob("no-choices", REQUEST, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
                                    "choices": []}, ("hail",)),
)}
CLIENTS = tuple(CLIENT_REBUILDERS)
# openai-python warns while it serializes arguments sent as a JSON object (it sends them as they are)
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


@pytest.fixture(scope="module")
def bodies() -> dict[str, dict[str, TurnBody]]:
    """Per client, its turn-2 body for every job (one run each; the AI SDK in one Node batch)."""
    return {client: dict(CLIENT_REBUILDERS[client](list(JOBS.values())))
            for client in CLIENTS if unavailable(client) is None}


def sent(bodies: dict[str, dict[str, TurnBody]], client: str, key: str) -> dict[str, Any]:
    if client not in bodies:
        pytest.skip(f"{client} cannot run here: {unavailable(client)}")  # type: ignore[arg-type]
    body = bodies[client][key]
    assert body.error is None and body.body is not None, body.error
    return body.body


def compact(arguments: str) -> str:
    return json.dumps(json.loads(arguments), separators=(",", ":"), ensure_ascii=False)


def spaced(arguments: str) -> str:
    return json.dumps(json.loads(arguments), ensure_ascii=False)


def calls(job: TurnJob, arguments: Any = lambda a: a) -> list[dict[str, Any]]:
    return [call(c["id"], c["function"]["name"], arguments(c["function"]["arguments"]))
            for c in answer_message(job.answer)["tool_calls"]]


def expected_assistant(client: str, key: str) -> dict[str, Any]:
    """The assistant message each client was measured to send back for a job."""
    job, sent_message = JOBS[key], answer_message(JOBS[key].answer)
    if client == "openai-python":  # the server's message field for field
        return sent_message
    if client == "langchain-openai":  # no reasoning, content null, arguments re-serialized by json.dumps
        return {"role": "assistant", "content": None, "tool_calls": calls(job, spaced)}
    reasoning = sent_message.get("reasoning") or sent_message.get("reasoning_content")
    if client == "litellm":  # reasoning_content; a null content left out; the server's `reasoning` kept aside
        message = {"role": "assistant", "tool_calls": calls(job), "reasoning_content": reasoning}
        if sent_message.get("content") is not None:
            message["content"] = sent_message["content"]
        if "reasoning" in sent_message:
            message["provider_specific_fields"] = {"reasoning": reasoning}
        return {k: v for k, v in message.items() if v is not None}
    message = {"role": "assistant", "content": None, "tool_calls": calls(job, compact)}  # the AI SDK
    return message | ({"reasoning_content": reasoning} if reasoning else {})


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("key", ["reasoning", "reasoning_content", "parallel", "content-absent"])
def test_turn_two_holds_the_user_turn_the_rebuilt_assistant_message_and_the_tool_results(bodies, client, key):
    job, body = JOBS[key], sent(bodies, client, key)
    messages = body["messages"]
    assert messages[:2] == [SYSTEM, USER]
    assert messages[2] == expected_assistant(client, key)
    tool_calls = answer_message(job.answer)["tool_calls"]
    tool_messages = [{"role": "tool", "tool_call_id": c["id"], "content": result}
                     | ({"name": c["function"]["name"]} if client == "litellm" else {})  # LiteLLM's documented loop
                     for c, result in zip(tool_calls, job.tool_results)]
    assert messages[3:] == tool_messages
    assert body["tools"] == TOOLS
    # each resends the request's tool_choice; the AI SDK sends "auto" when it had none
    default_choice = {"tool_choice": "auto"} if client == "ai-sdk" else {}
    assert {k: v for k, v in body.items() if k not in ("messages", "tools")} == (
        {"tool_choice": job.request["tool_choice"]} if "tool_choice" in job.request else default_choice)


@pytest.mark.parametrize("client", CLIENTS)
def test_arguments_that_are_not_json(bodies, client):
    """No client raises: openai-python and LiteLLM send them back as they came; LangChain too but, the
    call being in `invalid_tool_calls`, with no tool message; the AI SDK sends `{}` and its own error as
    the tool result (its execute is not called)."""
    messages = sent(bodies, client, "not-json")["messages"]
    arguments = messages[2]["tool_calls"][0]["function"]["arguments"]
    assert arguments == ("{}" if client == "ai-sdk" else '{"city": Bern')
    results = [m["content"] for m in messages[3:]]
    if client == "langchain-openai":
        assert results == []
    elif client == "ai-sdk":
        assert len(results) == 1 and results[0].startswith("AI_InvalidToolInputError: ")
    else:
        assert results == ["snow"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_call_without_id(bodies, client):
    """openai-python sends the null id back (and as tool_call_id); LiteLLM and the AI SDK make one up
    and use it for the tool message; LangChain raises (its ToolMessage refuses a null tool_call_id)."""
    if client == "langchain-openai":
        sent(bodies, client, "reasoning")  # skips a client that cannot run
        no_id = bodies[client]["no-id"]
        assert no_id.body is None and no_id.error.startswith("ValidationError: ") and "tool_call_id" in no_id.error
        return
    messages = sent(bodies, client, "no-id")["messages"]
    call_id = messages[2]["tool_calls"][0]["id"]
    assert (call_id is None) == (client == "openai-python")
    assert messages[3]["tool_call_id"] == call_id and messages[3]["content"] == "mist"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_client_that_raises_before_turn_two_gives_its_error(bodies, client):
    """Arguments sent as a JSON object: LangChain's AIMessage and the AI SDK's response schema refuse
    them; openai-python sends the object back, LiteLLM a JSON string of it. No choices: all raise."""
    sent(bodies, client, "reasoning")  # skips a client that cannot run
    no_choices = bodies[client]["no-choices"]
    assert no_choices.body is None and no_choices.error
    as_object = bodies[client]["arguments-object"]
    if client in ("langchain-openai", "ai-sdk"):
        assert as_object.body is None
        assert as_object.error.startswith("ValidationError: " if client == "langchain-openai" else "AI_APICallError: ")
    else:
        arguments = as_object.body["messages"][2]["tool_calls"][0]["function"]["arguments"]
        assert arguments == ({"city": "Bern"} if client == "openai-python" else '{"city": "Bern"}')


def test_a_client_not_installed_gives_every_job_that_reason(monkeypatch, tmp_path):
    monkeypatch.setenv(NODE_PROJECT_ENV, str(tmp_path))  # a Node project without the AI SDK
    bodies = CLIENT_REBUILDERS["ai-sdk"](list(JOBS.values()))
    assert set(bodies) == set(JOBS)
    assert all(b.body is None and not b.available and b.error and b.error.startswith("ai-sdk is not installed: ")
               for b in bodies.values())


def test_a_slot_answers_its_first_request_then_every_later_one_with_its_second_answer():
    first, then = (Answer(200, "application/json", (json.dumps({"n": n}).encode(),)) for n in (1, 2))
    with running() as server:
        base = server.base_url(server.register(first, then=then))
        got = [json.loads(urllib.request.urlopen(urllib.request.Request(f"{base}/chat/completions", data=b"{}"),
                                                 timeout=10).read()) for _ in range(3)]
    assert got == [{"n": 1}, {"n": 2}, {"n": 2}]


def test_the_client_replay_reads_granular_streams_and_second_turns_too():
    """`conformance clients` replays every recorded chat answer: a stream asked for 3 tokens per delta as a
    stream, a second turn's answer as a non-streaming one, whose history (another client's shapes) is not
    handed to the replaying client (LangChain raised on openai-python's `function_call: null`)."""
    from conformance.clients.replay_run import client_versions, replay
    from tests.engine_helpers import response_transcript, stream_transcript

    head = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    granular = stream_transcript([
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Sun"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "ny."}, "finish_reason": "stop"}]}], case_id="looped")
    granular.mode = "stream@3"
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": None, "refusal": None, "function_call": None, "audio": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sun"}]
    turn2 = response_transcript({"content": "Sunny."}, "stop", case_id="looped", request={"messages": history})
    turn2.mode = "turn2@openai-python"
    clients = ["openai-python", "langchain-openai"]
    findings, failed = replay([granular, turn2], clients, client_versions(clients))
    assert failed == {}
    by_mode = {(f.mode, f.api): f for f in findings}
    assert {api for mode, api in by_mode if mode == "stream@3"} == {
        "openai.create-stream", "openai.stream-helper", "langchain.stream"}
    assert {api for mode, api in by_mode if mode == "turn2@openai-python"} == {"openai.create", "langchain.invoke"}
    assert all(f.outcome == "same" for f in findings), [(f.mode, f.api, f.outcome, f.error) for f in findings]
