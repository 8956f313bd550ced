"""The gate between two implementations of the same contract (vllm tier): vLLM 0.32's Python frontend
(`hf`) -> its Rust frontend (`hf-rust`), both launched by `conformance gate` itself on the tiny checkpoint.

The differences it must find are the ones seen on the real servers (../shared/facts/rust-frontend.md):
the named tool choice hf refuses is accepted, the browser preflight hf refuses with 400 is answered 200
(still without Access-Control-Allow-Origin), and, while the hf-rust record cannot force outputs, every
forced case is a skip under the candidate with that reason, never a pass.
"""

from __future__ import annotations

import json

import pytest

from conformance.cases import load_suite
from conformance.cli import main
from conformance.expectations import shipped_expectations
from conformance.profiles import NoForcing, profile_record


@pytest.mark.vllm
def test_the_gate_from_the_python_to_the_rust_frontend_finds_their_real_differences(tmp_path, capsys):
    out = tmp_path / "gate"
    code = main(["gate", "--baseline", "hf", "--candidate", "hf-rust", "--out", str(out)])
    gate = json.loads((out / "gate.json").read_text())
    cases = load_suite(None)
    judged = any("hf-rust" in case.expect for case in cases)  # cases carry hf-rust expectations once recorded
    assert code == (1 if judged else 2), gate["verdict"]["line"]
    assert "expectations: none (no expectations ship for hf -> hf-rust" in capsys.readouterr().err
    assert shipped_expectations("hf", "hf-rust") is None and gate["expectations"]["file"] is None
    sides = gate["sides"]
    assert (sides["baseline"]["stamp"]["profile"], sides["candidate"]["stamp"]["profile"]) == ("hf", "hf-rust")
    assert sides["baseline"]["summary"]["counts"]["pass"] == sides["baseline"]["summary"]["total"]
    assert sides["candidate"]["startup_seconds"] > 0 and sides["candidate"]["stamp"]["server_version"]
    found = {(d["case_id"], d["mode"], d["kind"], d["field"]): d for d in gate["differences"]}

    for mode in ("non-stream", "stream"):  # hf refuses a named tool choice; the Rust frontend answers it
        named = found[("tool-choice-named", mode, "request_accepted", "status")]
        assert (named["baseline"]["status"], named["baseline"]["param"]) == (400, "tool_choice")
        assert named["candidate"] == {"status": 200}
    preflight = found[("cors-preflight-chat-from-browser-origin", "non-stream", "request_accepted", "preflight.status")]
    assert (preflight["baseline"], preflight["candidate"]) == (400, 200)
    cors = gate["cors"]
    assert (cors["baseline"]["status"], cors["candidate"]["status"]) == (400, 200)
    assert cors["candidate"]["headers"]["access-control-allow-origin"] is None  # the browser still blocks
    advice = sides["candidate"]["cors_advice"]
    assert advice.startswith("vLLM 0.32's Rust frontend refuses") and "--allowed-origins '[\"http://localhost:3000\"]'" in advice
    report = (out / "report.md").read_text()
    assert "cannot call `hf-rust` directly" in report and "vLLM 0.32's Rust frontend refuses" in report

    # The contract matrix of the gate's two recordings shows the same preflight difference, with no server.
    assert main(["contract", str(out), "--out", str(tmp_path / "matrix")]) == 0
    matrix = (tmp_path / "matrix" / "contract.md").read_text()
    row = next(line for line in matrix.splitlines() if line.startswith("| `cors-preflight-chat-from-browser-origin`"))
    base, cand = row.split(" | ")[2:4]
    assert base.startswith("`HTTP 400, access-control-allow-origin: absent`")
    assert cand.startswith("**≠** `HTTP 200, access-control-allow-origin: absent`") and "preflight.status" in cand

    if isinstance(profile_record("hf-rust").forcing, NoForcing):
        reason = profile_record("hf-rust").forcing.reason
        for case in (c for c in cases if c.force is not None):
            for mode in case.modes:
                outcome = found[(case.id, mode, "outcome", None)]
                assert (outcome["baseline"], outcome["candidate"]) == ("pass", "skip") and reason in outcome["summary"]


@pytest.mark.vllm
def test_the_cors_advice_of_both_vllm_frontends_lets_the_browser_origin_in(tiny_checkpoint, tmp_path):
    """What the hf and hf-rust records advise (`--allowed-origins '[ORIGIN]'`, a flag of the server itself)
    makes each real server answer the origin's preflight with 200 and that Access-Control-Allow-Origin."""
    import asyncio
    import dataclasses

    from conformance.driver import Target
    from conformance.gate_live import send_preflight
    from conformance.profiles import cors_advice_for
    from conformance.server import start

    origin = "http://localhost:3000"
    flag = ("--allowed-origins", json.dumps([origin]))
    processes = []
    try:
        for name in ("hf", "hf-rust"):
            assert f"`{flag[0]} '{flag[1]}'`" in cors_advice_for(name, origin)
            record = profile_record(name)
            advised = dataclasses.replace(record, launch=dataclasses.replace(record.launch,
                                                                             flags=(*record.launch.flags, *flag)))
            processes.append(start(advised, tiny_checkpoint, log_dir=tmp_path))
        servers = [process.wait_until_healthy() for process in processes]
        for server in servers:
            target = Target(base_url=server.base_url, model=server.model, profile=server.profile.name)
            answer = asyncio.run(send_preflight(target, origin))
            assert (answer["status"], answer["headers"]["access-control-allow-origin"]) == (200, origin), server.profile.name
    finally:
        for process in processes:
            process.stop()
