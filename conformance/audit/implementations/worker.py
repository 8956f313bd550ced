"""Child side of the matrix: parse every input with one implementation, whole and streamed.

Run as `python -c "...serve()" KIND LOCATION` with a job on stdin: {"template", "inputs": [{prompt, raw,
tools}], "chunk_seed"}. Writes one answer per input: {"whole": answer, "stream": answer}, where an answer
is {"message", "error", "events"} (events only when streamed: type, field and text / value / error,
consecutive chunks of a field merged). Imports only the standard library and `regex` before the
implementation, so each release's code is what runs.
"""

from __future__ import annotations

import importlib.util
import json
import random
import resource
import signal
import sys
from pathlib import Path
from typing import Any

MEMORY_BYTES = 1024 * 1024 * 1024
MAX_CHUNK = 8


def load_implementation(kind: str, location: str, name: str = "chat_parsing_fork") -> Any:
    if kind == "package":
        import transformers.utils.chat_parsing as module

        return module
    folder = Path(location)
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def _event(event: dict[str, Any]) -> dict[str, Any]:
    shown = {"type": event.get("type"), "field": event.get("field")}
    if event.get("type") == "region_chunk":
        shown["text"] = event.get("text")
    elif event.get("type") == "region_close":
        shown["value"] = event.get("value")
    elif event.get("type") == "region_malformed":
        shown["error"] = _error(event["error"]) if isinstance(event.get("error"), BaseException) else str(event.get("error"))
    return shown


def _merged(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    for event in map(_event, events):
        previous = merged[-1] if merged else None
        if previous and event["type"] == previous["type"] == "region_chunk" and event["field"] == previous["field"]:
            previous["text"] += event["text"]
        else:
            merged.append(event)
    return merged


def chunks_of(raw: str, seed: int) -> list[str]:
    """The same cut of `raw` for every implementation: random sizes from 1 to MAX_CHUNK."""
    rng = random.Random(f"{seed}:{raw}")
    chunks, position = [], 0
    while position < len(raw):
        size = rng.randint(1, MAX_CHUNK)
        chunks.append(raw[position:position + size])
        position += size
    return chunks


def answer(module: Any, template: dict, item: dict[str, Any], seed: int) -> dict[str, Any]:
    whole: dict[str, Any] = {"message": None, "error": None}
    try:
        whole["message"] = module.parse_response(item["raw"], template, prefix=item["prompt"], tools=item["tools"])
    except Exception as error:
        whole["error"] = _error(error)
    stream: dict[str, Any] = {"message": None, "error": None, "events": []}
    events: list[dict[str, Any]] = []
    try:
        parser = module.ResponseParser(template, prefix=item["prompt"], tools=item["tools"])
        events += parser.initial_events
        for chunk in chunks_of(item["raw"], seed):
            events += parser.feed(chunk)
        stream["message"], final = parser.finalize()
        events += final
    except Exception as error:
        stream["error"] = _error(error)
    stream["events"] = _merged(events)
    return {"whole": whole, "stream": stream}


def serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (min(MEMORY_BYTES, hard) if hard != resource.RLIM_INFINITY else MEMORY_BYTES, hard))
    sys.setrecursionlimit(10_000)
    kind, location = sys.argv[1], sys.argv[2]
    job = json.loads(sys.stdin.read())
    module = load_implementation(kind, location)
    answers = [answer(module, job["template"], item, job["chunk_seed"]) for item in job["inputs"]]
    json.dump(answers, sys.stdout, ensure_ascii=True, default=repr)


if __name__ == "__main__":
    serve()
