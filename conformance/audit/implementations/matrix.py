"""The implementations matrix of one checkpoint: the same inputs parsed by every implementation, whole
and streamed; which agree, and for each kind of disagreement the shortest input that shows it with each
implementation's answer.

Inputs exercise the checkpoint's own template: the round trip's rendered outputs, each shipped
format-independent case's turn rendered with its chat template, the shipped forced outputs that hold one of
its delimiters (after their request's prompt), and CAST_PROBES. Each implementation runs in its own child process (worker.py) with a time
limit and a memory cap; one that cannot be installed or dies is listed as unavailable with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conformance.audit.implementations import setup
from conformance.audit.implementations.registry import Implementation

TIMEOUT_S = 120.0
CHUNK_SEED = 0
WORKER = Path(__file__).resolve().with_name("worker.py")
MODES = ("whole", "stream")

# Assistant messages rendered with the checkpoint's chat template: schema casting of argument strings
# (transformers casts "3.0" to 3 for an integer parameter from 5.20 on, 5.16-5.19 keep the string).
CAST_TOOL = {"type": "function", "function": {"name": "cast_probe", "description": "argument casting",
             "parameters": {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"},
                                                             "b": {"type": "boolean"}}}}}
CAST_PROBES = [
    {"origin": "cast probe", "tools": [CAST_TOOL],
     "message": {"role": "assistant", "tool_calls": [
         {"type": "function", "function": {"name": "cast_probe", "arguments": arguments}}]}}
    for arguments in ({"n": "3.0"}, {"n": "3", "x": "2.50", "b": "true"})
]

DOCUMENTED_MALFORMED = ("documented: a malformed tool call ends a transformers stream with an exception, where "
                        "the forks emit region_malformed and go on")
DOCUMENTED_CAST = 'documented: from transformers 5.20 an integer parameter\'s "3.0" is cast to 3'


def run_implementation(implementation: Implementation, template: dict, inputs: list[dict[str, Any]],
                       timeout: float = TIMEOUT_S) -> list[dict[str, Any]] | str:
    """Every input's answers from one implementation, or why there are none."""
    try:
        location = implementation.locate()
    except setup.SetupError as error:
        return f"not installed: {error}"
    environment = dict(os.environ)
    if implementation.kind == "package":
        environment["PYTHONPATH"] = str(location)
    else:
        environment.pop("PYTHONPATH", None)
    job = {"template": template, "inputs": [{key: item[key] for key in ("prompt", "raw", "tools")} for item in inputs],
           "chunk_seed": CHUNK_SEED}
    try:
        done = subprocess.run([sys.executable, str(WORKER), implementation.kind, str(location)], input=json.dumps(job),
                              capture_output=True, text=True, timeout=timeout, env=environment)
    except subprocess.TimeoutExpired:
        return f"did not answer within {timeout:g} s"
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return json.loads(done.stdout)


def _key(answer: dict[str, Any]) -> str:
    return json.dumps(answer, sort_keys=True, ensure_ascii=False)


def explain(mode: str, groups: list[dict[str, Any]]) -> str | None:
    """The documented difference a disagreement is, if it is one."""
    answers = [group["answer"] for group in groups]
    if mode == "stream" and any(a["error"] for a in answers) and any(
            not a["error"] and any(e["type"] == "region_malformed" for e in a["events"]) for a in answers):
        return DOCUMENTED_MALFORMED
    texts = [_key(a["message"]) for a in answers if a["message"] is not None]
    if len(texts) == len(answers) and len({t.replace('"3.0"', "3") for t in texts}) == 1:
        return DOCUMENTED_CAST
    return None


def compare(names: list[str], answers: dict[str, list[dict[str, Any]]], inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """Group the implementations per input and mode; one disagreement entry per distinct grouping."""
    disagreements: dict[tuple, dict[str, Any]] = {}
    agreeing = 0
    for index, item in enumerate(inputs):
        split = False
        for mode in MODES:
            grouped: dict[str, list[str]] = {}
            for name in names:
                grouped.setdefault(_key(answers[name][index][mode]), []).append(name)
            if len(grouped) == 1:
                continue
            split = True
            signature = (mode, tuple(sorted(tuple(group) for group in grouped.values())))
            entry = disagreements.get(signature)
            if entry is None or len(item["raw"]) < len(entry["input"]["raw"]):
                groups = [{"implementations": group, "answer": json.loads(key)} for key, group in grouped.items()]
                entry = {"mode": mode, "inputs": entry["inputs"] if entry else 0, "input": item, "groups": groups,
                         "explained": explain(mode, groups)}
                disagreements[signature] = entry
            entry["inputs"] += 1
        agreeing += not split
    return {"agreeing_inputs": agreeing, "disagreements": list(disagreements.values())}


def build_matrix(implementations: Iterable[Implementation], template: dict, inputs: list[dict[str, Any]],
                 inputs_left_out: int = 0, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """The matrix record of one checkpoint (the report's `implementations`); `inputs_left_out`: the forced
    outputs not parsed, as they do not exercise the checkpoint's template."""
    answers: dict[str, list[dict[str, Any]]] = {}
    unavailable: dict[str, str] = {}
    for implementation in implementations:
        outcome = run_implementation(implementation, template, inputs, timeout)
        if isinstance(outcome, str):
            unavailable[implementation.name] = outcome
        else:
            answers[implementation.name] = outcome
    names = list(answers)
    record = {"status": "ran" if len(names) > 1 else "skipped",
              "reason": None if len(names) > 1 else "fewer than two implementations could run",
              "implementations": names, "unavailable": unavailable, "inputs": len(inputs),
              "inputs_left_out": inputs_left_out,
              "agreeing_inputs": 0, "disagreements": []}
    if len(names) > 1:
        record.update(compare(names, answers, inputs))
    return record
