"""Setup mistakes against real vLLM 0.32 (vllm tier): a wrong `--model` name and a wrong API key are
exit 2 with vLLM's own message, never a skip nor a pass. The API-key test starts one extra hf server
with `--api-key` (only when this module's key tests are selected)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.record.results import read_results
from conformance.servers.launch import Server, start

pytestmark = pytest.mark.vllm

SERVER_KEY = "sk-live-server-key-7f3a"
# A forced case, an unforced one, and one whose hf expectation is a 400 refusal (a 404 must not be judged there).
CASES = ["--case", "reasoning-then-one-call", "--case", "tool-choice-named", "--case", "tool-choice-required"]


def conformance_run(server: Server, out: Path, *extra: str) -> int:
    return main(["run", "--base-url", server.base_url, "--profile", "hf", "--out", str(out), *CASES, *extra])


def test_a_wrong_model_name_is_exit_2_with_vllms_message(hf_server, tmp_path, capsys):
    assert conformance_run(hf_server, tmp_path, "--model", "no-such-model") == 2
    results = read_results(tmp_path / "results.jsonl")
    assert len(results) == 6 and {r.outcome for r in results} == {"error"}
    vllm_message = "HTTP 404: The model `no-such-model` does not exist. Valid aliases: "
    assert all(vllm_message in r.reason for r in results), [r.reason for r in results]
    assert "not sent: the forcing probe cannot tell" in next(r.reason for r in results
                                                              if r.case_id == "reasoning-then-one-call")
    assert vllm_message in capsys.readouterr().out  # in the list of errors the run ends with


@pytest.fixture(scope="module")
def keyed_server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    process = start("hf", tiny_checkpoint, extra_args=["--api-key", SERVER_KEY],
                    log_dir=tmp_path_factory.mktemp("keyed-vllm"))
    try:
        yield process.wait_until_healthy()
    finally:
        process.stop()


def test_a_wrong_api_key_is_exit_2_with_vllms_message_and_the_right_one_passes(keyed_server, tmp_path, capsys,
                                                                               monkeypatch):
    model = ["--model", keyed_server.model]
    assert conformance_run(keyed_server, tmp_path / "wrong", *model, "--api-key", "sk-wrong-key") == 2
    results = read_results(tmp_path / "wrong" / "results.jsonl")
    assert len(results) == 6 and {r.outcome for r in results} == {"error"}
    assert all(r.reason.endswith("HTTP 401: Unauthorized") for r in results), [r.reason for r in results]
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)  # honoured when --api-key is not given
    assert conformance_run(keyed_server, tmp_path / "right", *model) == 0
    assert {r.outcome for r in read_results(tmp_path / "right" / "results.jsonl")} == {"pass"}
    captured = capsys.readouterr()
    written = [p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert not any(key in text for key in (SERVER_KEY, "sk-wrong-key")
                   for text in [*written, captured.out, captured.err])
