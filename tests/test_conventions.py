"""The conventions OpenAI clients follow: OPENAI_BASE_URL and OPENAI_API_KEY, and a key per side of a gate
named by an environment variable (never on the command line)."""

from __future__ import annotations

import json

from conformance.cli import main
from tests.fake_server import fake_server
from tests.test_gate import cases_dir  # noqa: F401 (a fixture)


def gate_args(one, other, cases_dir, out, *extra):  # noqa: F811 (the fixture's name)
    return ["gate", "--baseline", one.base_url, "--baseline-model", "fake", "--baseline-profile", "legacy",
            "--candidate", other.base_url, "--candidate-model", "fake", "--candidate-profile", "hf",
            "--cases", str(cases_dir), "--out", str(out), "--forcing", "trust", "--no-expect", *extra]


def answered(out) -> bool:
    """Both sides got answers, not 401s."""
    gate = json.loads((out / "gate.json").read_text())
    return all(side["summary"]["counts"].get("pass", 0) > 0 for side in gate["sides"].values())


def test_each_side_of_a_gate_takes_its_key_from_the_variable_it_names(cases_dir, tmp_path, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setenv("BASE_KEY", "sk-base")
    monkeypatch.setenv("CAND_KEY", "sk-cand")
    with fake_server(api_key="sk-base") as one, fake_server(api_key="sk-cand") as other:
        main(gate_args(one, other, cases_dir, tmp_path / "g", "--baseline-api-key-env", "BASE_KEY",
                       "--candidate-api-key-env", "CAND_KEY"))
        assert answered(tmp_path / "g") and {a for a in one.authorizations} == {"Bearer sk-base"}
        assert main(gate_args(one, other, cases_dir, tmp_path / "h", "--candidate-api-key-env", "NOT_SET")) == 2
    assert "--candidate-api-key-env: the environment variable NOT_SET is not set" in capsys.readouterr().err


def test_the_gate_and_run_read_openai_api_key_and_run_reads_openai_base_url(cases_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("OPENAI_API_KEY", "sk-both")
    with fake_server(api_key="sk-both") as one, fake_server(api_key="sk-both") as other:
        main(gate_args(one, other, cases_dir, tmp_path / "g"))
        assert answered(tmp_path / "g")
        monkeypatch.setenv("OPENAI_BASE_URL", one.base_url)
        assert main(["run", "--model", "fake", "--profile", "legacy", "--cases", str(cases_dir), "--forcing", "trust",
                     "--out", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "run.json").read_text())["stamp"]["base_url"] == one.base_url
