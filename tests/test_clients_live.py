"""The default case set's recordings from the real servers (hf, legacy, hf-rust, transformers-serve)
through all four real clients (vllm tier): what docs/vllm-0.32-contract.md section 8 says each client does."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from test_live_conformance import live_run

from conformance.cli import main
from conformance.clients.record import CLIENTS_FILE, read_recording
from conformance.record.wire import read_stream

pytestmark = pytest.mark.vllm
CONTRACT = Path(__file__).resolve().parents[1] / "docs" / "vllm-0.32-contract.md"


@pytest.fixture(scope="module")
def replayed(hf_server, legacy_server, hf_rust_server, transformers_serve_server, tiny_checkpoint, tmp_path_factory):
    """{profile: (findings, transcripts by (case, mode), idiom findings)} after `conformance clients` over each live run."""
    out = {}
    for server in (hf_server, legacy_server, hf_rust_server, transformers_serve_server):
        run_dir = tmp_path_factory.mktemp(f"clients-{server.profile.name}")
        _, transcripts = live_run(server, tiny_checkpoint, run_dir)
        assert main(["clients", str(run_dir)]) == 0
        _, findings, idioms = read_recording(run_dir / CLIENTS_FILE)
        out[server.profile.name] = (findings, {(t.case_id, t.mode): t for t in transcripts}, idioms)
    return out


@pytest.mark.parametrize("profile", ["hf", "legacy", "hf-rust", "transformers-serve"])
def test_every_recorded_chat_answer_went_through_every_client(replayed, profile):
    findings, transcripts, _ = replayed[profile]
    answered = {key for key, t in transcripts.items() if t.endpoint == "chat" and t.status is not None}
    ran = {(f.case_id, f.mode) for f in findings if f.outcome != "not_run"}
    assert ran == answered
    per_mode = {"non-stream": 4, "stream": 5}
    for key in answered:
        assert sum((f.case_id, f.mode) == key and f.outcome != "not_run" for f in findings) == per_mode[key[1]], key
    assert all(f.reason.startswith(("endpoint ", "no answer recorded")) for f in findings if f.outcome == "not_run")


def test_under_hf_every_client_but_langchain_and_the_stream_helper_rebuilds_every_answer(replayed):
    findings, _, _ = replayed["hf"]
    for finding in findings:
        if finding.outcome != "not_run" and finding.client in ("openai-python", "litellm", "ai-sdk") \
                and finding.api != "openai.stream-helper":
            assert finding.outcome == "same", (finding.case_id, finding.mode, finding.api, finding.reason)


@pytest.mark.parametrize("profile", ["hf", "legacy"])
def test_langchain_loses_the_reasoning_of_every_answer_that_has_some(replayed, profile):
    findings, _, _ = replayed[profile]
    with_reasoning = [f for f in findings if f.client == "langchain-openai" and f.server and f.server["reasoning"]]
    assert with_reasoning
    for finding in with_reasoning:
        assert finding.outcome == "raised" or {"field": "reasoning", "server": finding.server["reasoning"],
                                               "client": None} in finding.differences, finding.case_id


@pytest.mark.parametrize("profile", ["hf", "legacy"])
def test_the_stream_helper_raises_length_exactly_on_streams_cut_by_max_tokens(replayed, profile):
    findings, transcripts, _ = replayed[profile]
    helper = {f.case_id: f for f in findings if f.api == "openai.stream-helper" and f.outcome != "not_run"}
    for case, finding in helper.items():
        transcript = transcripts[(case, "stream")]
        cut = transcript.status == 200 and read_stream(transcript).message.finish_reason == "length"
        assert (finding.outcome == "raised" and finding.error.startswith("LengthFinishReasonError")) == cut, case


def test_every_client_carries_hf_refusals_with_the_servers_message(replayed):
    findings, _, _ = replayed["hf"]
    refused = [f for f in findings if f.status == 400 and f.outcome != "not_run"]  # preflights are not replayed
    assert {f.case_id for f in refused} >= {"tool-choice-required", "tool-choice-named", "strict-tool",
                                            "parallel-tool-calls-false"}
    assert all(f.outcome == "same" for f in refused), [(f.case_id, f.api, f.reason) for f in refused if f.outcome != "same"]


def test_langchain_refuses_hermes_arguments_sent_as_a_json_string(replayed):
    findings, _, _ = replayed["legacy"]
    invoke = next(f for f in findings if (f.case_id, f.api) == ("arguments-as-json-string", "langchain.invoke"))
    assert invoke.outcome == "raised" and "Input should be a valid dictionary" in invoke.error
    stream = next(f for f in findings if (f.case_id, f.api) == ("malformed-call-alone", "langchain.stream"))
    assert stream.outcome == "changed"
    assert stream.differences == [{"field": "tool_calls[0].arguments", "server": {"raw": '{"city": "A"'},
                                   "client": {"json": {"city": "A"}}}]


def test_the_contract_documents_matrix_is_what_the_clients_did(replayed):
    """Section 8's table, row by row, against these recordings (not-run calls left out)."""
    from conformance.clients.jobs import CLIENT_OF
    from conformance.report.clients.markdown import counts_text

    table, profiles = {}, []
    for line in CONTRACT.read_text(encoding="utf-8").split('<a id="8"></a>')[1].split('<a id="8.1"></a>')[0].splitlines():
        cells = [part.strip() for part in line.strip().strip("|").split("|")]
        if line.startswith("| client call |"):
            profiles = cells[1:]
        elif line.startswith("| `"):
            table[cells[0].split("`")[1]] = dict(zip(profiles, cells[1:]))
    assert set(table) == set(CLIENT_OF) and set(profiles) == set(replayed)
    for profile, (findings, _, _) in replayed.items():
        for api in CLIENT_OF:
            counted = Counter(f.outcome for f in findings if f.api == api and f.outcome != "not_run")
            assert counts_text(counted) == table[api][profile], (profile, api)


def test_each_client_idiom_hands_its_caller_what_section_8_1_says(replayed):
    from conformance.clients.idioms import IDIOMS, idiom_body
    from conformance.suite.cases import load_suite

    cases = {case.id: case for case in load_suite()}
    for profile in ("hf", "legacy"):
        idioms = {i.idiom: i for i in replayed[profile][2]}
        assert set(idioms) == {idiom.name for idiom in IDIOMS}, profile
        for idiom in idioms.values():
            assert idiom.sent == idiom_body(cases[idiom.case_id].request), idiom.idiom
    for idiom in replayed["hf"][2]:
        assert idiom.status == 400 and idiom.raised, idiom.idiom
        assert cases[idiom.case_id].expect["hf"].error.message in idiom.surfaced, idiom.idiom
    legacy = {i.idiom: i for i in replayed["legacy"][2]}
    for name, idiom in legacy.items():
        assert idiom.status == 200, name
        if name.startswith("LangChain"):
            assert idiom.raised and "ValidationError" in idiom.surfaced and "Input should be a valid dictionary" in idiom.surfaced
        elif "pydantic_function_tool" in name:
            assert idiom.raised and idiom.surfaced.startswith("LengthFinishReasonError")
        elif idiom.case_id == "client-idiom-parallel-tool-calls-false":
            assert not idiom.raised and '"name": "get_weather"' in idiom.surfaced and "Paris" in idiom.surfaced
        else:  # LiteLLM and the AI SDK hand back the grammar's call as it came
            assert not idiom.raised and '"arguments": "true"' in idiom.surfaced, name


@pytest.mark.parametrize("profile", ["hf-rust", "transformers-serve"])
def test_the_ai_sdk_enforces_the_tool_choice_the_server_accepted_and_did_not_enforce(replayed, profile):
    """Section 8: both accept a named or `none` tool choice and answer as without it; the AI SDK's
    generateText then raises AI_ToolChoiceViolationError itself, where the other clients hand the answer on."""
    findings, _, _ = replayed[profile]
    raised = {(f.case_id, f.reason) for f in findings if f.api == "ai-sdk.generateText" and f.outcome == "raised"}
    assert ("tool-choice-named", "AI_ToolChoiceViolationError: Model response did not contain a call to the "
                                 "required tool 'get_weather'.") in raised
    assert ("tool-choice-none", "AI_ToolChoiceViolationError: Model response contained a tool call even though "
                                "tool choice was none.") in raised
    others = {f.outcome for f in findings if f.case_id in ("tool-choice-named", "tool-choice-none")
              and f.mode == "non-stream" and f.client in ("openai-python", "litellm")}
    assert others == {"same"}


def test_transformers_serves_422_message_does_not_reach_the_callers(replayed):
    """Section 8: its refusal of `include_reasoning` is FastAPI's `detail` shape, which openai-python,
    LiteLLM and the AI SDK do not read: their error does not carry the server's message."""
    findings, _, _ = replayed["transformers-serve"]
    for api in ("openai.create", "litellm.completion", "ai-sdk.generateText"):
        [finding] = [f for f in findings if f.api == api and f.case_id == "include-reasoning-false"]
        assert finding.outcome == "lost" and "Unexpected fields in the request" in finding.reason, api


@pytest.mark.parametrize("profile", ["hf-rust", "transformers-serve"])
def test_servers_that_accept_every_idiom_enforce_none_of_them(replayed, profile):
    """Section 8.1: 200 for every idiom; the forced cases' call reaches every caller; a named choice
    (unforced) gives no call: silently for LangChain and LiteLLM (`None` from with_structured_output),
    AI_ToolChoiceViolationError from the AI SDK."""
    idioms = {i.idiom: i for i in replayed[profile][2]}
    assert all(i.status == 200 for i in idioms.values())
    for name, idiom in idioms.items():
        if idiom.case_id in ("client-idiom-tool-choice-required", "client-idiom-parallel-tool-calls-false"):
            assert not idiom.raised and '"get_weather"' in idiom.surfaced and "Paris" in idiom.surfaced, name
        elif name.startswith("AI SDK") and idiom.case_id == "client-idiom-tool-choice-named":
            assert idiom.raised and idiom.surfaced.startswith("AI_ToolChoiceViolationError"), name
        elif idiom.case_id == "client-idiom-langchain-structured-output":
            assert not idiom.raised and idiom.surfaced == "None", name
        elif idiom.case_id == "client-idiom-tool-choice-named":
            assert not idiom.raised and idiom.surfaced == "tool_calls: []", name
        else:
            assert idiom.case_id == "client-idiom-openai-pydantic-function-tool" and profile == "hf-rust", name
            assert idiom.raised and idiom.surfaced.startswith("LengthFinishReasonError"), name
