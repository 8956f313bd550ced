"""The audit end to end: local directories, the CLI against the loopback Hub, reports and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from conformance import __version__
from conformance.audit import hub
from conformance.audit.checkpoint_audit import audit_checkpoints, audit_local
from conformance.audit.checkpoint_list import CheckpointEntry
from conformance.audit.hub import HubSettings
from conformance.audit.template_worker import predict_vllm_startup
from conformance.formats import checkpoint_files
from conformance.report.audit.report import AuditReportWriter
from conformance.util import exit_codes
from conformance.util.package_paths import load_schema
from tests import hub_server
from tests.audit_helpers import GEMMA4, fixture_tokenizer_configs, serve_fixtures
from tests.hub_server import HubServer

REPO_ROOT = Path(__file__).resolve().parents[1]
SECRET = "hf_do_not_print_this_token"
REPORT_SCHEMA = load_schema("audit-report.schema.json")
CONFIGURATIONS = ("tool_call_parser_hf", "reasoning_parser_hf", "both")


@pytest.fixture(scope="module")
def fixture_hub() -> Iterator[tuple[HubServer, dict[str, str]]]:
    with HubServer() as server:
        commits = serve_fixtures(server)
        server.add_repo("t/private", {"tokenizer_config.json": "{}"}, mode=hub_server.PRIVATE, token="another")
        server.add_repo("t/bad-json", {"tokenizer_config.json": "{"})
        yield server, commits


def run_audit(server: HubServer, cache: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    # COLUMNS (set under some runners) would fold the table's ids: the log width applies
    environment = {key: value for key, value in os.environ.items() if not key.startswith("HF_") and key != "COLUMNS"}
    environment.update(HF_ENDPOINT=server.url, HF_HUB_CACHE=str(cache / "hub"), **env)
    json_path, markdown_path = cache / "out" / "audit.json", cache / "out" / "audit.md"
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "audit", *args, "--json", str(json_path), "--markdown", str(markdown_path),
         "--timeout", "2"],
        capture_output=True, text=True, env=environment, cwd=cache,
    )
    report = json.loads(json_path.read_text()) if json_path.exists() else {}
    if report:
        jsonschema.validate(report, REPORT_SCHEMA)
    return completed, report, markdown_path.read_text() if markdown_path.exists() else ""


def by_id(report: dict) -> dict[str, dict]:
    return {checkpoint["id"]: checkpoint for checkpoint in report["checkpoints"]}


def write_config(directory: Path, config: dict | str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return directory


def test_audit_local_verdicts_are_predict_vllm_startup(tmp_path: Path) -> None:
    config = fixture_tokenizer_configs()[GEMMA4]
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    audit = audit_local(write_config(tmp_path, config))
    assert (audit.status, audit.source, audit.commit) == ("ok", "local", None)
    assert audit.files == ["tokenizer_config.json", "chat_template.jinja"]
    assert audit.vllm_0_32 == predict_vllm_startup(config)
    assert audit.template.metadata_key == "response_template"


@pytest.mark.parametrize("content, status, message", [
    (None, "not_found", "tokenizer_config.json: no such file"),
    ('{"a": 1,,}', "invalid_json", "tokenizer_config.json: invalid JSON at line 1, column 9"),
    ('{"a": ' + "[" * 100_000, "invalid_json", "tokenizer_config.json: JSON nested too deeply to read"),
])
def test_audit_local_failures_name_the_file(tmp_path: Path, content: str | None, status: str, message: str) -> None:
    directory = write_config(tmp_path, content) if content else tmp_path
    audit = audit_local(directory)
    assert (audit.status, audit.vllm_0_32) == (status, None)
    assert str(tmp_path) in audit.error and message in audit.error


def test_an_unreadable_file_is_a_status_naming_it(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").mkdir()  # exists, but reading it fails (even for root)
    with pytest.raises(hub.FetchError) as raised:
        hub.read_tokenizer_config(tmp_path / "tokenizer_config.json")
    assert raised.value.kind == checkpoint_files.UNREADABLE
    assert str(raised.value) == "tokenizer_config.json: cannot read: Is a directory"


def test_a_report_that_cannot_be_written_exits_2_naming_the_path(tmp_path: Path) -> None:
    local = write_config(tmp_path / "model", fixture_tokenizer_configs()[GEMMA4])
    (tmp_path / "not-a-directory").write_text("")
    report = tmp_path / "not-a-directory" / "audit.json"
    completed = subprocess.run([sys.executable, "-m", "conformance", "audit", "--local", str(local), "--json", str(report)],
                               capture_output=True, text=True, cwd=tmp_path)
    assert completed.returncode == exit_codes.ERROR
    assert completed.stderr.startswith("error: cannot write the report: ") and str(report.parent) in completed.stderr
    assert "Traceback" not in completed.stderr


def test_fail_on_findings_makes_a_checkpoint_with_a_finding_fail_the_audit(tmp_path: Path) -> None:
    clean = write_config(tmp_path / "clean", fixture_tokenizer_configs()[GEMMA4])
    legacy = write_config(tmp_path / "legacy", {"response_schema": {"type": "object"}})  # vLLM 0.32 ignores it
    environment = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}

    def audit(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "conformance", "audit", "--examples", "0", "--json", "audit.json",
                               *args], capture_output=True, text=True, cwd=tmp_path, env={**environment, **env})

    both = ("--local", str(clean), "--local", str(legacy))
    completed = audit(*both)
    assert completed.returncode == exit_codes.OK, completed.stderr  # findings alone do not fail an audit
    findings = {checkpoint["id"]: checkpoint["findings"] for checkpoint in by_id(json.loads(
        (tmp_path / "audit.json").read_text())).values()}
    assert findings[str(clean)] == [] and findings[str(legacy)] != []
    assert "--fail-on-findings" not in completed.stderr
    completed = audit(*both, "--fail-on-findings")
    assert completed.returncode == exit_codes.FAILED
    assert "--fail-on-findings: 1 of 2 checkpoints had findings" in completed.stderr
    completed = audit("--local", str(clean), "--fail-on-findings")
    assert completed.returncode == exit_codes.OK and "had findings" not in completed.stderr
    # a checkpoint that cannot be reached (not cached while offline) still makes it exit 2
    completed = audit(*both, f"t/absent@{'0' * 40}", "--fail-on-findings", HF_HUB_OFFLINE="1",
                      HF_HUB_CACHE=str(tmp_path / "empty"))
    assert completed.returncode == exit_codes.ERROR
    assert "--fail-on-findings: 1 of 3 checkpoints had findings" in completed.stderr
    assert "--fail-on-findings" in audit("--help").stdout


def test_expect_gates_a_local_checkpoint_on_the_predicted_hf_start_up(tmp_path: Path) -> None:
    starts = write_config(tmp_path / "starts", fixture_tokenizer_configs()[GEMMA4])
    fails = write_config(tmp_path / "fails", {"response_schema": {"type": "object"}})  # no response_template

    def audit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "conformance", "audit", "--examples", "0", "--json", "audit.json",
                               *args], capture_output=True, text=True, cwd=tmp_path)

    assert audit("--local", str(starts), "--expect", "starts").returncode == exit_codes.OK
    assert audit("--local", str(fails), "--expect", "fails").returncode == exit_codes.OK
    completed = audit("--local", str(starts), "--local", str(fails), "--expect", "starts")
    assert completed.returncode == exit_codes.FAILED
    gate_lines = [line for line in completed.stderr.splitlines() if line.startswith("--expect")]
    assert gate_lines == [f"--expect starts: {fails}: tool_call_parser_hf: expected starts, predicted fails: "
                          "The hf parser requires `response_template` metadata in the tokenizer configuration "
                          "(and 5 more)"]  # 3 configurations on vLLM 0.32 and 0.33
    report = by_id(json.loads((tmp_path / "audit.json").read_text()))
    assert report[str(fails)]["expect"] == dict.fromkeys(CONFIGURATIONS, "starts")
    completed = audit("--local", str(starts), "--expect", "fails")
    assert completed.returncode == exit_codes.FAILED and f"--expect fails: {starts}: " in completed.stderr
    assert audit("--local", str(starts), "--expect", "maybe").returncode == exit_codes.ERROR
    help_text = " ".join(audit("--help").stdout.split())
    assert "--expect starts|fails" in help_text and "Exit codes: 0 when" in help_text


@pytest.mark.parametrize("arguments, environment, message", [
    (["--timeout", "0"], {}, "error: --timeout must be a positive number of seconds"),
    ([], {"HF_HUB_ETAG_TIMEOUT": "soon"}, "error: HF_HUB_ETAG_TIMEOUT='soon' is not a positive number of seconds"),
    ([], {"HF_HUB_DOWNLOAD_TIMEOUT": "-1"}, "error: HF_HUB_DOWNLOAD_TIMEOUT='-1' is not a positive number of seconds"),
])
def test_bad_timeouts_are_usage_errors(tmp_path: Path, arguments: list[str], environment: dict[str, str],
                                       message: str) -> None:
    completed = subprocess.run([sys.executable, "-m", "conformance", "audit", "a/b@main", *arguments],
                               capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **environment})
    assert (completed.returncode, completed.stderr.strip()) == (exit_codes.ERROR, message)


def test_cli_audits_the_fixtures_and_meets_their_expectations(fixture_hub, tmp_path: Path) -> None:
    server, commits = fixture_hub
    lines = []
    for repo, commit in commits.items():
        outcome = "starts" if repo == GEMMA4 else "fails"
        lines.append(f"- repo: {repo}\n  revision: {commit}\n  expect: {{both: {outcome}, tool_call_parser_hf: {outcome}}}\n")
    (tmp_path / "list.yaml").write_text("".join(lines))
    completed, report, markdown = run_audit(server, tmp_path, "--checkpoints", "list.yaml")
    assert completed.returncode == exit_codes.OK, completed.stdout + completed.stderr
    assert report["complete"] and report["tool"] == {"name": "conformance", "version": __version__}
    checkpoints = by_id(report)
    assert set(checkpoints) == set(commits)
    for repo, commit in commits.items():
        checkpoint = checkpoints[repo]
        assert (checkpoint["status"], checkpoint["commit"], checkpoint["unmet_expectations"]) == ("ok", commit, [])
        expected = predict_vllm_startup(fixture_tokenizer_configs()[repo])
        assert checkpoint["vllm_0_32"] == {name: {"starts": v.starts, "error": v.error} for name, v in expected.items()}
        assert commit in markdown
    assert checkpoints["ConicCat/Gemma4-GarnetV2-31B"]["metadata_key"] == "response_schema"
    assert checkpoints[GEMMA4]["response_template"] == {"present": True, "valid": True, "error": None}
    assert "thinking: '<|channel>thought\\n'" in checkpoints[GEMMA4]["regions"]
    assert f"by conformance {__version__}" in markdown and report["generated_at"] in markdown
    assert GEMMA4 in completed.stdout and "starts" in completed.stdout


def test_cli_runs_the_shipped_list(fixture_hub, tmp_path: Path) -> None:
    """Checkpoints the loopback Hub serves meet their expectations; the others are not found (exit 2)."""
    server, commits = fixture_hub
    completed, report, _ = run_audit(server, tmp_path, "--checkpoints", str(REPO_ROOT / "checkpoints.yaml"))
    assert completed.returncode == exit_codes.ERROR
    for repo, checkpoint in by_id(report).items():
        if repo in commits:
            assert (checkpoint["status"], checkpoint["unmet_expectations"]) == ("ok", []), repo
        else:
            assert checkpoint["status"] == "not_found", repo
    assert "revision 'main' is not a commit SHA" in completed.stderr


def test_an_unmet_expectation_exits_1_and_says_which(fixture_hub, tmp_path: Path) -> None:
    server, commits = fixture_hub
    repo = "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"
    (tmp_path / "list.yaml").write_text(f"- repo: {repo}\n  revision: {commits[repo]}\n  expect: {{reasoning_parser_hf: starts}}\n")
    completed, report, markdown = run_audit(server, tmp_path, "--checkpoints", "list.yaml")
    assert completed.returncode == exit_codes.FAILED
    message = ("reasoning_parser_hf: expected starts, predicted fails: "
               "The hf parser requires `response_template` metadata in the tokenizer configuration")
    message_033 = ("reasoning_parser_hf: expected starts, vLLM 0.33 predicted fails: "
                   "Parsing with a response template requires `response_template` metadata in the tokenizer configuration")
    assert by_id(report)[repo]["unmet_expectations"] == [message, message_033]  # each release's own message
    shown = " ".join(completed.stdout.split())  # the terminal wraps the messages between words
    assert message in shown and message_033 in shown and "UNMET" in markdown


def test_positional_checkpoints_and_local_directories(fixture_hub, tmp_path: Path) -> None:
    server, commits = fixture_hub
    local = write_config(tmp_path / "my-model", fixture_tokenizer_configs()[GEMMA4])
    completed, report, _ = run_audit(server, tmp_path, f"{GEMMA4}@{commits[GEMMA4]}", "--local", str(local))
    assert completed.returncode == exit_codes.OK, completed.stderr
    assert [(c["id"], c["source"]) for c in report["checkpoints"]] == [(str(local), "local"), (GEMMA4, "hub")]
    # --expect holds a named Hub checkpoint too, and a list's entries to their own `expect` only
    other = "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"  # no response_template
    (tmp_path / "list.yaml").write_text(f"- repo: {other}\n  revision: {commits[other]}\n")
    completed, report, _ = run_audit(server, tmp_path, f"{GEMMA4}@{commits[GEMMA4]}", "--checkpoints", "list.yaml",
                                     "--expect", "fails")
    assert completed.returncode == exit_codes.FAILED
    assert [line.split(": ")[1] for line in completed.stderr.splitlines() if line.startswith("--expect")] == [GEMMA4]
    assert by_id(report)[other]["expect"] == {} and by_id(report)[GEMMA4]["unmet_expectations"]


def test_a_broken_checkpoint_file_exits_1(fixture_hub, tmp_path: Path) -> None:
    server, _ = fixture_hub
    completed, report, _ = run_audit(server, tmp_path, "t/bad-json@v0", )
    assert by_id(report)["t/bad-json"]["status"] == "not_found"  # tag unknown to the Hub: not reachable, exit 2
    assert completed.returncode == exit_codes.ERROR
    completed, report, _ = run_audit(server, tmp_path, "t/bad-json@main")
    assert by_id(report)["t/bad-json"]["status"] == "invalid_json"
    assert completed.returncode == exit_codes.FAILED


def test_the_token_never_appears_in_output_or_reports(fixture_hub, tmp_path: Path) -> None:
    server, _ = fixture_hub
    completed, report, markdown = run_audit(server, tmp_path, "t/private@main", HF_TOKEN=SECRET)
    assert by_id(report)["t/private"]["status"] == "unauthorized"
    assert "HF_TOKEN" in by_id(report)["t/private"]["error"]
    for text in (completed.stdout, completed.stderr, json.dumps(report), markdown):
        assert SECRET not in text
    assert all(request.authorized for request in server.requests_for("t/private"))


def test_an_entry_listed_twice_is_fetched_once_and_judged_for_each_expectation(fixture_hub, tmp_path: Path) -> None:
    server, commits = fixture_hub
    repo = "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"
    entries = [CheckpointEntry(repo, commits[repo], expect={"both": "fails"}),
               CheckpointEntry(repo, commits[repo], expect={"both": "starts"})]
    server.clear_log()
    settings = HubSettings(endpoint=server.url, cache_dir=str(tmp_path), offline=False, timeout=2.0)
    audits = sorted(audit_checkpoints(entries, settings), key=lambda audit: audit.position)
    assert [(audit.position, audit.expect, len(audit.unmet_expectations)) for audit in audits] == [
        (0, {"both": "fails"}, 0), (1, {"both": "starts"}, 2)]  # unmet on 0.32 and on 0.33
    downloads = [r for r in server.requests_for(repo) if r.method == "GET" and r.path.endswith("/tokenizer_config.json")]
    assert len(downloads) == 1


def test_every_checkpoint_is_on_disk_as_soon_as_it_is_audited(tmp_path: Path) -> None:
    json_path, markdown_path = tmp_path / "r.json", tmp_path / "r.md"
    writer = AuditReportWriter(json_path, markdown_path)
    writer.add(audit_local(write_config(tmp_path / "a", fixture_tokenizer_configs()[GEMMA4])))
    partial = json.loads(json_path.read_text())
    jsonschema.validate(partial, REPORT_SCHEMA)
    assert (partial["complete"], len(partial["checkpoints"])) == (False, 1)
    assert "incomplete: the run did not finish" in markdown_path.read_text()
    writer.add(audit_local(tmp_path / "missing"))
    partial_lines = [json.loads(line) for line in writer.partial_path.read_text().splitlines()]
    assert [record["status"] for record in partial_lines] == ["ok", "not_found"]  # every record, at once
    final = writer.finish()
    assert json.loads(json_path.read_text()) == final
    assert final["checkpoints"] == partial_lines
    assert not writer.partial_path.exists()
    assert (final["complete"], final["summary"]) == (True, {"checkpoints": 2, "ok": 1, "failed": 1, "unmet_expectations": 0})


def test_benchmark_runs_and_the_warm_run_makes_no_request() -> None:
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "audit_benchmark.py"), "--count", "20", "--latency", "0.01"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    warm = next(line for line in completed.stdout.splitlines() if line.startswith("warm cache:"))
    assert "(0 HTTP requests, 20 audited ok)" in warm
