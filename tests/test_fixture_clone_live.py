"""A tiny clone (`conformance fixture build DIR --from CHECKPOINT`) served by real vLLM 0.32 (vllm tier): a format no
record ships parses into a tool call under the hf profile, and a clone of a shipped format's checkpoint directory
(tokenizer_config.json and its templates only) is gated legacy -> hf with the legacy parsers given as --baseline-args.
One server, then the gate's two, never all three at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.formats.registry import FORMATS
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.forcing import forcing_extra_body
from conformance.servers.launch import launch
from conformance.util import exit_codes
from tests.server_helpers import WEATHER_TOOL, chat, chat_stream
from tests.test_fixture_clone import INVENTED

pytestmark = pytest.mark.vllm

FORCED = '<reason>plan it</reason><calls>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]</calls>'


def test_the_clone_of_a_format_without_a_record_serves_tool_calls_with_hf(tmp_path: Path) -> None:
    assert main(["fixture", "build", str(tmp_path / "clone"), "--from", str(INVENTED)]) == exit_codes.OK
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER_TOOL],
            "max_tokens": 200, "temperature": 0, **forcing_extra_body(FORCED)}
    with launch("hf", tmp_path / "clone", log_dir=tmp_path / "logs") as server:
        body["model"] = server.model
        answer = chat(server, body)["choices"][0]
        chunks = chat_stream(server, body)
    assert answer["finish_reason"] == "tool_calls", answer
    message = answer["message"]
    assert message["reasoning"] == "plan it" and not message.get("content")
    assert [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message["tool_calls"]] == [
        ("get_weather", {"city": "Paris", "days": 3})]
    deltas = [choice["delta"] for chunk in chunks for choice in chunk.get("choices", [])]
    streamed = [call for delta in deltas for call in delta.get("tool_calls") or []]
    assert streamed and streamed[0]["function"]["name"] == "get_weather"
    assert "".join(delta.get("reasoning") or "" for delta in deltas) == "plan it"


def test_a_shipped_formats_clone_is_gated_with_the_legacy_parsers_as_baseline_args(tmp_path: Path) -> None:
    source = build_fixture(tmp_path / "source", "full", FORMATS["qwen3-xml"])
    for heavy in ("tokenizer.json", "model.safetensors"):
        (source / heavy).unlink()
    assert main(["fixture", "build", str(tmp_path / "clone"), "--from", str(source)]) == exit_codes.OK
    code = main(["gate", "--model", str(tmp_path / "clone"), "--format", "qwen3-xml",
                 "--baseline-args", "--tool-call-parser qwen3_coder --reasoning-parser qwen3",
                 "--case", "turn-reasoning-then-call", "--case", "turn-two-calls", "--granularities", "none",
                 "--second-turn", "none",
                 "--no-expect", "--out", str(tmp_path / "gate")])
    gate = json.loads((tmp_path / "gate" / "gate.json").read_text())
    assert code in (exit_codes.OK, exit_codes.FAILED) and gate["verdict"]["newly_failing"] == 0, gate["verdict"]
    assert gate["sides"]["baseline"]["stamp"]["server_args"][-4:] == ["--tool-call-parser", "qwen3_coder",
                                                                     "--reasoning-parser", "qwen3"]  # last: they win
    # the differences are the shipped fixture's: the expectations shipped for qwen3-xml legacy -> hf acknowledge them
    assert main(["compare", str(tmp_path / "gate" / "baseline"), str(tmp_path / "gate" / "candidate"),
                 "--out", str(tmp_path / "shipped")]) == exit_codes.OK
    for side in ("baseline", "candidate"):
        results = [json.loads(line) for line in (tmp_path / "gate" / side / "results.jsonl").read_text().splitlines()[1:]]
        assert {(r["case_id"], r["mode"]): r["outcome"] for r in results} == {
            (case, mode): "pass" for case in ("turn-reasoning-then-call", "turn-two-calls")
            for mode in ("non-stream", "stream")}, (side, [r["checks"] for r in results if r["outcome"] != "pass"])


def test_the_clone_of_a_format_without_a_record_is_gated_in_its_own_format(tmp_path: Path) -> None:
    """No --format: the gate reads the clone's own format, renders the turn cases in its delimiters and judges both
    sides against its own parse (the baseline's parsers, unknown to any record, given as --baseline-args)."""
    assert main(["fixture", "build", str(tmp_path / "clone"), "--from", str(INVENTED)]) == exit_codes.OK
    cases = ("turn-reasoning-then-call", "turn-two-calls", "turn-content")
    code = main(["gate", "--model", str(tmp_path / "clone"),
                 "--baseline-args", "--enable-auto-tool-choice --tool-call-parser hf --reasoning-parser hf",
                 *(arg for case in cases for arg in ("--case", case)), "--granularities", "none",
                 "--second-turn", "none", "--no-expect", "--out", str(tmp_path / "gate")])
    gate = json.loads((tmp_path / "gate" / "gate.json").read_text())
    # a verdict on the differences (the legacy profile's stream shapes are not the hf profile's), none of them a
    # case failing under the candidate
    assert code in (exit_codes.OK, exit_codes.FAILED) and gate["verdict"]["newly_failing"] == 0, gate["verdict"]
    for side in ("baseline", "candidate"):
        assert gate["sides"][side]["stamp"]["response_format"] == "checkpoint:clone"
        transcripts = [json.loads(line) for line in (tmp_path / "gate" / side / "transcripts.jsonl").read_text()
                       .splitlines()[1:]]
        forced = {t["case_id"]: t["forced_text"] for t in transcripts}
        assert forced["turn-two-calls"].startswith("<reason>") and "<calls>[" in forced["turn-two-calls"], forced
        results = [json.loads(line) for line in (tmp_path / "gate" / side / "results.jsonl").read_text().splitlines()[1:]]
        assert {(r["case_id"], r["mode"]): r["outcome"] for r in results} == {
            (case, mode): "pass" for case in cases for mode in ("non-stream", "stream")}, (
            side, [r["checks"] for r in results if r["outcome"] != "pass"])
