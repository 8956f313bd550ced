"""`--json PATH|-` of run, gate, compare, contract and clients (fast tier, fake servers and recorded runs): the
document is the one the verb writes to its output directory, and with `-` standard output carries it alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from client_samples import samples, write_recording

from conformance.cli import main
from conformance.clients.record import CLIENTS_FILE, read_recording
from tests.fake_server import fake_server
from tests.test_contract_matrix import runs  # noqa: F401 (a fixture)
from tests.test_gate import _gate_args, cases_dir  # noqa: F401 (a fixture)


def test_run_json_dash_prints_run_json_alone_and_the_log_on_stderr(cases_dir, tmp_path):
    out = tmp_path / "run"
    with fake_server() as server:
        done = subprocess.run(
            [sys.executable, "-m", "conformance", "run", "--base-url", server.base_url, "--model", "fake",
             "--profile", "hf", "--cases", str(cases_dir), "--forcing", "trust", "--out", str(out), "--json", "-"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == (out / "run.json").read_text()
    document = json.loads(done.stdout)
    assert document["stamp"]["profile"] == "hf" and document["summary"]["verdict"] == "pass"
    assert "report.md" in done.stderr and "run.json" in done.stderr  # what it printed, on standard error


def test_run_json_to_a_file_is_run_json_and_stdout_keeps_the_log(cases_dir, tmp_path, capsys):
    with fake_server() as server:
        assert main(["run", "--base-url", server.base_url, "--model", "fake", "--profile", "legacy", "--cases",
                     str(cases_dir), "--forcing", "trust", "--out", str(tmp_path / "r"),
                     "--json", str(tmp_path / "copy.json")]) == 0
    assert (tmp_path / "copy.json").read_text() == (tmp_path / "r" / "run.json").read_text()
    assert "report.md" in capsys.readouterr().out


def test_gate_json_dash_prints_gate_json_alone(cases_dir, tmp_path, capsys):
    with fake_server() as one, fake_server() as other:
        code = main(_gate_args(one, other, cases_dir, tmp_path / "g", "--json", "-"))
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out == (tmp_path / "g" / "gate.json").read_text()
    assert json.loads(captured.out)["verdict"]["exit_code"] == 0
    assert "0 unacknowledged difference(s)" in captured.err and "report.html" in captured.err
    # compare writes the same document of the gate's two recorded sides
    assert main(["compare", str(tmp_path / "g" / "baseline"), str(tmp_path / "g" / "candidate"), "--out",
                 str(tmp_path / "c"), "--json", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out == (tmp_path / "c" / "gate.json").read_text() and "gate:" in captured.err


def test_a_gate_refused_before_it_ran_prints_no_document(cases_dir, tmp_path, capsys):
    assert main(["gate", "--baseline", "http://127.0.0.1:9/v1", "--cases", str(cases_dir), "--json", "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "needs --baseline-model" in captured.err


def test_contract_writes_its_matrix_as_contract_json_and_json_dash_prints_it(runs, tmp_path, capsys):  # noqa: F811
    assert main(["contract", *map(str, runs), "--out", str(tmp_path / "m"), "--json", "-"]) == 0
    captured = capsys.readouterr()
    matrix = json.loads((tmp_path / "m" / "contract.json").read_text())
    assert captured.out == (tmp_path / "m" / "contract.json").read_text()
    assert matrix["format"] == "conformance-matrix/1" and [c["label"] for c in matrix["columns"]] == ["legacy", "hf", "other"]
    assert sum(row["differs"] for row in matrix["rows"]) == 3
    assert "5 behaviours of 3 servers" in captured.err


def test_clients_json_dash_prints_every_sides_records(tmp_path, capsys):
    gate = tmp_path / "gate"
    (gate / "baseline").mkdir(parents=True)
    write_recording(gate / "baseline", samples())
    shutil.copytree(gate / "baseline", gate / "candidate")
    assert main(["clients", str(gate), "--client", "openai-python", "--json", "-"]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert [side["side"] for side in document["sides"]] == ["baseline", "candidate"]
    for side in document["sides"]:
        header, findings, idioms = read_recording(Path(side["file"]))
        assert side["file"] == str(gate / side["side"] / CLIENTS_FILE)
        assert side["header"] == header and side["findings"] == [f.to_dict() for f in findings]
        assert side["idioms"] == [i.to_dict() for i in idioms] and findings
        assert {f["client"] for f in side["findings"]} == {"openai-python"}
    assert "client calls over" in captured.err and "report:" in captured.err
