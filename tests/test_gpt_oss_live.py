"""gpt-oss's tiny checkpoint on real vLLM 0.32 (vllm tier): `model_type: gpt_oss` switches vLLM to harmony.

The legacy profile (`--tool-call-parser openai --reasoning-parser openai_gptoss`) starts on it, but harmony renders
every chat prompt in o200k_harmony's token ids, which the tiny vocabulary does not hold: each chat request is a 400.
The hf profile refuses the checkpoint at start-up ("Harmony requires GptOssReasoningParser, ..."), the refusal the
audit predicts from vLLM's code, and a legacy -> hf gate on the gpt-oss format has that refusal as its verdict.
One legacy server, attached to the gate as its baseline, then hf: two server starts in all."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.predictors.vllm_032 import HARMONY_REASONING
from conformance.cli import main
from conformance.formats.registry import FORMATS
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.launch import Server, launch
from conformance.servers.profiles import served_profile
from conformance.util import exit_codes

pytestmark = pytest.mark.vllm

GPT_OSS = FORMATS["gpt-oss"]
O200K_HARMONY_FIRST_SPECIAL = 199998  # o200k_harmony's special tokens (<|startoftext|> ... <|call|>) start here


def _refused_chat(server: Server) -> tuple[int, str]:
    body = {"model": server.model, "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 8}
    request = urllib.request.Request(server.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=120)
    return refused.value.code, json.loads(refused.value.read())["error"]["message"]


def test_hf_refuses_gpt_oss_at_start_up_as_predicted_and_that_is_the_gates_verdict(tmp_path: Path, capsys) -> None:
    checkpoint = build_fixture(tmp_path / "gpt-oss", "full", GPT_OSS)
    predicted = audit_local(checkpoint).vllm_0_32["both"]  # hf is launched with both parsers
    assert not predicted.starts and predicted.error == HARMONY_REASONING
    vocabulary = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    with launch(served_profile("legacy", GPT_OSS), checkpoint, log_dir=tmp_path / "legacy") as legacy:
        status, message = _refused_chat(legacy)
        assert status == 400 and re.fullmatch(r"Token id (\d+) is out of vocabulary", message), message
        assert int(message.split()[2]) >= O200K_HARMONY_FIRST_SPECIAL > vocabulary  # harmony's ids, not the tiny ones
        code = main(["gate", "--format", "gpt-oss", "--model", str(checkpoint), "--baseline", legacy.base_url,
                     "--baseline-model", legacy.model, "--baseline-profile", "legacy", "--no-expect",
                     "--granularities", "none", "--second-turn", "none", "--out", str(tmp_path / "gate")])
    assert code == exit_codes.FAILED
    record = json.loads((tmp_path / "gate" / "gate.json").read_text())
    refusal = record["refused_to_start"]
    assert (refusal["side"], refusal["profile"], refusal["server"]) == ("candidate", "hf", "vLLM")
    # the server's own line: the audit's predicted message is its innermost cause
    assert refusal["message"].startswith("TypeError: --tool-call-parser hf and --reasoning-parser hf cannot be used "
                                         "with the tokenizer of ")
    assert refusal["message"].endswith(": " + predicted.error)
    assert record["verdict"]["line"] == f"the candidate hf refuses to start this checkpoint: {refusal['message']}"
    assert record["verdict"]["compared"] == 0
    assert record["sides"]["baseline"]["stamp"]["completion"] == "not run: the candidate server refused to start"
    report = [line for line in (tmp_path / "gate" / "report.md").read_text().splitlines() if line]
    assert "refuses to start" in report[0] and report[1] == f"**vLLM said**: `{refusal['message']}`"
    assert f"predicted to refuse this checkpoint ({HARMONY_REASONING})" in capsys.readouterr().err
