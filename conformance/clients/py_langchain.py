"""LangChain's `ChatOpenAI` (langchain-openai) over a replayed answer: `invoke`, and `stream` with the
chunks added up as LangChain documents (`chunk + chunk`). What the caller gets is the AIMessage's
text, its `tool_calls` (or `invalid_tool_calls`) and, for reasoning, whatever LangChain keeps of it
(`additional_kwargs` `reasoning_content` / `reasoning`, or reasoning content blocks)."""

from __future__ import annotations

import json
from typing import Any

from conformance.clients.jobs import CALL_TIMEOUT, Job, Rebuilt, error_text
from conformance.record.wire import Message, ToolCall

REASONING_KEYS = ("reasoning_content", "reasoning")


def version() -> str:
    from importlib.metadata import version as installed

    return f"{installed('langchain-openai')} (langchain-core {installed('langchain-core')})"


def run(job: Job) -> Rebuilt:
    from langchain_core.messages import convert_to_messages
    from langchain_openai import ChatOpenAI

    model: Any = ChatOpenAI(base_url=job.base_url, api_key="replay", model=job.model, max_retries=0,
                            timeout=CALL_TIMEOUT)
    if job.tools:
        model = model.bind_tools(job.tools, **({"tool_choice": job.tool_choice} if job.tool_choice is not None else {}))
    try:
        messages = convert_to_messages(job.messages)
    except Exception:  # a turn LangChain cannot take as it is: the answer does not depend on it
        messages = convert_to_messages([{"role": "user", "content": json.dumps(job.messages)[:2000]}])
    if job.api == "langchain.invoke":
        try:
            return _rebuilt(model.invoke(messages))
        except Exception as exc:
            return Rebuilt(None, error_text(exc))
    total, items, first_name = None, 0, None
    try:
        for chunk in model.stream(messages):
            items += 1
            total = chunk if total is None else total + chunk
            if first_name is None and any(part.get("name") for part in chunk.tool_call_chunks):
                first_name = items
    except Exception as exc:
        return Rebuilt(None, error_text(exc), None, items, first_name)
    if total is None:
        return Rebuilt(Message(), None, None, items, first_name)
    rebuilt = _rebuilt(total)
    rebuilt.items, rebuilt.first_name_item = items, first_name
    return rebuilt


def _rebuilt(message: Any) -> Rebuilt:
    """What the caller of `invoke` / the added-up `stream` reads off the AIMessage."""
    reasoning = [message.additional_kwargs.get(key) for key in REASONING_KEYS]
    text_parts: list[str] = []
    if isinstance(message.content, str):
        text_parts.append(message.content)
    else:
        for block in message.content:
            if isinstance(block, str):
                text_parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                text_parts.append(block.get("text") or "")
            elif isinstance(block, dict) and block.get("type") in ("reasoning", "thinking"):
                reasoning.append(block.get("reasoning") or block.get("thinking"))
    calls = [ToolCall(call["name"], json.dumps(call["args"], ensure_ascii=False), call.get("id"), "function")
             for call in message.tool_calls]
    calls += [ToolCall(call.get("name"), call.get("args"), call.get("id"), "function")
              for call in message.invalid_tool_calls]  # LangChain keeps unparsable calls apart, unordered
    finish = message.response_metadata.get("finish_reason")
    return Rebuilt(Message("".join(r for r in reasoning if isinstance(r, str)) or None, "".join(text_parts) or None,
                           calls, finish), None, finish)
