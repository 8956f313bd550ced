"""What a client is asked to do (`Job`) and what it rebuilt (`Rebuilt`), shared by every client driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from conformance.record.wire import Message

ClientName = Literal["openai-python", "langchain-openai", "litellm", "ai-sdk"]
ClientApi = Literal[
    "openai.create", "openai.create-stream", "openai.stream-helper",
    "langchain.invoke", "langchain.stream",
    "litellm.completion", "litellm.completion-stream",
    "ai-sdk.generateText", "ai-sdk.streamText",
]
# Per client, the calls that read a non-streaming answer and those that read a stream.
APIS: dict[ClientName, dict[str, tuple[ClientApi, ...]]] = {
    "openai-python": {"non-stream": ("openai.create",), "stream": ("openai.create-stream", "openai.stream-helper")},
    "langchain-openai": {"non-stream": ("langchain.invoke",), "stream": ("langchain.stream",)},
    "litellm": {"non-stream": ("litellm.completion",), "stream": ("litellm.completion-stream",)},
    "ai-sdk": {"non-stream": ("ai-sdk.generateText",), "stream": ("ai-sdk.streamText",)},
}
CLIENT_OF: dict[str, ClientName] = {api: client for client, modes in APIS.items() for apis in modes.values() for api in apis}
CALL_TIMEOUT = 30.0  # seconds for one client call against the loopback replay server


@dataclass(frozen=True)
class Job:
    """One client call: where the recorded answer is served and the request the case made."""

    key: str  # identifies the job in a batch
    api: ClientApi
    base_url: str
    model: str
    messages: list[Any]
    tools: list[Any] = field(default_factory=list)
    tool_choice: Any = None

    @property
    def stream(self) -> bool:
        return self.api in APIS[CLIENT_OF[self.api]]["stream"]


@dataclass
class Rebuilt:
    """What a client handed its caller: the message it rebuilt (None when it raised before having
    one), the error it raised (its own type and text), and for streams how many items it yielded and
    the first (1-based) that exposed a tool call's name."""

    message: Message | None
    error: str | None = None
    finish_reason: str | None = None
    items: int | None = None
    first_name_item: int | None = None


def error_text(exc: BaseException) -> str:
    """A client's exception as its caller sees it: type name and message."""
    return f"{type(exc).__name__}: {exc}"[:2000]
