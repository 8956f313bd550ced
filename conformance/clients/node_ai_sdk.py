"""The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`, the pinned Node project in clients/node) over
replayed answers: `generateText` and `streamText`, and `generateText`'s two-step tool loop (the second turn).
One Node process runs a whole batch of jobs (clients/node/replay.mjs reads a JSON job list, writes one JSON
result per line); a batch that cannot start, times out or stops early raises `BatchFailed` with the jobs
it finished."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from conformance.clients.jobs import CALL_TIMEOUT, Job, Rebuilt
from conformance.record.wire import Message, ToolCall
from conformance.util.json_codec import MAX_RECORD_DEPTH, parse_json
from conformance.util.package_paths import NODE_PROJECT_DIR

NODE_PROJECT_ENV = "CONFORMANCE_NODE_CLIENTS"  # another directory holding replay.mjs and its node_modules
BATCH_TIMEOUT_ENV = "CONFORMANCE_NODE_BATCH_TIMEOUT"  # seconds a whole batch may take (default: batch_timeout)
T = TypeVar("T")


class NodeUnavailable(RuntimeError):
    """Node or the pinned packages are missing; the message says which and how to install them."""


class BatchFailed(RuntimeError):
    """A Node batch that could not start, timed out or stopped early; `finished` holds the results of
    the jobs it finished before (by key: a `Rebuilt`, or for second turns the error text or None); the
    message says what happened."""

    def __init__(self, message: str, finished: dict[str, Any]) -> None:
        super().__init__(message)
        self.finished = finished


def project_dir() -> Path:
    return Path(os.environ.get(NODE_PROJECT_ENV) or NODE_PROJECT_DIR)


def batch_timeout(jobs: int) -> float:
    """Seconds a batch of `jobs` may take: $CONFORMANCE_NODE_BATCH_TIMEOUT, else 60 plus CALL_TIMEOUT per job."""
    value = os.environ.get(BATCH_TIMEOUT_ENV)
    if not value:
        return 60 + CALL_TIMEOUT * jobs
    try:
        return float(value)
    except ValueError:
        raise NodeUnavailable(f"${BATCH_TIMEOUT_ENV} is {value!r}, not a number of seconds") from None


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
    """Every job's result, by key, from one Node process (BatchFailed when it does not give them all)."""
    return _batch([_payload(job) for job in jobs], _rebuilt)


def run_second_turns(jobs: Sequence[tuple[Job, Sequence[str]]]) -> dict[str, str | None]:
    """Per job (by key), the error the SDK raised (None: it sent its second request, which the replay
    server at the job's base URL captured), from one Node process: `generateText` with tools whose
    `execute` returns the job's tool results in call order, and `stopWhen: isStepCount(2)`."""
    payload = [{**_payload(job), "api": "generateText-turn2", "toolResults": list(results)} for job, results in jobs]
    return _batch(payload, lambda value: value.get("error"))


def _payload(job: Job) -> dict[str, Any]:
    return {"id": job.key, "api": job.api.removeprefix("ai-sdk."), "baseURL": job.base_url, "model": job.model,
            "messages": job.messages, "tools": job.tools, "toolChoice": _tool_choice(job.tool_choice)}


def _batch(payload: Sequence[dict[str, Any]], read: Callable[[dict[str, Any]], T]) -> dict[str, T]:
    """Each job's result line read by `read`, by key (BatchFailed when the batch does not give them all)."""
    try:
        timeout = batch_timeout(len(payload))
        with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as handle:
            json.dump(payload, handle)
            handle.flush()
            returncode, stdout, stderr, timed_out = _run_node([_node(), str(project_dir() / "replay.mjs"), handle.name],
                                                              timeout)
    except (NodeUnavailable, OSError) as exc:
        raise BatchFailed(f"the Node batch could not start: {exc}", {}) from None
    results: dict[str, T] = {}
    for line in stdout.splitlines()[1:]:
        try:
            value = parse_json(line, MAX_RECORD_DEPTH)  # a client's rebuild of an answer, one level down
            results[value["id"]] = read(value)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BatchFailed(f"the Node batch wrote a line that is not a result: {line[:200]!r}", results) from None
    done = f"{len(results)} of {len(payload)} jobs done"
    if timed_out:
        raise BatchFailed(f"the Node batch timed out after {timeout:g} s and was killed ({done})", results)
    if returncode != 0 or len(results) != len(payload):
        raise BatchFailed(f"the Node batch {_ended(returncode)} ({done}): {_last_line(stderr)}", results)
    return results


def _run_node(command: list[str], timeout: float) -> tuple[int, str, str, bool]:
    """(exit status, stdout, stderr, timed out) of `command`, killed with its process group at `timeout`."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
                          errors="replace", start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            return process.returncode, stdout, stderr, False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            return process.returncode, stdout, stderr, True
        finally:
            if process.poll() is None:  # interrupted: no Node left behind
                os.killpg(process.pid, signal.SIGKILL)


def _ended(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _last_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f"last stderr line: {lines[-1][:300]!r}" if lines else "nothing on stderr"


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
