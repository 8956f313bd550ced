"""A launched side whose server refuses to start (offline, with the loopback fake server as a launched profile):
the candidate's refusal is the gate's verdict (exit 1, gate.json and the reports lead with the server's own
line); the baseline's is an infrastructure error (exit 2); a start that fails otherwise stays an error. The
same against real vLLM 0.32 is in tests/test_gate_refused_live.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conformance.audit.launch_parsers import choose, options_of
from conformance.audit.predictors.vllm_032 import THINKING_REQUIRED, StartupVerdict
from conformance.cli import main
from conformance.compare.summary import row_of
from conformance.formats.registry import DEFAULT_FORMAT
from conformance.report.gate.view import stamp_rows
from conformance.servers.profiles import PROFILES, served_profile
from conformance.servers.vllm import HF_FLAGS, find_vllm_error, is_vllm_refusal
from tests.test_profiles import fake_record, fake_venv

REFUSAL = "response_template contains unsupported semantic fields: ['reasoning_content']"


@pytest.fixture
def fake_profiles(tmp_path, monkeypatch) -> None:
    """`fake-server` starts and serves; `fake-refuses` exits at start-up with `FATAL: <REFUSAL>`; `fake-crashes`
    exits with no error line in its log."""
    venv = fake_venv(tmp_path / "venv")
    monkeypatch.setitem(PROFILES, "fake-server", fake_record(venv))
    monkeypatch.setitem(PROFILES, "fake-refuses", fake_record(venv, "fake-refuses", common_flags=("--fail", REFUSAL)))
    crashes = fake_record(venv, "fake-crashes", common_flags=("--fail", "x"))
    monkeypatch.setitem(PROFILES, "fake-crashes", replace(crashes, launch=replace(crashes.launch, find_error=lambda log: None)))


def gate(tmp_path, baseline: str, candidate: str) -> int:
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    return main(["gate", "--baseline", baseline, "--candidate", candidate, "--model", str(tmp_path / "ckpt"),
                 "--case", "reasoning-then-one-call", "--granularities", "none", "--out", str(tmp_path / "out")])


def test_a_candidate_that_refuses_to_start_fails_the_gate_with_its_own_message_first(fake_profiles, tmp_path, capsys):
    assert gate(tmp_path, "fake-server", "fake-refuses") == 1
    out = tmp_path / "out"
    record = json.loads((out / "gate.json").read_text())
    assert record["verdict"]["outcome"] == "fail" and record["verdict"]["exit_code"] == 1
    assert record["verdict"]["line"] == f"the candidate fake-refuses refuses to start this checkpoint: FATAL: {REFUSAL}"
    refused = record["refused_to_start"]
    assert (refused["side"], refused["profile"], refused["server"], refused["message"]) == (
        "candidate", "fake-refuses", "Fake", f"FATAL: {REFUSAL}")
    assert refused["log"].startswith("candidate/fake-fake-refuses-") and (out / refused["log"]).is_file()
    stamps = {side: record["sides"][side]["stamp"] for side in ("baseline", "candidate")}
    assert stamps["candidate"]["completion"] == "refused to start" and "--fail" in stamps["candidate"]["server_args"]
    assert stamps["baseline"]["server_version"] == "fake-7"  # it started: what it is, though no case was sent
    assert stamps["baseline"]["completion"] == "not run: the candidate server refused to start"
    for report in ("report.md", "summary.md"):
        text = (out / report).read_text()
        heading, first = [line for line in text.splitlines() if line][:2]
        assert heading.startswith("# ❌ FAIL: the candidate") and "refuses to start" in heading, report
        assert first.startswith("**Fake said**") and "unsupported semantic fields" in first, report
    html = (out / "report.html").read_text()
    assert html.index("unsupported semantic fields") < html.index("Servers compared")
    assert "refuses to start" in capsys.readouterr().out
    assert row_of(out, tmp_path)["verdict"] == "broke"  # a CI matrix's summary: nothing to acknowledge


def test_a_baseline_that_refuses_to_start_is_an_infrastructure_error(fake_profiles, tmp_path, capsys):
    assert gate(tmp_path, "fake-refuses", "fake-server") == 2
    error = capsys.readouterr().err
    assert "the baseline fake-refuses refuses to start this checkpoint" in error and REFUSAL in error
    assert not (tmp_path / "out" / "gate.json").exists()


def test_a_candidate_that_crashes_without_an_error_line_stays_an_error(fake_profiles, tmp_path, capsys):
    assert gate(tmp_path, "fake-server", "fake-crashes") == 2
    assert "could not start the candidate server: the fake-crashes server exited with code 1" in capsys.readouterr().err


def test_vllms_refusals_are_its_config_errors_not_faults_of_the_machine():
    log = ("(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n"
           f"(APIServer pid=1)   Value error, {REFUSAL} [type=value_error, input_value=...]\n")
    assert find_vllm_error(log) == REFUSAL and is_vllm_refusal(REFUSAL)
    assert not is_vllm_refusal("OSError: [Errno 98] Address already in use")
    assert not is_vllm_refusal("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")


def verdicts(tool: bool, reasoning: bool) -> dict[str, StartupVerdict]:
    refused = "the template is refused"
    return {"tool_call_parser_hf": StartupVerdict(tool, None if tool else refused),
            "reasoning_parser_hf": StartupVerdict(reasoning, None if reasoning else THINKING_REQUIRED),
            "both": StartupVerdict(tool and reasoning, None if tool and reasoning else THINKING_REQUIRED)}


def test_hf_is_launched_with_the_parsers_the_template_is_predicted_to_start():
    assert options_of(HF_FLAGS) == [("--enable-auto-tool-choice",), ("--tool-call-parser", "hf"),
                                    ("--reasoning-parser", "hf")]
    assert choose(HF_FLAGS, verdicts(True, True), "vLLM 0.32").flags is None  # both start: as recorded
    tool_only = choose(HF_FLAGS, verdicts(True, False), "vLLM 0.32")
    assert tool_only.flags == ("--enable-auto-tool-choice", "--tool-call-parser", "hf")
    assert tool_only.note == (f"--reasoning-parser hf left out: vLLM 0.32 refuses it on this checkpoint "
                              f"({THINKING_REQUIRED}); launched with --enable-auto-tool-choice --tool-call-parser hf")
    none = choose(HF_FLAGS, verdicts(False, False), "vLLM 0.32")
    assert (none.flags, none.note) == (None, None) and "predicted to refuse" in none.message
    launched = served_profile("hf", DEFAULT_FORMAT, tool_only.flags)
    assert launched.launch.flags == tool_only.flags and PROFILES["hf"].launch.flags == HF_FLAGS


def test_a_stamp_row_one_side_alone_has_stays_on_its_line():
    """The launch note (like the server build) is on one side only: before, the rows after it slid by one."""
    stamps = {"baseline": {"profile": "legacy", "recorded_at": "t0", "completion": "complete"},
              "candidate": {"profile": "hf", "launch_note": "--reasoning-parser hf left out", "recorded_at": "t1",
                            "completion": "complete"}}
    rows = {label: (b, c) for label, b, c in stamp_rows({"sides": {side: {"stamp": stamp} for side, stamp in stamps.items()}})}
    assert rows["flags chosen"] == ("none", "--reasoning-parser hf left out")
    assert rows["recorded"] == ("t0", "t1") and rows["run"] == ("complete", "complete")
