"""Hostile input and faults (issue 10): every input the suite reads is bounded in time and memory, every bad
input is a clear exit 2 naming the file (and line or field), and nothing already recorded is lost.

The tool runs as a subprocess, against loopback fakes that stop by themselves (tests/scripted_server.py,
tests/hub_server.py); memory cases run it under an address-space limit, time cases under a wall-clock
bound.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.scripted_server import Reply, json_reply, scripted_server, trickle

ROOT = Path(__file__).resolve().parents[1]
MEMORY_LIMIT = 1536 * 1024 * 1024  # bytes of address space for a tool run under a memory bound


def conformance(*args: str | Path, memory: int | None = None, timeout: float = 60, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the CLI; `memory` bounds its address space (and its children's), `timeout` its wall time."""
    def limit_memory() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "conformance", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit_memory, cwd=cwd, env=environment)


def assert_clean_error(completed: subprocess.CompletedProcess, *names: str) -> None:
    """Exit 2, no traceback, and every one of `names` in the message."""
    assert completed.returncode == 2, (completed.returncode, completed.stderr[-2000:])
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    for name in names:
        assert name in completed.stderr + completed.stdout, (name, completed.stderr[-2000:])


# --- cases and a scripted server that plays an OpenAI-style API --------------------------------------

CASE_FILE = """\
cases:
{cases}
"""
CASE = """\
  - id: {id}
    description: The server answers this case with {id}; the harness must record and judge it.
    features: [content]
    request:
      messages: [{{role: user, content: "{id}"}}]
    force: "Hello."
    expect:
      hf:
        message: {{content: "Hello."}}
        finish_reason: stop
"""


def case_dir(tmp_path: Path, *ids: str, name: str = "cases") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "suite.yaml").write_text(CASE_FILE.format(cases="".join(CASE.format(id=i) for i in ids)))
    return directory


def good_chunks(content: str = "Hello.") -> list[dict[str, Any]]:
    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "token_ids": [1]}]}
    return [chunk({"role": "assistant", "content": ""}), chunk({"content": content}), chunk({}, "stop")]


def good_response(content: str = "Hello.") -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop",
                         "token_ids": [1]}]}


def sse(*events: Any) -> Reply:
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return Reply(200, {"Content-Type": "text/event-stream"}, [data])


def chat_routes(answers: dict[str, Any], **extra: Any) -> dict:
    """Routes of a server that answers each case (keyed by its user message) with `answers[case]`:
    a dict is the non-stream body and the stream is built from it; `(body, events)` gives both."""
    def chat(body: dict) -> Reply:
        scenario = body["messages"][-1]["content"]
        answer = answers.get(scenario, (good_response(), good_chunks()))
        if callable(answer):
            return answer(body)
        response, events = answer if isinstance(answer, tuple) else (answer, [answer])
        return sse(*events) if body.get("stream") else json_reply(response)

    return {
        ("POST", "/v1/chat/completions"): chat,
        ("GET", "/version"): lambda body: json_reply({"version": "scripted"}),
        ("POST", "/tokenize"): lambda body: json_reply({"tokens": [1]}),
        ("POST", "/detokenize"): lambda body: json_reply({"prompt": "Hello."}),
        **extra,
    }


def run_against(server: Any, cases: Path, out: Path, *args: str, **options: Any) -> subprocess.CompletedProcess:
    return conformance("run", "--base-url", server.base_url, "--model", "m", "--profile", "hf", "--cases", cases,
                       "--out", out, *args, **options)


def results_of(out: Path) -> dict[tuple[str, str], dict]:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return {(r["case_id"], r["mode"]): r for r in records}


# --- 1. one malformed answer must not abort a forced run ----------------------------------------------

MALFORMED = {
    "choices-string": ({"choices": "nope"}, [{"choices": "nope"}]),
    "choices-null": ({"choices": [None]}, [{"choices": [None]}]),
    "delta-string": ({"choices": [{"index": 0, "message": "text", "finish_reason": "stop", "token_ids": [1]}]},
                     [{"choices": [{"index": 0, "delta": "text", "token_ids": [1]}]}]),
}


def test_a_malformed_forced_answer_is_a_recorded_shape_failure_and_the_run_goes_on(tmp_path) -> None:
    cases = case_dir(tmp_path, *MALFORMED, "well-formed")
    with scripted_server(chat_routes(MALFORMED)) as server:
        completed = run_against(server, cases, tmp_path / "out", "--forcing", "trust")
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr
    results = results_of(tmp_path / "out")
    assert len(results) == 8, sorted(results)
    for case_id in MALFORMED:
        for mode in ("non-stream", "stream"):
            result = results[(case_id, mode)]
            assert result["outcome"] == "fail" and "shape" in result["reason"], result
    recorded = {(t["case_id"], t["mode"]) for t in map(json.loads, (tmp_path / "out/transcripts.jsonl").read_text().splitlines())}
    assert recorded == set(results)
    assert (tmp_path / "out/report.md").is_file()


# --- 2. YAML alias bombs, deep nesting, unreadable scalars: one bounded reader for every YAML file -----

def alias_bomb(levels: int = 9, indent: str = "") -> str:
    """A few hundred bytes that stand for 9**levels nodes once the aliases are expanded."""
    lines = [f"{indent}a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_checkpoints_yaml_is_refused_in_bounded_time_and_memory(tmp_path) -> None:
    listing = tmp_path / "checkpoints.yaml"
    listing.write_text("- repo: a/b\n  revision: main\n  notes:\n" + alias_bomb(indent="    "))
    started = time.monotonic()
    completed = conformance("audit", "--checkpoints", listing, memory=MEMORY_LIMIT, timeout=30)
    assert_clean_error(completed, str(listing), "line ", "alias")
    assert time.monotonic() - started < 15


def test_an_alias_bomb_in_a_case_file_is_refused_by_the_linter_and_the_loader_alike(tmp_path) -> None:
    top = case_dir(tmp_path, "plain", name="top")
    (top / "bomb.yaml").write_text(alias_bomb() + "cases: []\n")
    inside = case_dir(tmp_path, "plain", name="inside")
    (inside / "suite.yaml").write_text((inside / "suite.yaml").read_text().replace(
        "      messages:", "      metadata:\n" + alias_bomb(indent="        ") + "      messages:"))
    for directory, name in ((top, "bomb.yaml"), (inside, "suite.yaml")):
        checked = conformance("cases", "check", directory, memory=MEMORY_LIMIT, timeout=30)
        assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr[-2000:]  # lint errors
        assert f"{name}:" in checked.stderr and "alias bomb" in checked.stderr
        ran = run_against(type("S", (), {"base_url": "http://127.0.0.1:9/v1"}), directory, tmp_path / "out",
                          memory=MEMORY_LIMIT, timeout=30)
        assert_clean_error(ran, name, "alias")


@pytest.mark.parametrize("document", [
    "".join("  " * i + "- \n" for i in range(2000)),  # block nesting 2,000 deep
    "[" * 900 + "]" * 900,  # flow nesting the C parser accepts
    "- &a [*a]\n",  # an alias inside itself
    "- repo: a/b\n  revision: main\n  notes: x\n- " + "9" * 5000 + "\n",  # an integer beyond Python's 4,300 digits
    "- repo: a/b\n  revision: 2020-13-45\n",  # a timestamp with month 13
])
def test_deep_recursive_or_unreadable_yaml_is_an_exit_2_naming_the_file(tmp_path, document) -> None:
    listing = tmp_path / "checkpoints.yaml"
    listing.write_text(document)
    assert_clean_error(conformance("audit", "--checkpoints", listing, timeout=30), str(listing), "line")
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "suite.yaml").write_text("cases:\n  - x: " + document.replace("\n", "\n    "))
    checked = conformance("cases", "check", cases, timeout=30)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr[-2000:]  # lint errors
    assert "suite.yaml:" in checked.stderr


# --- 10, 11. checkpoints.yaml: a non-UTF-8 file is named; a key given twice is refused -----------------

def test_a_non_utf8_checkpoints_yaml_names_the_file_and_line(tmp_path) -> None:
    listing = tmp_path / "checkpoints.yaml"
    listing.write_bytes(b"- repo: a/b\n  revision: main\n  notes: caf\xe9\n")
    assert_clean_error(conformance("audit", "--checkpoints", listing), f"{listing}: line 3", "UTF-8")


def test_a_key_given_twice_in_a_checkpoints_entry_is_refused_like_the_case_linter_does(tmp_path) -> None:
    listing = tmp_path / "checkpoints.yaml"
    listing.write_text("- repo: a/b\n  revision: main\n  expect: {both: starts, both: fails}\n  revision: v1\n")
    completed = conformance("audit", "--checkpoints", listing)
    assert_clean_error(completed, f"{listing}: entry 0 (a/b): line 4: duplicate key 'revision'",
                       "line 3: duplicate key 'expect.both'")


# --- 3. Hub downloads: the size limit on the bytes read, a deadline per file ----------------------------

def audit_hub(server: Any, cache: Path, *args: str, **options: Any) -> tuple[subprocess.CompletedProcess, dict]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    environment.update(HF_ENDPOINT=server.url, HF_HUB_CACHE=str(cache / "hub"))
    report = cache / "audit.json"
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "audit", *args, "--json", str(report)], capture_output=True, text=True,
        env={**environment, "PYTHONPATH": str(ROOT)}, cwd=cache, **options)
    records = json.loads(report.read_text()) if report.exists() else {}
    return completed, {c["id"]: c for c in records.get("checkpoints", [])}


@pytest.fixture(scope="module")
def hostile_hub():
    from tests import hub_server

    config = json.dumps({"response_template": None}).encode()
    with hub_server.HubServer() as server:
        server.add_repo("t/oversize", {"tokenizer_config.json": config}, mode=hub_server.OVERSIZE)
        server.add_repo("t/trickle", {"tokenizer_config.json": config * 100}, mode=hub_server.TRICKLE, delay_s=0.5)
        server.add_repo("t/stall", {"tokenizer_config.json": config}, mode=hub_server.STALL)
        server.add_repo("t/fine", {"tokenizer_config.json": config})
        yield server


def test_hub_downloads_are_bounded_by_the_bytes_read_and_a_deadline_per_file(hostile_hub, tmp_path) -> None:
    started = time.monotonic()
    completed, audits = audit_hub(hostile_hub, tmp_path, "t/oversize", "t/trickle", "t/stall", "t/fine",
                                  "--timeout", "1", timeout=60)
    elapsed = time.monotonic() - started
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert completed.returncode == 2
    assert audits["t/oversize"]["status"] == "too_large", audits["t/oversize"]
    assert "more bytes than announced" in audits["t/oversize"]["error"]
    for repo in ("t/trickle", "t/stall"):
        assert audits[repo]["status"] == "timeout", audits[repo]
        assert "tokenizer_config.json did not arrive within 3s" in audits[repo]["error"]
    assert audits["t/fine"]["status"] == "ok"
    assert elapsed < 15, elapsed
    assert not list((tmp_path / "hub").rglob("*.incomplete")) or all(
        p.stat().st_size <= 5 * 1024 * 1024 + 65536 for p in (tmp_path / "hub").rglob("*.incomplete"))


# --- 8. long SSE lines: read in linear time, and capped ----------------------------------------------

def long_line_routes(size: int) -> dict:
    content = "x" * size
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    response = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
    return chat_routes({"long": (response, events)})


def unforced_case_dir(tmp_path: Path, *ids: str) -> Path:
    cases = case_dir(tmp_path, *ids)
    (cases / "suite.yaml").write_text((cases / "suite.yaml").read_text().replace('    force: "Hello."\n', ""))
    return cases


def test_a_long_sse_line_is_read_in_linear_time(tmp_path) -> None:
    cases = unforced_case_dir(tmp_path, "long")
    with scripted_server(long_line_routes(24_000_000)) as server:
        started = time.monotonic()
        completed = run_against(server, cases, tmp_path / "out", "--max-line-bytes", "40000000", timeout=120)
        elapsed = time.monotonic() - started
    assert "Traceback" not in completed.stderr, completed.stderr[-2000:]
    result = results_of(tmp_path / "out")[("long", "stream")]
    assert result["outcome"] == "fail" and "expected message in content" in result["reason"], result  # read, judged
    assert elapsed < 30, elapsed  # quadratic reading took minutes


@pytest.mark.parametrize("mode", ["stream", "non-stream"])
def test_a_line_over_the_cap_makes_the_answer_an_error_with_the_reason(tmp_path, mode) -> None:
    cases = unforced_case_dir(tmp_path, "long")
    with scripted_server(long_line_routes(3_000_000)) as server:
        completed = run_against(server, cases, tmp_path / "out", "--max-line-bytes", "1000000")
    assert completed.returncode == 2 and "Traceback" not in completed.stderr, completed.stderr[-2000:]
    result = results_of(tmp_path / "out")[("long", mode)]
    what = "an SSE line" if mode == "stream" else "the response body"
    assert result["outcome"] == "error", result
    assert f"{what} is longer than 1000000 bytes" in result["reason"]
