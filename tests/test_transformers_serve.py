"""`transformers serve` 5.23 under the cases (real-server tier): it starts from the tiny checkpoint's
eos-closes-content variant, the whole default case set passes or is skipped for a declared reason,
the four request patterns hf refuses come back as it answers them, and sequence-bias forcing is
token-exact."""

from __future__ import annotations

import asyncio
import copy
import json
import urllib.error
import urllib.request
from pathlib import Path

from conformance.record.wire import read_stream
from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.servers.launch import Server
from conformance.servers.profiles import PROFILES, expectation_for, profile_record
from conformance.servers.sequence_bias import CheckpointTokenizer, forced_ids, verify_answer
from conformance.suite.cases import load_suite

GET_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast for a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
GET_TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a timezone.",
            "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}}}}
ONE_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO_CALLS = ONE_CALL + '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'


def post(server: Server, path: str, body: dict) -> dict:
    request = urllib.request.Request(server.base_url + path, json.dumps({"model": server.model, **body}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def forced(server: Server, raw_text: str, request: dict) -> dict:
    """`request` with the record's forcing fields for `raw_text`."""
    method = PROFILES["transformers-serve"].forcing
    tokenizer = method.tokenizer(server.root_url, server.model, None, 60)
    return {**request, **asyncio.run(method.request_fields(raw_text, request, lambda: tokenizer))}


def test_it_starts_from_the_eos_closes_content_checkpoint_and_tells_its_version(transformers_serve_server) -> None:
    server = transformers_serve_server
    assert server.profile.name == "transformers-serve" and server.version == "5.23.0"
    assert Path(server.model).name == "eos-closes-content"  # pinned to the path it was started on
    assert "--device" in server.args and server.args[server.args.index("--device") + 1] == "cpu"


def test_the_whole_default_case_set_passes_or_skips_for_its_declared_reason(transformers_serve_server,
                                                                           tmp_path) -> None:
    server = transformers_serve_server
    target = Target(base_url=server.base_url, model=server.model, profile="transformers-serve",
                    version=server.version)
    output = run(load_suite(), target, tmp_path / "run")
    judged = [r for r in output.results if r.outcome != "skip"]
    assert all(r.outcome == "pass" for r in judged), [(r.case_id, r.mode, r.reason) for r in judged
                                                       if r.outcome != "pass"]
    skips = [r for r in output.results if r.outcome == "skip"]
    assert all(r.skip_allowed and ((r.skip_kind == "declared" and r.reason.startswith("declared: "))
                                   or r.skip_kind == "other_fixture_variant") for r in skips)  # the closer variant's
    assert len(judged) >= 100 and len(skips) <= 44  # 40, and the two turns it cannot answer or the format write
    streams = [t for t in output.transcripts if t.mode == "stream" and t.endpoint == "chat" and t.status == 200]
    assert streams and not any(read_stream(t).done for t in streams)  # no `data: [DONE]`, ever
    forced_answers = [t for t in output.transcripts if t.forced and t.status == 200 and t.endpoint == "chat"]
    assert forced_answers and all(t.forcing_problems == [] for t in forced_answers)  # each one verified exact


def test_the_four_patterns_hf_refuses_are_accepted_and_not_enforced(transformers_serve_server) -> None:
    server = transformers_serve_server
    ask = {"messages": [{"role": "user", "content": "Weather in Paris and Rome?"}], "max_tokens": 200}
    # tool_choice required, with an output that calls no tool: accepted, no call
    required = post(server, "/chat/completions", forced(server, "No call.", {**ask, "tools": [GET_WEATHER],
                                                                             "tool_choice": "required"}))
    assert required["choices"][0]["message"].get("tool_calls") is None
    assert required["choices"][0]["message"]["content"] == "No call."
    # a named tool_choice (get_time) and an output calling another tool: that call comes back
    named = post(server, "/chat/completions", forced(server, ONE_CALL, {
        **ask, "tools": [GET_WEATHER, GET_TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}))
    assert [c["function"]["name"] for c in named["choices"][0]["message"]["tool_calls"]] == ["get_weather"]
    # parallel_tool_calls false and two calls: both come back
    parallel = post(server, "/chat/completions", forced(server, TWO_CALLS, {**ask, "tools": [GET_WEATHER],
                                                                           "parallel_tool_calls": False}))
    calls = parallel["choices"][0]["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    # strict, with arguments outside the schema: returned as generated
    strict_tool = copy.deepcopy(GET_WEATHER)
    strict_tool["function"]["strict"] = True
    outside = '<tool_call>\n{"name": "get_weather", "arguments": {"town": 7}}\n</tool_call>'
    strict = post(server, "/chat/completions", forced(server, outside, {**ask, "tools": [strict_tool]}))
    assert json.loads(strict["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"town": 7}


def test_every_http_500_its_declared_skips_name_still_happens(transformers_serve_server) -> None:
    """The declared skips of transformers serve that quote an HTTP 500 without streaming are not sent in a run:
    each is sent here, forced, and still answered with HTTP 500 (the day one is answered, its skip is stale)."""
    server = transformers_serve_server
    claimed = [case for case in load_suite() if case.endpoint == "chat" and case.fixture_variant is None
               and case.force and "HTTP 500" in (expectation_for(case, "transformers-serve").skip or "")]
    assert len(claimed) >= 12 and "turn-unclosed-call" in {case.id for case in claimed}
    statuses = {case.id: status_of(server, forced(server, case.force, copy.deepcopy(case.request))) for case in claimed}
    assert statuses == dict.fromkeys(statuses, 500)


def status_of(server: Server, body: dict) -> int:
    try:
        post(server, "/chat/completions", body)
    except urllib.error.HTTPError as error:
        return error.code
    return 200


def test_sequence_bias_forcing_is_token_exact(transformers_serve_server) -> None:
    server = transformers_serve_server
    tokenizer = CheckpointTokenizer(server.model)
    text = "<think>\nplan\n</think>\n\n" + TWO_CALLS
    request = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [GET_WEATHER]}
    body = forced(server, text, request)
    answer = post(server, "/chat/completions", body)
    assert verify_answer(tokenizer, text, body, answer["usage"]) == []
    ids = forced_ids(tokenizer, text)
    assert answer["usage"]["completion_tokens"] == len(ids)
    # The same prompt and generation config on /v1/completions returns the generated text itself
    # (the end token, a special token, left out): exactly the text, and its own ids are the forced ones.
    prompt = tokenizer.detokenize(tokenizer.prompt_ids(request))
    raw = post(server, "/completions", {"prompt": prompt, "generation_config": body["generation_config"]})
    assert raw["choices"][0]["text"] == text
    assert tokenizer.tokenize(raw["choices"][0]["text"]) == ids[:-1] and raw["usage"]["completion_tokens"] == len(ids)
    unforced = post(server, "/completions", {"prompt": prompt, "max_tokens": len(ids)})
    assert unforced["choices"][0]["text"] != text  # the check can tell: the model alone writes something else


def test_it_renders_no_conversation_as_its_record_says(transformers_serve_server, hf_server) -> None:
    """`tokenizes_conversations`: transformers serve has no /tokenize (404), so a second turn's prompt is not judged
    there (a named skip); vLLM's Python frontend renders one (the contrast, on the same body)."""

    def tokenize(server) -> int:
        body = {"model": server.model, "messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True}
        request = urllib.request.Request(server.base_url.removesuffix("/v1") + "/tokenize", json.dumps(body).encode(),
                                         {"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code

    assert profile_record("transformers-serve").tokenizes_conversations is False
    assert tokenize(transformers_serve_server) == 404
    assert profile_record("hf").tokenizes_conversations is True and tokenize(hf_server) == 200
