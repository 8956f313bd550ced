"""The real client libraries' turn 2 of a tool loop (`CLIENT_REBUILDERS`): each runs its documented
two-call loop against the loopback replay server, which answers turn 1 with the server's answer and
captures the turn-2 request the client really sends (answered with a plain "done").

The loops: openai-python appends `completion.choices[0].message` and `{"role": "tool", "tool_call_id",
"content"}` per call; LangChain appends the AIMessage and a `ToolMessage` per `tool_calls` entry and
invokes the bound model again; LiteLLM appends `response.choices[0].message` and its documented tool
message (`tool_call_id`, `role`, `name`, `content`); the AI SDK runs `generateText` with executing tools
and `stopWhen: isStepCount(2)` (v7's name of `stepCountIs`) and sends turn 2 itself. Each sends turn 1's
messages, tools and tool_choice, and turn 2 with the same tools and tool_choice.

Measured (openai 3.63.0, langchain-openai 1.7.4, litellm 1.110.2, ai 7.0.173 with
@ai-sdk/openai-compatible 3.0.92; tests/test_client_second_turn.py asserts each):
- openai-python sends the server's message back field for field: the reasoning under the server's own
  name (`reasoning` or `reasoning_content`), `content` as sent (null, "", or absent), any other field
  the server sent (`refusal: null`...), arguments verbatim (even not JSON, even a JSON object).
- LangChain drops the reasoning (either name); `content: null` with calls (also for "" or absent);
  arguments re-serialized from the parsed JSON by `json.dumps` (", " and ": ", non-ASCII kept:
  '{"city":"Zürich"}' goes back as '{"city": "Zürich"}'); arguments that are not JSON go back raw but,
  the call being in `invalid_tool_calls`, get no tool message; it raises on arguments sent as a JSON
  object (ValidationError) and on a call without id (its ToolMessage refuses a null id).
- LiteLLM sends the reasoning as `reasoning_content` whichever name the server used, plus
  `provider_specific_fields: {"reasoning": ...}` when it was `reasoning`; `content` left out when null
  or absent, "" kept; arguments verbatim (a JSON object as its JSON text); a call without id gets a
  UUID; its documented tool message adds `name`.
- The AI SDK sends the reasoning as `reasoning_content`; `content: null` with calls (also for "");
  arguments re-serialized compact by JSON.stringify ('{"city": "Bern"}' goes back as '{"city":"Bern"}');
  arguments that are not JSON go back as "{}" with its InvalidToolInputError text as the tool result
  (`execute` is not called); a call without id gets one of its own; `tool_choice: "auto"` when the
  request had none; it raises on arguments sent as a JSON object (AI_APICallError: Invalid JSON response).
Every client raises on an answer without choices. None sends anything but messages, tools and tool_choice
(and the transport fields `model`, `stream`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from conformance.clients import node_ai_sdk, py_litellm
from conformance.clients.idioms import TRANSPORT_FIELDS
from conformance.clients.jobs import CALL_TIMEOUT, ClientName, Job, error_text
from conformance.clients.replay_run import client_versions
from conformance.clients.replay_server import Answer, ReplayServer, body_bytes, running
from conformance.run.second_turn import TurnBody, TurnJob, TurnRebuilder

MODEL = "model"
DONE: dict[str, Any] = {"id": "turn-2", "object": "chat.completion", "created": 0, "model": MODEL, "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}
Loop = Callable[[str, TurnJob], None]  # (base URL, job): runs one client's tool loop; raises what the client raises


def unavailable(client: ClientName) -> str | None:
    """Why `client` cannot run here (None: it can)."""
    return client_versions([client])[client]["unavailable"]


def _modules(*names: str) -> Callable[[], None]:
    def import_them() -> None:
        for name in names:
            importlib.import_module(name)
    return import_them


# What each client's loop imports, imported by `import_libraries` (the AI SDK runs in Node; LiteLLM's set-up
# also quiets it).
LIBRARY_IMPORTS: dict[ClientName, Callable[[], Any]] = {
    "openai-python": _modules("openai"), "langchain-openai": _modules("langchain_openai", "langchain_core.messages"),
    "litellm": py_litellm.imported, "ai-sdk": _modules()}


def import_libraries(clients: Iterable[str]) -> None:
    """Import the client libraries of `clients` (those installed) now, in the caller's thread, before a run
    sends anything: one imported in a rebuilder's thread while the run's own thread used httpx met a
    half-imported httpx ("partially initialized module"), failing that run's requests (measured)."""
    for client in clients:
        if client in LIBRARY_IMPORTS and unavailable(client) is None:
            LIBRARY_IMPORTS[client]()


def _tool_fields(job: TurnJob) -> dict[str, Any]:
    """The request's tools and tool_choice (those it has), which the client is given for both turns."""
    return {key: job.request[key] for key in ("tools", "tool_choice") if job.request.get(key) is not None}


def _openai_loop(base_url: str, job: TurnJob) -> None:
    import openai

    with openai.OpenAI(base_url=base_url, api_key="replay", max_retries=0, timeout=CALL_TIMEOUT) as client:
        messages: list[Any] = list(job.request["messages"])
        completion = client.chat.completions.create(model=MODEL, messages=messages, **_tool_fields(job))
        message = completion.choices[0].message
        messages.append(message)
        for call, result in zip(message.tool_calls or [], job.tool_results):
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        client.chat.completions.create(model=MODEL, messages=messages, **_tool_fields(job))


def _langchain_loop(base_url: str, job: TurnJob) -> None:
    from langchain_core.messages import ToolMessage
    from langchain_openai import ChatOpenAI

    given = _tool_fields(job)
    model = ChatOpenAI(base_url=base_url, api_key="replay", model=MODEL, max_retries=0, timeout=CALL_TIMEOUT)
    bound = model.bind_tools(given.get("tools", []), **{key: value for key, value in given.items() if key != "tools"})
    messages: list[Any] = list(job.request["messages"])
    ai_message = bound.invoke(messages)
    messages.append(ai_message)
    for call, result in zip(ai_message.tool_calls, job.tool_results):
        messages.append(ToolMessage(content=result, tool_call_id=call["id"]))
    bound.invoke(messages)


def _litellm_loop(base_url: str, job: TurnJob) -> None:
    litellm = py_litellm.imported()
    common = {"model": f"openai/{MODEL}", "api_base": base_url, "api_key": "replay", "timeout": CALL_TIMEOUT,
              "max_retries": 0, **_tool_fields(job)}
    messages: list[Any] = list(job.request["messages"])
    message = litellm.completion(messages=messages, **common).choices[0].message
    messages.append(message)
    for call, result in zip(message.tool_calls or [], job.tool_results):
        messages.append({"tool_call_id": call.id, "role": "tool", "name": call.function.name, "content": result})
    litellm.completion(messages=messages, **common)


def _register(server: ReplayServer, job: TurnJob) -> int:
    return server.register(Answer(200, "application/json", (body_bytes(job.answer),)),
                           then=Answer(200, "application/json", (body_bytes(DONE),)))


def _turn_body(server: ReplayServer, slot: int, error: str | None) -> TurnBody:
    """The second request captured on `slot` without the transport fields, or why there is none."""
    sent = server.requests(slot)
    if len(sent) < 2:
        return TurnBody(None, error or "the client sent no second request")
    if not isinstance(sent[1], dict):
        return TurnBody(None, f"the client's second request is not a JSON object: {str(sent[1])[:200]!r}")
    return TurnBody({key: value for key, value in sent[1].items() if key not in TRANSPORT_FIELDS})


def _not_installed(client: ClientName, jobs: Sequence[TurnJob]) -> dict[str, TurnBody] | None:
    why = unavailable(client)
    if why is None:
        return None
    return {job.key: TurnBody(None, f"{client} is not installed: {why}", available=False) for job in jobs}


def _python_rebuilder(client: ClientName, loop: Loop) -> TurnRebuilder:
    """Each job through `loop`, one after another, on one replay server."""
    def rebuild(jobs: Sequence[TurnJob]) -> Mapping[str, TurnBody]:
        if (missing := _not_installed(client, jobs)) is not None:
            return missing
        bodies: dict[str, TurnBody] = {}
        with running() as server:
            for job in jobs:
                slot = _register(server, job)
                try:
                    loop(server.base_url(slot), job)
                    error = None
                except Exception as exc:  # the client's own error is the finding
                    error = error_text(exc)
                bodies[job.key] = _turn_body(server, slot, error)
        return bodies
    return rebuild


def _ai_sdk_rebuilder(jobs: Sequence[TurnJob]) -> Mapping[str, TurnBody]:
    """Every job in one Node batch; a batch that fails gives its reason to the jobs it did not finish."""
    if (missing := _not_installed("ai-sdk", jobs)) is not None:
        return missing
    with running() as server:
        slots = {job.key: _register(server, job) for job in jobs}
        node_jobs = [(Job(job.key, "ai-sdk.generateText", server.base_url(slots[job.key]), MODEL,
                          list(job.request["messages"]), list(job.request.get("tools") or []),
                          job.request.get("tool_choice")), job.tool_results) for job in jobs]
        try:
            errors = node_ai_sdk.run_second_turns(node_jobs)
        except node_ai_sdk.BatchFailed as exc:
            errors = {**dict.fromkeys((job.key for job in jobs), str(exc)), **exc.finished}
        return {job.key: _turn_body(server, slots[job.key], errors.get(job.key)) for job in jobs}


CLIENT_REBUILDERS: dict[ClientName, TurnRebuilder] = {
    "openai-python": _python_rebuilder("openai-python", _openai_loop),
    "langchain-openai": _python_rebuilder("langchain-openai", _langchain_loop),
    "litellm": _python_rebuilder("litellm", _litellm_loop),
    "ai-sdk": _ai_sdk_rebuilder,
}
