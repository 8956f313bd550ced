"""openai-python over a replayed answer: `chat.completions.create` (with and without `stream`) and the
`chat.completions.stream()` helper, as a caller of each sees the result."""

from __future__ import annotations

from typing import Any

from conformance.clients.jobs import CALL_TIMEOUT, Job, Rebuilt, error_text
from conformance.record.wire import message_from_chat_json


def version() -> str:
    from importlib.metadata import version as installed

    return installed("openai")


def run(job: Job) -> Rebuilt:
    import openai

    client = openai.OpenAI(base_url=job.base_url, api_key="replay", max_retries=0, timeout=CALL_TIMEOUT)
    kwargs: dict[str, Any] = {"model": job.model, "messages": job.messages}
    if job.tools:
        kwargs["tools"] = job.tools
    if job.tool_choice is not None:
        kwargs["tool_choice"] = job.tool_choice
    with client:
        if job.api == "openai.create":
            return _create(client, kwargs)
        if job.api == "openai.create-stream":
            return _create_stream(client, kwargs)
        return _stream_helper(client, kwargs)


def _create(client: Any, kwargs: dict[str, Any]) -> Rebuilt:
    try:
        completion = client.chat.completions.create(**kwargs)
        choice = completion.choices[0]
        return Rebuilt(message_from_chat_json(choice.message.to_dict(), choice.finish_reason), None,
                       choice.finish_reason)
    except Exception as exc:  # the client's own error is the finding
        return Rebuilt(None, error_text(exc))


def _create_stream(client: Any, kwargs: dict[str, Any]) -> Rebuilt:
    """The chunks as the client parsed them, added up as a caller adding up deltas does (texts
    appended, each call's name and arguments appended per `index`)."""
    texts: dict[str, list[str]] = {"reasoning": [], "content": []}
    calls: dict[Any, dict[str, list[str]]] = {}
    items, first_name, finish = 0, None, None
    try:
        for chunk in client.chat.completions.create(**kwargs, stream=True):
            items += 1
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta.to_dict()
                for key in ("reasoning", "reasoning_content"):
                    if isinstance(delta.get(key), str):
                        texts["reasoning"].append(delta[key])
                if isinstance(delta.get("content"), str):
                    texts["content"].append(delta["content"])
                for call in choice.delta.tool_calls or []:
                    pieces = calls.setdefault(call.index, {"name": [], "arguments": []})
                    if call.function and call.function.name:
                        pieces["name"].append(call.function.name)
                        first_name = first_name or items
                    if call.function and call.function.arguments:
                        pieces["arguments"].append(call.function.arguments)
                finish = choice.finish_reason or finish
    except Exception as exc:
        return Rebuilt(None, error_text(exc), finish, items, first_name)
    message = {"reasoning": "".join(texts["reasoning"]) or None, "content": "".join(texts["content"]) or None,
               "tool_calls": [{"function": {"name": "".join(p["name"]) or None, "arguments": "".join(p["arguments"])}}
                              for _, p in sorted(calls.items(), key=lambda item: str(item[0]))]}
    return Rebuilt(message_from_chat_json(message, finish), None, finish, items, first_name)


def _stream_helper(client: Any, kwargs: dict[str, Any]) -> Rebuilt:
    """`with client.chat.completions.stream(...) as stream`: its events, then `get_final_completion()`."""
    items, first_name = 0, None
    try:
        with client.chat.completions.stream(**kwargs) as stream:
            for event in stream:
                if event.type != "chunk":
                    continue
                items += 1
                choices = event.snapshot.choices
                if first_name is None and choices and any(
                        call.function.name for call in choices[0].message.tool_calls or []):
                    first_name = items
            choice = stream.get_final_completion().choices[0]
    except Exception as exc:
        return Rebuilt(None, error_text(exc), None, items, first_name)
    return Rebuilt(message_from_chat_json(choice.message.to_dict(), choice.finish_reason), None,
                   choice.finish_reason, items, first_name)
