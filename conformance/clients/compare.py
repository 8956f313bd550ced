"""What a client did with a recorded answer, judged against the server's own parsed message.

The server's message is the one the suite reads from the recording (`conformance.record.wire`: the
non-streaming message, or the stream's deltas added up per `index`). Outcomes:
* `same`: the client's message equals it (reasoning, content, each call's name and arguments as JSON
  values); for a refusal, the client raised and its error carries the server's message;
* `lost`: the client has less: a field the server filled is empty, calls are missing, or (refusal)
  the client's error does not carry the server's message;
* `changed`: the client has something else (another value, a call the server did not send, or no
  error for a refusal);
* `raised`: the client raised on a 2xx answer (its error text is the finding);
* `not_run`: no recorded answer to replay, or the client could not run (the reason says which).
"""

from __future__ import annotations

from typing import Any, Literal

from conformance.record.case_model import MESSAGE_FIELDS
from conformance.record.wire import Message, error_text, message_view

ClientOutcome = Literal["same", "lost", "changed", "raised", "not_run"]
OUTCOMES: tuple[ClientOutcome, ...] = ("same", "lost", "changed", "raised", "not_run")


def view(message: Message) -> dict[str, Any]:
    """The compared view of a message (no finish_reason: clients rename it)."""
    return message_view(message, MESSAGE_FIELDS)


def differences(server: dict[str, Any], client: dict[str, Any]) -> list[dict[str, Any]]:
    """Field by field, where the client's view departs from the server's: {field, server, client}."""
    found = [{"field": key, "server": server[key], "client": client[key]}
             for key in ("reasoning", "content") if server[key] != client[key]]
    server_calls, client_calls = server["tool_calls"], client["tool_calls"]
    for index in range(max(len(server_calls), len(client_calls))):
        ours = server_calls[index] if index < len(server_calls) else None
        theirs = client_calls[index] if index < len(client_calls) else None
        if ours is None or theirs is None:
            found.append({"field": f"tool_calls[{index}]", "server": ours, "client": theirs})
            continue
        for key in ("name", "arguments"):
            if ours[key] != theirs[key]:
                found.append({"field": f"tool_calls[{index}].{key}", "server": ours[key], "client": theirs[key]})
    return found


def message_outcome(found: list[dict[str, Any]]) -> ClientOutcome:
    """`same` without differences; `lost` when the client only has empty where the server had a value."""
    if not found:
        return "same"
    return "lost" if all(_empty(d["client"]) and not _empty(d["server"]) for d in found) else "changed"


def refusal_outcome(error_body: Any, client_error: str | None) -> tuple[ClientOutcome, str]:
    """(outcome, reason) for a refused request: the client must raise with the server's message."""
    server_message = error_text(error_body)
    if client_error is None:
        return "changed", f"the server refused ({server_message!r}); the client raised nothing"
    if server_message and server_message in client_error:
        return "same", ""
    return "lost", f"the client's error does not carry the server's message {server_message!r}"


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == []
