"""Plain-HTTP Chat Completions calls for the real-vLLM tests of the launcher and forcing helpers."""

from __future__ import annotations

import json
import urllib.request

from conformance.servers.launch import Server

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _post(server: Server, body: dict):
    request = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    return urllib.request.urlopen(request, timeout=300)


def chat(server: Server, body: dict) -> dict:
    """A non-streaming chat completion (the response JSON)."""
    with _post(server, {**body, "stream": False}) as response:
        return json.load(response)


def chat_stream(server: Server, body: dict) -> list[dict]:
    """A streaming chat completion: every `data:` chunk in order, up to `[DONE]`."""
    chunks = []
    with _post(server, {**body, "stream": True}) as response:
        for raw_line in response:
            line = raw_line.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                break
            chunks.append(json.loads(data))
    return chunks
