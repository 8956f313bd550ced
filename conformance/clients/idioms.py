"""The request side: client libraries' own idioms for tools, each run against a loopback replay
server that captures the body the client really sends and answers with a recorded answer, so what
the idiom hands its caller (a result, or the client's own error for a refusal) is seen too.

Each idiom names the case (cases/client_idioms.yaml) whose request is the body it sends, plus the
run controls the case adds (`RUN_CONTROLS`); tests/test_client_idioms.py holds every idiom to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from conformance.clients import node_ai_sdk
from conformance.clients.jobs import CALL_TIMEOUT, ClientName, Job, error_text
from conformance.clients.replay_server import Answer, ReplayServer
from conformance.record.case_model import RUN_CONTROLS

TRANSPORT_FIELDS = ("model", "stream")  # what every client sends besides the idiom's body


class GetWeather(BaseModel):
    """Weather forecast for a city."""

    city: str


@dataclass(frozen=True)
class Idiom:
    name: str
    client: ClientName
    case_id: str
    call: Callable[[str, str, Mapping[str, Any]], str] | None = None  # Python: (base URL, model, case request) -> result
    ai_sdk_tool_choice: Any = None  # the AI SDK: the toolChoice it is given (its words)


@dataclass
class IdiomRun:
    idiom: Idiom
    sent: Any  # the body the client sent, without TRANSPORT_FIELDS (None: it sent nothing)
    surfaced: str  # what the caller got: the result, or the client's error (type and message)
    raised: bool


def _calls(tool_calls: Sequence[Any]) -> str:
    return "tool_calls: " + json.dumps(tool_calls, ensure_ascii=False, default=str)


def _chat_openai(base_url: str, model: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=base_url, api_key="replay", model=model, max_retries=0, timeout=CALL_TIMEOUT)


def _langchain_bind_tools(tool_choice: Callable[[Mapping[str, Any]], Any]) -> Callable[..., str]:
    def call(base_url: str, model: str, request: Mapping[str, Any]) -> str:
        bound = _chat_openai(base_url, model).bind_tools(request["tools"], tool_choice=tool_choice(request))
        return _calls(bound.invoke(request["messages"]).tool_calls)
    return call


def _langchain_structured_output(base_url: str, model: str, request: Mapping[str, Any]) -> str:
    result = _chat_openai(base_url, model).with_structured_output(GetWeather, method="function_calling")
    return repr(result.invoke(request["messages"]))


def _openai(base_url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=base_url, api_key="replay", max_retries=0, timeout=CALL_TIMEOUT)


def _openai_pydantic_function_tool(base_url: str, model: str, request: Mapping[str, Any]) -> str:
    import openai

    with _openai(base_url) as client:
        message = client.chat.completions.parse(model=model, messages=request["messages"],
                                                tools=[openai.pydantic_function_tool(GetWeather)]).choices[0].message
    return _calls([{"name": c.function.name, "parsed_arguments": c.function.parsed_arguments}
                   for c in message.tool_calls or []])


def _openai_parallel_false(base_url: str, model: str, request: Mapping[str, Any]) -> str:
    with _openai(base_url) as client:
        message = client.chat.completions.create(model=model, messages=request["messages"], tools=request["tools"],
                                                 parallel_tool_calls=False).choices[0].message
    return _calls([{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []])


def _litellm(**extra: Any) -> Callable[..., str]:
    def call(base_url: str, model: str, request: Mapping[str, Any]) -> str:
        from conformance.clients.py_litellm import imported

        message = imported().completion(model=f"openai/{model}", api_base=base_url, api_key="replay",
                                        messages=request["messages"], tools=request["tools"], timeout=CALL_TIMEOUT,
                                        max_retries=0,
                                        **{k: v(request) if callable(v) else v for k, v in extra.items()},
                                        ).choices[0].message
        return _calls([{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []])
    return call


def _first_tool(request: Mapping[str, Any]) -> str:
    return request["tools"][0]["function"]["name"]


def _named(request: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": _first_tool(request)}}


REQUIRED, NAMED = "client-idiom-tool-choice-required", "client-idiom-tool-choice-named"
IDIOMS: tuple[Idiom, ...] = (
    Idiom('LangChain bind_tools(tool_choice="required")', "langchain-openai", REQUIRED,
          _langchain_bind_tools(lambda request: "required")),
    Idiom('LangChain bind_tools(tool_choice="<name>")', "langchain-openai", NAMED, _langchain_bind_tools(_first_tool)),
    Idiom('LangChain with_structured_output(method="function_calling")', "langchain-openai",
          "client-idiom-langchain-structured-output", _langchain_structured_output),
    Idiom("openai-python pydantic_function_tool (strict), chat.completions.parse", "openai-python",
          "client-idiom-openai-pydantic-function-tool", _openai_pydantic_function_tool),
    Idiom("openai-python parallel_tool_calls=False", "openai-python", "client-idiom-parallel-tool-calls-false",
          _openai_parallel_false),
    Idiom('LiteLLM completion(tool_choice="required")', "litellm", REQUIRED, _litellm(tool_choice="required")),
    Idiom("LiteLLM completion(tool_choice={function: name})", "litellm", NAMED, _litellm(tool_choice=_named)),
    Idiom("LiteLLM completion(parallel_tool_calls=False)", "litellm", "client-idiom-parallel-tool-calls-false",
          _litellm(parallel_tool_calls=False)),
    Idiom("AI SDK generateText toolChoice: 'required'", "ai-sdk", REQUIRED, ai_sdk_tool_choice="required"),
    Idiom("AI SDK generateText toolChoice: {type: 'tool', toolName}", "ai-sdk", NAMED, ai_sdk_tool_choice="named"),
)


def run_idioms(server: ReplayServer, requests: Mapping[str, Mapping[str, Any]], answers: Mapping[str, Answer],
               idioms: Sequence[Idiom] = IDIOMS) -> list[IdiomRun]:
    """Every idiom whose case is in `answers`: driven with that case's request (`requests[case]`, the
    case's messages and tools), answered with `answers[case]`. The AI SDK's run in one Node batch
    (`node_ai_sdk.BatchFailed` when it fails)."""
    runs: list[IdiomRun] = []
    node_jobs: list[tuple[Idiom, int, Job]] = []
    for idiom in idioms:
        if idiom.case_id not in answers:
            continue
        slot = server.register(answers[idiom.case_id])
        request = requests[idiom.case_id]
        if idiom.call is None:
            choice = "required" if idiom.ai_sdk_tool_choice == "required" else _named(request)
            node_jobs.append((idiom, slot, Job(str(slot), "ai-sdk.generateText", server.base_url(slot), "model",
                                               list(request["messages"]), list(request["tools"]), choice)))
            continue
        try:
            surfaced, raised = idiom.call(server.base_url(slot), "model", request), False
        except Exception as exc:  # the client's own error is what its caller sees
            surfaced, raised = error_text(exc), True
        runs.append(IdiomRun(idiom, _sent(server, slot), surfaced, raised))
    if node_jobs:
        results = node_ai_sdk.run_batch([job for _, _, job in node_jobs])
        for idiom, slot, job in node_jobs:
            rebuilt = results[job.key]
            surfaced = rebuilt.error or _calls([{"name": c.name, "arguments": c.arguments}
                                                for c in (rebuilt.message.tool_calls if rebuilt.message else [])])
            runs.append(IdiomRun(idiom, _sent(server, slot), surfaced, rebuilt.error is not None))
    return runs


def _sent(server: ReplayServer, slot: int) -> Any:
    bodies = server.requests(slot)
    if not bodies or not isinstance(bodies[0], dict):
        return bodies[0] if bodies else None
    return {key: value for key, value in bodies[0].items() if key not in TRANSPORT_FIELDS}


def idiom_body(case_request: Mapping[str, Any]) -> dict[str, Any]:
    """A case's request without the run controls it adds: the body its idioms must send."""
    return {key: value for key, value in case_request.items() if key not in RUN_CONTROLS}
