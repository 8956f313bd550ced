"""`conformance summary DIR...` over recorded gates and runs (fast tier): each gate's verdict class, the page in
Markdown and HTML linked to each gate's report, the exit code a CI merge job fails with; and the gate's
annotations pointing at the expectations file."""

from __future__ import annotations

import json
from pathlib import Path

from markdown_it import MarkdownIt

from conformance.cli import main
from conformance.compare.gate import build_gate
from conformance.report.gate.annotations import annotations
from tests.engine_helpers import response_transcript
from tests.fake_server import fake_server
from tests.test_gate import cases_dir, named, ns_call, recording, result  # noqa: F401 (cases_dir: a fixture)


def _gate_dir(directory: Path, gate: dict, checkpoint: str) -> Path:
    """A gate directory as `conformance gate` leaves it: gate.json (and the report the summary links to)."""
    directory.mkdir(parents=True)
    for side in ("baseline", "candidate"):
        gate["sides"][side]["stamp"] |= {"model": checkpoint, "response_format": "gemma4"}
    (directory / "gate.json").write_text(json.dumps(gate))
    (directory / "report.md").write_text("# the gate's own report\n")
    return directory


def _call(arguments: str, case_id: str = "cast") -> object:
    return named(response_transcript(ns_call(arguments), "tool_calls"), case_id)


def _gates(root: Path) -> dict[str, Path]:
    same = build_gate(recording("legacy", [_call('{"days": 3}')]), recording("hf", [_call('{"days": 3}')]), [])
    differs = build_gate(recording("legacy", [_call('{"days": "3"}')]), recording("hf", [_call('{"days": 3}')]), [])
    newly_failing = build_gate(recording("legacy", [_call('{"days": 3}', "broken")]),
                               recording("hf", [_call('{"days": 3}', "broken")],
                                         [result("broken", "non-stream", "fail")]), [])
    interrupted = build_gate(recording("legacy", [_call('{"days": 3}')]), recording("hf", []), [],
                             interrupted="SIGTERM")
    return {"passed": _gate_dir(root / "gate-a", same, "org/a"),
            "needs acknowledging": _gate_dir(root / "gate-b", differs, "org/b"),
            "broke": _gate_dir(root / "gate-c", newly_failing, "org/c"),
            "interrupted": _gate_dir(root / "gate-d", interrupted, "org/d")}


def test_each_gate_gets_its_verdict_class_and_a_link_to_its_report(tmp_path, capsys):
    gates = _gates(tmp_path / "gates")
    out = tmp_path / "summary"
    assert main(["summary", *map(str, gates.values()), "--out", str(out), "--json", "-"]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    verdicts = {row["checkpoint"]: row["verdict"] for row in summary["rows"]}
    assert verdicts == {"org/a": "passed", "org/b": "needs acknowledging", "org/c": "broke", "org/d": "broke"}
    assert summary["counts"] == {"passed": 1, "needs acknowledging": 1, "broke": 2}
    assert "4 gates and runs: 1 passed, 1 needs acknowledging, 2 broke" in captured.err
    row = next(row for row in summary["rows"] if row["checkpoint"] == "org/b")
    assert row["servers"] == "legacy -> hf" and row["format"] == "gemma4" and row["unacknowledged"] == 1
    assert (out / row["report_md"]).resolve() == (gates["needs acknowledging"] / "report.md").resolve()

    markdown = (out / "summary.md").read_text()
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    cells = [t.children[0].content if t.children else "" for t in tokens if t.type == "inline"]
    assert cells.count("⚠️ needs acknowledging") == 1 and cells.count("❌ broke") == 2
    links = [child.attrs["href"] for t in tokens if t.type == "inline" for child in t.children or []
             if child.type == "link_open"]
    assert sorted((out / link).resolve() for link in links) == sorted((g / "report.md").resolve() for g in gates.values())
    assert len(markdown.encode()) < 1024 * 1024  # GitHub's step summary limit
    page = (out / "summary.html").read_text()
    assert page.count('<tr class="broke">') == 2 and 'href="../gates/gate-a/report.html"' in page


def test_only_passing_gates_and_runs_exit_0_and_a_run_directory_is_read_too(cases_dir, tmp_path, capsys):  # noqa: F811
    gates = _gates(tmp_path / "gates")
    with fake_server() as server:
        assert main(["run", "--base-url", server.base_url, "--model", "fake", "--profile", "hf", "--cases",
                     str(cases_dir), "--forcing", "trust", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["summary", str(gates["passed"]), str(tmp_path / "run"), "--out", str(tmp_path / "s")]) == 0
    assert "2 gates and runs: 2 passed" in capsys.readouterr().out
    assert "| `fake` | `qwen3-hermes` | `hf` | ✅ passed |" in (tmp_path / "s" / "summary.md").read_text()


def test_a_directory_holding_no_gate_is_skipped_with_a_warning_and_none_at_all_is_exit_2(tmp_path, capsys):
    gates = _gates(tmp_path / "gates")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "gate.json").write_text("{not json")
    assert main(["summary", str(gates["passed"]), str(tmp_path / "empty"), str(tmp_path / "broken"),
                 "--out", str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    assert "empty: neither a gate (gate.json) nor a run (run.json)" in err and "broken/gate.json: not valid JSON" in err
    assert main(["summary", str(tmp_path / "empty"), "--out", str(tmp_path / "t")]) == 2
    assert "no gate or run could be read" in capsys.readouterr().err


def test_annotations_point_at_the_acknowledge_line_of_the_expect_file_and_stale_entries_at_theirs(tmp_path):
    gate = build_gate(recording("legacy", [_call('{"days": "3"}')]), recording("hf", [_call('{"days": "3"}')]), [])
    gate["differences"] = build_gate(recording("legacy", [_call('{"days": "3"}')]),
                                     recording("hf", [_call('{"days": 3}')]), [])["differences"]
    gate["stale"] = [{"source": "expect.yaml:7", "kind": "arguments_type", "selector": {"case": "x"}, "reason": "r"}]
    gate["expectations"] = {"file": "ci/expect.yaml", "note": "given with --expect", "line": 3}
    lines = annotations(gate)
    assert lines[0].startswith("::error file=ci/expect.yaml,line=3,title=Unacknowledged")
    assert lines[-1].startswith("::warning file=ci/expect.yaml,line=7,title=Stale expectation")
    gate["expectations"] = {"file": None, "note": "shipped"}
    assert annotations(gate)[0].startswith("::error title=Unacknowledged")  # no file of the repository to point at
