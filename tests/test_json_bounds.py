"""Answers nested deeper than the JSON reader's bound (issue 30): a `data:` line or tool-call arguments
`[[[[...]]]]` thousands deep are judged (a fail naming the depth), the run goes on and writes its
reports, and `recheck` of the recording exits 1 (a failure) instead of a traceback. An answer nested
just within the bound is judged and recorded, and its recording reads back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.cli import main
from conformance.record.results import read_results
from conformance.util.json_codec import MAX_JSON_DEPTH, JsonTooDeep, parse_json
from tests.engine_helpers import load_cases
from tests.scripted_server import Reply, json_reply, scripted_server

DEEP = "[" * 5000 + "]" * 5000
AT_THE_BOUND = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
CASE = """
- id: {id}
  description: The scripted server plays its {id} answer, JSON nested deep where the name says.
  features: [tool_call]
  request:
    messages: [{{role: user, content: {id}}}]
    tools: [get_weather]
  force: "<tool_call>{{}}</tool_call>"
  expect:
    hf:
      message:
        tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
      finish_reason: tool_calls
"""


def call(arguments: str) -> dict[str, Any]:
    return {"id": "call-0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


def response(arguments: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "tool_calls": [call(arguments)]}
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls", "token_ids": [1]}]}


def chunks(arguments: str) -> list[str]:
    def chunk(delta: dict, finish: str | None = None) -> str:
        return json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "token_ids": [1]}]})
    return [chunk({"role": "assistant", "content": ""}), chunk({"tool_calls": [{"index": 0, **call(arguments)}]}),
            chunk({}, "tool_calls")]


def nested_to_the_bound(chunk_or_body: Any) -> Any:
    """`chunk_or_body` (a dict, or the JSON text of one) with a field nested as deep as the bound allows."""
    value = json.loads(chunk_or_body) if isinstance(chunk_or_body, str) else chunk_or_body
    value = {**value, "extra": json.loads(AT_THE_BOUND[1:-1])}  # the object itself is the first level
    return json.dumps(value) if isinstance(chunk_or_body, str) else value


ANSWERS = {  # case -> (the non-stream body, the stream's data lines)
    "deep-line": (response('{"city": "Paris"}'), [*chunks('{"city": "Paris"}')[:2], DEEP, chunks("")[2]]),
    "deep-arguments": (response(DEEP), chunks(DEEP)),
    "at-the-bound": (nested_to_the_bound(response(AT_THE_BOUND)), list(map(nested_to_the_bound, chunks(AT_THE_BOUND)))),
}


def chat(body: dict[str, Any]) -> Reply:
    answer, lines = ANSWERS[body["messages"][-1]["content"]]
    if not body.get("stream"):
        return json_reply(answer)
    data = "".join(f"data: {line}\n\n" for line in [*lines, "[DONE]"]).encode()
    return Reply(200, {"Content-Type": "text/event-stream"}, [data])


ROUTES = {("POST", "/v1/chat/completions"): chat,
          ("GET", "/version"): lambda body: json_reply({"version": "scripted"}),
          ("POST", "/tokenize"): lambda body: json_reply({"tokens": [1]}),
          ("POST", "/detokenize"): lambda body: json_reply({"prompt": "<tool_call>{}</tool_call>"})}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(the case directory, the run's directory, the run's exit code) of a run against the scripted server."""
    cases = tmp_path_factory.mktemp("cases")
    load_cases(cases, "".join(CASE.format(id=case) for case in ANSWERS))
    out = tmp_path_factory.mktemp("run")
    with scripted_server(ROUTES) as server:
        code = main(["run", "--base-url", server.base_url, "--model", "m", "--profile", "hf", "--cases", str(cases),
                     "--out", str(out), "--timeout", "10", "--forcing", "trust"])
    return cases, out, code


def outcomes(results_file) -> dict[tuple[str, str], tuple[str, str]]:
    return {(r.case_id, r.mode): (r.outcome, r.reason) for r in read_results(results_file)}


def test_a_value_nested_too_deep_is_a_value_error_naming_the_depth() -> None:
    text = '{"a": ' + DEEP + "}"
    with pytest.raises(JsonTooDeep, match=TOO_DEEP) as raised:
        parse_json(text)
    opened_past_the_bound = len('{"a": ') + MAX_JSON_DEPTH - 1  # the object is the first level
    assert isinstance(raised.value, ValueError) and raised.value.pos == opened_past_the_bound
    with pytest.raises(JsonTooDeep, match=TOO_DEEP):
        parse_json(text.encode("utf-16"))  # bytes, read as json.loads reads them
    assert parse_json(AT_THE_BOUND) == json.loads(AT_THE_BOUND)
    assert parse_json(json.dumps(["[{" * 5000])) == ["[{" * 5000]  # brackets inside a string are text


def test_answers_nested_too_deep_are_judged_as_fails_naming_the_depth_and_reported(recorded) -> None:
    _, out, code = recorded
    assert code == 1
    results = outcomes(out / "results.jsonl")
    assert set(results) == {(case, mode) for case in ANSWERS for mode in ("non-stream", "stream")}
    assert results[("deep-line", "non-stream")][0] == "pass"
    outcome, reason = results[("deep-line", "stream")]
    assert outcome == "fail" and reason.startswith("response_shape: ") and f"data line 3: {TOO_DEEP}" in reason
    for mode in ("non-stream", "stream"):
        outcome, reason = results[("deep-arguments", mode)]
        assert outcome == "fail" and "arguments_json" in reason and TOO_DEEP in reason, reason
        assert len(reason) < 2000  # the arguments are cut, not quoted whole
    for mode in ("non-stream", "stream"):
        outcome, reason = results[("at-the-bound", mode)]  # an array where the case expects an object
        assert outcome == "fail" and "internal error" not in reason and TOO_DEEP not in reason, reason
    for name in ("report.md", "report.html", "junit.xml", "run.json"):
        assert (out / name).is_file()


def test_recheck_of_a_recording_nested_too_deep_judges_it_alike(recorded, capsys) -> None:
    cases, out, _ = recorded
    assert main(["recheck", str(out / "transcripts.jsonl"), "--cases", str(cases), "--out", str(out / "again")]) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert outcomes(out / "again" / "results.jsonl") == outcomes(out / "results.jsonl")
