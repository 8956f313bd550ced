"""`conformance compare` judges the recorded transcripts again: a results.jsonl the answers do not bear
out never passes a gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from tests.fake_server import fake_server
from tests.test_gate import cases_dir  # noqa: F401 (a fixture)


def record(cases_dir: Path, out: Path, profile: str) -> None:
    with fake_server() as server:
        main(["run", "--base-url", server.base_url, "--model", "fake", "--profile", profile, "--cases", str(cases_dir),
              "--forcing", "trust", "--out", str(out)])


def broken_answers(run_dir: Path) -> None:
    """Every answer of the run replaced by an HTTP 500, its results.jsonl left saying what it said."""
    path = run_dir / "transcripts.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines[1:]:
        line.update(status=500, error_body={"error": {"message": "boom"}}, sse=[], response=None)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture
def runs(cases_dir: Path, tmp_path: Path) -> tuple[Path, Path]:  # noqa: F811 (the fixture above)
    record(cases_dir, tmp_path / "a", "legacy")
    record(cases_dir, tmp_path / "b", "hf")
    return tmp_path / "a", tmp_path / "b"


def test_answers_that_are_all_http_500_beside_results_saying_pass_fail_the_compare(runs, cases_dir, tmp_path, capsys):
    baseline, candidate = runs
    broken_answers(candidate)
    code = main(["compare", str(baseline), str(candidate), "--cases", str(cases_dir), "--no-expect",
                 "--out", str(tmp_path / "c")])
    gate = json.loads((tmp_path / "c" / "gate.json").read_text())
    assert code != 0 and gate["verdict"]["outcome"] != "pass" and gate["verdict"]["newly_failing"] > 0
    assert "differ from their transcripts judged again" in capsys.readouterr().err


def test_results_that_cannot_be_judged_again_are_refused_when_the_answers_contradict_them(runs, tmp_path, capsys):
    baseline, candidate = runs
    broken_answers(candidate)  # judged with the shipped cases, which do not hold these test cases
    assert main(["compare", str(baseline), str(candidate), "--no-expect", "--out", str(tmp_path / "c")]) == 2
    assert "answers contradict them, e.g." in capsys.readouterr().err


def test_results_that_cannot_be_judged_again_stand_when_the_answers_bear_them_out(runs, tmp_path):
    baseline, candidate = runs
    assert main(["compare", str(baseline), str(candidate), "--out", str(tmp_path / "c")]) == 0
