"""The gate between two implementations of the same contract (vllm tier): vLLM 0.32's Python frontend
(`hf`) -> its Rust frontend (`hf-rust`), both launched by `conformance gate` itself on the tiny checkpoint.

The differences it must find are the ones seen on the real servers (../shared/facts/rust-frontend.md):
the named tool choice hf refuses is accepted, the browser preflight hf refuses with 400 is answered 200
(still without Access-Control-Allow-Origin), and the forced outputs' reasoning comes back trimmed. No
expectations ship for this pair, so every difference is unacknowledged: exit 1. A gate with
transformers-serve launches it on its record's fixture variant, the baseline on the full checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.compare.expectations import shipped_expectations
from conformance.servers.profiles import profile_record
from tests.engine_helpers import modes_not_sent


@pytest.mark.vllm
def test_the_gate_from_the_python_to_the_rust_frontend_finds_their_real_differences(tmp_path, capsys):
    out = tmp_path / "gate"
    code = main(["gate", "--baseline", "hf", "--candidate", "hf-rust", "--out", str(out)])
    gate = json.loads((out / "gate.json").read_text())
    assert code == 1, gate["verdict"]["line"]
    assert "expectations: none (no expectations ship for hf -> hf-rust" in capsys.readouterr().err
    assert shipped_expectations("hf", "hf-rust") is None and gate["expectations"]["file"] is None
    sides = gate["sides"]
    assert (sides["baseline"]["stamp"]["profile"], sides["candidate"]["stamp"]["profile"]) == ("hf", "hf-rust")
    for side in ("baseline", "candidate"):  # each judged on its own expectations, forced outputs included
        counts, total = sides[side]["summary"]["counts"], sides[side]["summary"]["total"]
        not_sent = len(modes_not_sent(sides[side]["stamp"]["profile"]))
        assert (counts["pass"], counts["skip"]) == (total - not_sent, not_sent), side
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

    # The Rust frontend refuses a turn 2 carrying reasoning under both names (its declared bug, a finding there);
    # the Python frontend renders it: a second turn refused on one side only.
    for case_id in ("turn-reasoning-then-call", "turn-two-calls"):
        refused = found[(case_id, "turn2@both-reasoning-fields", "multi_turn", "status")]
        assert refused["candidate"]["status"] == 400 and "duplicate field `reasoning`" in refused["candidate"]["message"]
    candidate = [json.loads(line) for line in (out / "candidate" / "results.jsonl").read_text().splitlines()[1:]]
    known = [r for r in candidate if any(c["name"] == "known_refusal" for c in r["checks"])]
    assert {r["mode"] for r in known} == {"turn2@both-reasoning-fields"} and all(r["outcome"] == "pass" for r in known)
    # its /tokenize renders no conversation (the profile record says so): the prompt is not judged, by name
    prompt_checks = [c for r in candidate if r["mode"].startswith("turn2@") for c in r["checks"]
                     if c["name"] == "second_turn_prompt"]
    assert prompt_checks and all(c["outcome"] == "skip" and "does not render a conversation" in c["reason"]
                                 for c in prompt_checks)

    reasoning = found[("reasoning-then-one-call", "non-stream", "message", "reasoning")]  # the Rust frontend trims
    assert (reasoning["baseline"], reasoning["candidate"]) == ("\nThe user wants weather.\n", "The user wants weather.")


@pytest.mark.vllm
def test_the_cors_advice_of_both_vllm_frontends_lets_the_browser_origin_in(tiny_checkpoint, tmp_path):
    """What the hf and hf-rust records advise (`--allowed-origins '[ORIGIN]'`, a flag of the server itself)
    makes each real server answer the origin's preflight with 200 and that Access-Control-Allow-Origin."""
    import asyncio
    import dataclasses

    from conformance.run.driver import Target
    from conformance.run.gate_sides import send_preflight
    from conformance.servers.launch import start
    from conformance.servers.profiles import cors_advice_for

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


@pytest.mark.vllm
def test_a_gate_launches_each_side_on_the_fixture_variant_its_record_asks_for(tmp_path):
    """hf -> transformers-serve: hf serves the full tiny checkpoint, transformers serve the variant whose
    content closes on the end token (its record's fixture_variant); both are judged on their own
    expectations, and the preflight hf refuses with 400 is a 405 there."""
    out = tmp_path / "gate"
    code = main(["gate", "--baseline", "hf", "--candidate", "transformers-serve", "--out", str(out),
                 "--case", "reasoning-then-one-call", "--case", "cors-preflight-chat-from-browser-origin"])
    gate = json.loads((out / "gate.json").read_text())
    assert code == 1, gate["verdict"]["line"]  # no expectations ship for this pair
    sides = gate["sides"]
    served = {side: json.loads((out / side / "run.json").read_text()) for side in ("baseline", "candidate")}
    checkpoints = {side: run["stamp"]["model"] for side, run in served.items()}  # the directory it was started on
    assert Path(checkpoints["baseline"]).name == "checkpoint"
    assert Path(checkpoints["candidate"]).name == "checkpoint-" + profile_record("transformers-serve").fixture_variant
    # transformers serve refuses a request's stream_interval: its two granular streams of the forced case are skipped
    not_asked = {"baseline": 0, "candidate": 2}
    for side in ("baseline", "candidate"):
        counts, total = sides[side]["summary"]["counts"], sides[side]["summary"]["total"]
        assert (counts["pass"], counts["skip"]) == (total - not_asked[side], not_asked[side]), side
    skipped = [json.loads(line) for line in (out / "candidate" / "results.jsonl").read_text().splitlines()[1:]]
    assert {(r["mode"], r["skip_kind"]) for r in skipped if r["outcome"] == "skip"} == {
        ("stream@3", "granularity_not_asked"), ("stream@whole", "granularity_not_asked")}
    found = {(d["case_id"], d["mode"], d["kind"], d["field"]): d for d in gate["differences"]}
    [preflight] = [d for d in gate["differences"]
                   if d["case_id"] == "cors-preflight-chat-from-browser-origin" and d["kind"] == "request_refused"]
    assert "answered HTTP 400 under the baseline, 405" in preflight["summary"]
    assert {kind for (case, _, kind, _) in found if case == "reasoning-then-one-call"} >= {"reasoning_field"}
