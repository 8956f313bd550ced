"""Real clients over recorded answers (fast tier): synthetic recordings written by the real writers,
served by the loopback replay server to openai-python, LangChain, LiteLLM and the AI SDK (Node)
through `conformance clients`; each known-bad stream shape gives the client-specific outcome."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from importlib.metadata import version

import pytest
from client_samples import samples, write_recording

from conformance.cli import main
from conformance.clients.compare import differences, message_outcome
from conformance.clients.record import CLIENTS_FILE, read_findings
from conformance.clients.replay_server import answer_of, running
from conformance.record.recording import RecordingError


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """(exit code, header, {(case, mode, api): finding}, clients.md) of one replay of every sample."""
    run_dir = write_recording(tmp_path_factory.mktemp("clients"), samples())
    code = main(["clients", str(run_dir)])
    header, findings = read_findings(run_dir / CLIENTS_FILE)
    return code, header, {(f.case_id, f.mode, f.api): f for f in findings}, (run_dir / "clients.md").read_text()


def names(finding) -> list[str]:
    return [call["name"] for call in finding.rebuilt["tool_calls"]]


def test_the_replay_server_sends_the_recorded_lines_and_refusals_as_recorded():
    stream = next(t for t in samples() if t.case_id == "name-on-every-delta")
    refused = next(t for t in samples() if t.case_id == "refused" and t.mode == "stream")
    with running() as server:
        base = [server.base_url(server.register(answer_of(t))) for t in (stream, refused)]
        request = urllib.request.Request(base[0] + "/chat/completions", data=b'{"stream": true}', method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            assert answer.read() == b"".join(f"data: {line.data}\n\n".encode() for line in stream.sse)
        with pytest.raises(urllib.error.HTTPError) as refusal:
            urllib.request.urlopen(urllib.request.Request(base[1] + "/chat/completions", data=b"{}"), timeout=10)
        assert refusal.value.code == 400 and json.loads(refusal.value.read()) == refused.error_body
        assert server.requests(0) == [{"stream": True}]


def test_every_client_ran_and_its_version_is_recorded(replayed):
    code, header, findings, _ = replayed
    assert code == 0
    assert header["clients"]["openai-python"]["version"] == version("openai")
    assert header["clients"]["litellm"]["version"] == version("litellm")
    assert header["clients"]["langchain-openai"]["version"].startswith(version("langchain-openai"))
    assert header["clients"]["ai-sdk"]["version"].startswith("ai 7.")
    assert not [f for f in findings.values() if f.outcome == "not_run"]
    assert {f.client for f in findings.values()} == {"openai-python", "langchain-openai", "litellm", "ai-sdk"}


def test_a_good_whole_call_is_rebuilt_by_every_client_but_langchain_drops_the_reasoning(replayed):
    _, _, findings, _ = replayed
    for (case, _, api), finding in findings.items():
        if case == "good-whole-call":
            assert names(finding) == ["get_weather"], api
            assert finding.rebuilt["tool_calls"][0]["arguments"] == {"json": {"city": "Paris"}}, api
            assert finding.outcome == ("lost" if api == "langchain.stream" else "same"), api


def test_a_name_repeated_on_every_delta_is_concatenated_replaced_or_matched_by_id(replayed):
    _, _, findings, _ = replayed
    rebuilt = {api: names(f) for (case, _, api), f in findings.items() if case == "name-on-every-delta"}
    assert rebuilt == {
        "openai.create-stream": ["get_weather" * 3],  # deltas added up as the SDK's types invite
        "openai.stream-helper": ["get_weather" * 3],  # the SDK's accumulator appends every name
        "langchain.stream": ["get_weather" * 3],  # chunk + chunk appends too
        "litellm.completion-stream": ["get_weather"],  # stream_chunk_builder replaces
        "ai-sdk.streamText": ["get_weather"],  # matched by id: one call
    }


def test_a_tool_call_delta_without_index_crashes_the_openai_stream_helper(replayed):
    _, _, findings, _ = replayed
    helper = findings[("missing-index", "stream", "openai.stream-helper")]
    assert helper.outcome == "raised" and helper.error.startswith("TypeError: list indices must be integers")
    for api in ("openai.create-stream", "langchain.stream", "litellm.completion-stream", "ai-sdk.streamText"):
        assert names(findings[("missing-index", "stream", api)]) == ["get_weather"], api


@pytest.mark.parametrize("case", ["length-after-call", "length-after-call-strict"])
def test_finish_reason_length_after_a_call_makes_the_stream_helper_raise(replayed, case):
    _, _, findings, _ = replayed
    helper = findings[(case, "stream", "openai.stream-helper")]
    assert helper.outcome == "raised" and helper.error.startswith("LengthFinishReasonError")
    for api in ("openai.create-stream", "langchain.stream", "litellm.completion-stream", "ai-sdk.streamText"):
        assert findings[(case, "stream", api)].outcome == "same", api


@pytest.mark.parametrize("case, mode", [("reasoning-field", "stream"), ("reasoning-field", "non-stream"),
                                        ("reasoning-content-field", "stream")])
def test_langchain_drops_reasoning_litellm_and_the_ai_sdk_keep_it(replayed, case, mode):
    _, _, findings, _ = replayed
    by_api = {api: f for (c, m, api), f in findings.items() if (c, m) == (case, mode)}
    langchain = by_api.pop("langchain.stream" if mode == "stream" else "langchain.invoke")
    assert langchain.outcome == "lost"
    assert langchain.differences == [{"field": "reasoning", "server": "plan", "client": None}]
    for api, finding in by_api.items():
        # the LiteLLM driver reads `reasoning_content` only: "plan" there is LiteLLM's mapping of `reasoning`
        assert finding.outcome == "same" and finding.rebuilt["reasoning"] == "plan", api


@pytest.mark.parametrize("mode", ["non-stream", "stream"])
def test_every_client_raises_a_refusal_with_the_servers_message(replayed, mode):
    _, _, findings, _ = replayed
    refused = [f for (case, m, _), f in findings.items() if (case, m) == ("refused", mode)]
    assert len(refused) == (4 if mode == "non-stream" else 5)
    for finding in refused:
        assert finding.outcome == "same" and "cannot guarantee required tool choice" in finding.error, finding.api


def test_a_stream_client_yielding_chunk_by_chunk_shows_the_name_at_the_servers_chunk(replayed):
    _, _, findings, _ = replayed
    streamed = [f for (_, _, api), f in findings.items() if api == "openai.create-stream" and f.server_first_name_chunk]
    assert streamed and all(f.first_name_item == f.server_first_name_chunk for f in streamed)


def test_the_report_lists_each_loss_and_rejection_with_the_clients_error(replayed):
    _, _, findings, report = replayed
    assert "| `langchain.invoke` |" in report
    rows = [line for line in report.splitlines() if line.startswith("| hf | `openai.stream-helper` | missing-index")]
    assert len(rows) == 1 and "raised" in rows[0] and "TypeError" in rows[0]


def test_a_client_that_cannot_run_is_not_run_with_its_reason_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("CONFORMANCE_NODE_CLIENTS", str(tmp_path / "nowhere"))
    run_dir = write_recording(tmp_path, samples()[:1])
    assert main(["clients", str(run_dir), "--client", "ai-sdk"]) == 2
    header, findings = read_findings(run_dir / CLIENTS_FILE)
    assert header["clients"]["ai-sdk"]["version"] is None
    assert findings and all(f.outcome == "not_run" and "npm ci" in f.reason for f in findings)


def test_a_directory_without_a_recording_is_exit_2(tmp_path, capsys):
    assert main(["clients", str(tmp_path)]) == 2
    assert "no transcripts.jsonl" in capsys.readouterr().err


def test_a_bad_clients_record_is_refused_naming_line_and_field(tmp_path, replayed):
    _, header, findings, _ = replayed
    record = next(iter(findings.values())).to_dict() | {"outcome": "fine"}
    path = tmp_path / CLIENTS_FILE
    path.write_text(json.dumps(header) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(RecordingError, match=r":2: not a client finding: field 'outcome'"):
        read_findings(path)


def test_an_empty_field_the_server_filled_is_lost_anything_else_changed():
    server = {"reasoning": "plan", "content": "x", "tool_calls": [{"name": "f", "arguments": {"json": {}}}]}
    assert message_outcome(differences(server, server)) == "same"
    assert message_outcome(differences(server, {**server, "reasoning": None, "tool_calls": []})) == "lost"
    assert message_outcome(differences(server, {**server, "content": "y"})) == "changed"
    assert message_outcome(differences({**server, "tool_calls": []}, server)) == "changed"


def test_a_bad_transcripts_line_is_exit_2_naming_file_and_line(tmp_path, capsys):
    run_dir = write_recording(tmp_path, samples()[:1])
    with (run_dir / "transcripts.jsonl").open("a") as handle:
        handle.write("{not json\n")
    assert main(["clients", str(run_dir)]) == 2
    assert f"{run_dir / 'transcripts.jsonl'}:3: not valid JSON" in capsys.readouterr().err


def test_a_gate_directory_replays_both_sides_into_one_report(tmp_path):
    good = [t for t in samples() if t.case_id == "reasoning-field" and t.mode == "non-stream"]
    for side, profile in (("baseline", "legacy"), ("candidate", "hf")):
        good[0].profile = profile
        write_recording(tmp_path / side, good)
    assert main(["clients", str(tmp_path), "--client", "openai-python"]) == 0
    assert {read_findings(tmp_path / side / CLIENTS_FILE)[1][0].profile for side in ("baseline", "candidate")} == {"hf", "legacy"}
    assert "| client call | hf | legacy |" in (tmp_path / "clients.md").read_text()
