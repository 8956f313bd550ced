"""LiteLLM over a replayed answer, through its OpenAI-compatible route (`openai/<model>` with
`api_base`): `completion`, and `completion(stream=True)` with the chunks put back together by
`litellm.stream_chunk_builder`, as LiteLLM documents. LiteLLM's message carries reasoning as
`reasoning_content`. Offline: the model cost map is the one LiteLLM ships (LITELLM_LOCAL_MODEL_COST_MAP)."""

from __future__ import annotations

import os
from typing import Any

from conformance.clients.jobs import CALL_TIMEOUT, Job, Rebuilt, error_text
from conformance.record.wire import Message, ToolCall


def imported() -> Any:
    """The litellm module, set up offline and quiet."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of the cost map
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


def version() -> str:
    from importlib.metadata import version as installed

    return installed("litellm")


def run(job: Job) -> Rebuilt:
    litellm = imported()
    kwargs: dict[str, Any] = {"model": f"openai/{job.model}", "api_base": job.base_url, "api_key": "replay",
                              "messages": job.messages, "timeout": CALL_TIMEOUT, "max_retries": 0}
    if job.tools:
        kwargs["tools"] = job.tools
    if job.tool_choice is not None:
        kwargs["tool_choice"] = job.tool_choice
    if job.api == "litellm.completion":
        try:
            choice = litellm.completion(**kwargs).choices[0]
        except Exception as exc:
            return Rebuilt(None, error_text(exc))
        return Rebuilt(_message(choice.message, choice.finish_reason), None, choice.finish_reason)
    chunks, first_name = [], None
    try:
        for chunk in litellm.completion(**kwargs, stream=True):
            chunks.append(chunk)
            calls = chunk.choices[0].delta.tool_calls if chunk.choices else None
            if first_name is None and any(call.function and call.function.name for call in calls or []):
                first_name = len(chunks)
        built = litellm.stream_chunk_builder(chunks, messages=job.messages)
    except Exception as exc:
        return Rebuilt(None, error_text(exc), None, len(chunks), first_name)
    if built is None:  # no chunk at all
        return Rebuilt(Message(), None, None, len(chunks), first_name)
    choice = built.choices[0]
    return Rebuilt(_message(choice.message, choice.finish_reason), None, choice.finish_reason, len(chunks), first_name)


def _message(message: Any, finish_reason: str | None) -> Message:
    calls = [ToolCall(call.function.name, call.function.arguments, call.id, call.type)
             for call in message.tool_calls or []]
    reasoning = getattr(message, "reasoning_content", None)
    return Message(reasoning or None, message.content or None, calls, finish_reason,
                   {"reasoning_content"} if reasoning else set())
