"""The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`, the pinned Node project in clients/node) over
replayed answers: `generateText` and `streamText`. One Node process runs a whole batch of jobs
(clients/node/replay.mjs reads a JSON job list, writes one JSON result per line)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.clients.jobs import CALL_TIMEOUT, Job, Rebuilt
from conformance.record.wire import Message, ToolCall
from conformance.util.package_paths import NODE_PROJECT_DIR

NODE_PROJECT_ENV = "CONFORMANCE_NODE_CLIENTS"  # another directory holding replay.mjs and its node_modules


class NodeUnavailable(RuntimeError):
    """Node or the pinned packages are missing; the message says which and how to install them."""


def project_dir() -> Path:
    return Path(os.environ.get(NODE_PROJECT_ENV) or NODE_PROJECT_DIR)


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise NodeUnavailable("node is not installed (scripts/bootstrap installs Debian's nodejs and npm)")
    if not (project_dir() / "node_modules" / "ai" / "package.json").is_file():
        raise NodeUnavailable(f"{project_dir()}: the AI SDK is not installed (run `npm ci` there; scripts/bootstrap does)")
    return node


def version() -> str:
    node = _node()
    versions = {}
    for package in ("ai", "@ai-sdk/openai-compatible"):
        versions[package] = json.loads((project_dir() / "node_modules" / package / "package.json").read_text())["version"]
    runtime = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return f"ai {versions['ai']}, @ai-sdk/openai-compatible {versions['@ai-sdk/openai-compatible']} (node {runtime})"


def run_batch(jobs: Sequence[Job]) -> dict[str, Rebuilt]:
    """Every job's result, by key, from one Node process."""
    node = _node()
    payload = [{"id": job.key, "api": job.api.removeprefix("ai-sdk."), "baseURL": job.base_url, "model": job.model,
                "messages": job.messages, "tools": job.tools, "toolChoice": _tool_choice(job.tool_choice)}
               for job in jobs]
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as handle:
        json.dump(payload, handle)
        handle.flush()
        done = subprocess.run([node, str(project_dir() / "replay.mjs"), handle.name], capture_output=True,
                              text=True, timeout=60 + CALL_TIMEOUT * len(jobs))
    lines = done.stdout.splitlines()[1:]
    results = {}
    for line in lines:
        value = json.loads(line)
        results[value["id"]] = _rebuilt(value)
    if done.returncode != 0 or len(results) != len(jobs):
        raise NodeUnavailable(f"the AI SDK batch stopped after {len(results)} of {len(jobs)} jobs "
                              f"(exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return results


def _tool_choice(choice: Any) -> Any:
    """A case's OpenAI tool_choice in the AI SDK's words."""
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "tool", "toolName": choice["function"].get("name")}
    return choice if choice in ("auto", "none", "required") else None


def _rebuilt(value: dict[str, Any]) -> Rebuilt:
    message = value.get("message")
    built = None
    if message is not None:
        calls = [ToolCall(call.get("name"), call.get("arguments"), None, "function") for call in message.get("tool_calls") or []]
        built = Message(message.get("reasoning") or None, message.get("content") or None, calls, value.get("finish_reason"))
    stream = value.get("items") or None
    return Rebuilt(built, value.get("error"), value.get("finish_reason"), stream, value.get("first_name_item"))
