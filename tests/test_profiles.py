"""Profiles are data: a made-up record is launched, probed and driven by the engine with no code
change, and a profile's expectation fallback decides which expectations judge it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.report.run import html
from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.run.gate_sides import GateSetupError, GateSide, targets_for
from conformance.run.judge import judge
from conformance.servers.forcing import ServerTokenizer
from conformance.servers.forcing_methods import NoForcing
from conformance.servers.launch import ServerStartError, descendant_pids, launch, pid_alive, server_command
from conformance.servers.profile import Launch, Profile, VersionProbe
from conformance.servers.profiles import PROFILES, expectation_for, launchable_profiles
from conformance.servers.runtimes import SetupError, VirtualEnv
from conformance.servers.vllm import find_vllm_error
from tests.engine_helpers import load_cases, response_transcript
from tests.fake_server import fake_server

FAKE_SERVER_SCRIPT = Path(__file__).with_name("fake_server.py")
CANNOT_FORCE = "the fake server has no way to force outputs"


def find_fatal(log_text: str) -> str | None:
    """The fake server's own error line (vLLM's finder sees none in its log)."""
    return next((line for line in log_text.splitlines() if line.startswith("FATAL: ")), None)


def fake_venv(root: Path) -> Path:
    """A stand-in virtual environment: `bin/fake-serve` runs the fake server with `fake-python`,
    which only a PATH with this bin folder first can find."""
    scripts = root / "bin"
    scripts.mkdir(parents=True)
    for name, text in (("fake-python", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'),
                       ("fake-serve", f'#!/bin/sh\nexec fake-python "{FAKE_SERVER_SCRIPT}" "$@"\n')):
        (scripts / name).write_text(text)
        (scripts / name).chmod(0o755)
    return root


def fake_record(venv: Path, name: str = "fake-server", common_flags: tuple[str, ...] = ("--common", "1"),
                fallback: tuple[str, ...] = ("hf",)) -> Profile:
    return Profile(
        name=name, description="the loopback fake server, launched as its own process", server_name="Fake",
        launch=Launch(command=("{bin}/fake-serve", "--host", "{host}", "--port", "{port}"), flags=("--parser", "x"),
                      find_error=find_fatal, common_flags=common_flags, env={"FAKE_SERVER_RELEASE": "fake-7"},
                      runtime=VirtualEnv(venv), log_prefix="fake"),
        forcing=NoForcing(CANNOT_FORCE), version_probe=VersionProbe("/about", "release"),
        reasoning_field="reasoning", expectation_fallback=fallback,
    )  # fmt: skip


ANSWERED = "{messages: [{role: user, content: ok}], tools: [get_weather]}"
GOOD = """
      message:
        reasoning: "\\nplan\\n"
        tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      finish_reason: tool_calls"""
CASES = f"""
- id: unforced-ok
  description: An unforced request the fake answers with reasoning and one call; only hf has an expectation.
  features: [tool_call]
  request: {ANSWERED}
  expect:
    hf:{GOOD}
- id: forced-ok
  description: A forced output, which the made-up profile cannot force.
  features: [tool_call]
  request: {ANSWERED}
  force: "x"
  expect:
    hf:{GOOD}
"""


def test_a_made_up_profile_record_is_launched_probed_and_run_by_the_engine(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(PROFILES, "fake-server", fake_record(fake_venv(tmp_path / "venv")))
    cases = list(load_cases(tmp_path / "cases", CASES).values())
    with launch("fake-server", "some/model", log_dir=tmp_path / "logs", timeout=30) as server:
        pids = [server.pid, *descendant_pids(server.pid)]
        assert server.version == "fake-7"  # the record's probe (/about, `release`) reading the record's env
        assert server.model == "fake"
        assert server.args[-6:] == ["--port", server.root_url.rsplit(":", 1)[1], "--parser", "x", "--common", "1"]
        assert server.log_path.name.startswith("fake-fake-server-")
        target = Target(base_url=server.base_url, model=server.model, profile="fake-server")
        output = run(cases, target, tmp_path / "out")
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert output.stamp["server_version"] == "fake-7"  # the engine asked the record's probe too
    results = {(r.case_id, r.mode): r for r in output.results}
    for mode in ("non-stream", "stream"):
        judged = results[("unforced-ok", mode)]
        assert judged.outcome == "pass", judged.reason
        assert [c.outcome for c in judged.checks if c.name == "expected_message"] == ["pass"]  # hf's, by fallback
        skipped = results[("forced-ok", mode)]
        assert (skipped.outcome, skipped.skip_kind) == ("skip", "cannot_force")
        assert CANNOT_FORCE in skipped.reason


def test_a_made_up_profile_that_fails_to_start_reports_its_own_error_line(tmp_path) -> None:
    record = fake_record(fake_venv(tmp_path / "venv"), common_flags=("--fail", "no response_template here"))
    with pytest.raises(ServerStartError, match="exited with code 1") as raised:
        with launch(record, "some/model", log_dir=tmp_path, timeout=30):
            pytest.fail("the block must not run")
    assert raised.value.server_error == "FATAL: no response_template here"
    assert find_vllm_error(raised.value.log_path.read_text()) is None  # the record's finder, not vLLM's


def test_the_environment_takes_record_defaults_under_the_callers_and_the_runtimes_path_first(tmp_path, monkeypatch):
    venv = fake_venv(tmp_path / "venv")
    record = fake_record(venv)
    command, env = server_command(record, "m", 8123)
    assert command[0] == f"{venv}/bin/fake-serve" and env["FAKE_SERVER_RELEASE"] == "fake-7"
    assert env["PATH"].split(":")[0] == f"{venv}/bin"
    monkeypatch.setenv("FAKE_SERVER_RELEASE", "from-the-caller")
    assert server_command(record, "m", 8123)[1]["FAKE_SERVER_RELEASE"] == "from-the-caller"
    vllm_command, vllm_env = server_command(PROFILES["hf"], "m", 8123, python="/venv/bin/python")
    assert vllm_command[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert vllm_env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_a_record_that_cannot_be_launched_or_names_an_unknown_placeholder_is_a_clear_error(tmp_path) -> None:
    record = fake_record(fake_venv(tmp_path / "venv"))
    unknown = replace(record, launch=Launch(("{binary}", "serve"), (), find_fatal))
    with pytest.raises(ValueError, match="its command names 'binary', which its runtime does not provide"):
        server_command(unknown, "m", 1)
    attached = replace(record, launch=None)
    with pytest.raises(ValueError, match="'fake-server' cannot be launched: attach to its server with a URL"):
        server_command(attached, "m", 1)


def test_a_profile_that_cannot_force_never_passes_a_forced_case_even_when_told_to_trust(tmp_path, monkeypatch):
    record = fake_record(tmp_path, name="attached-fake")
    monkeypatch.setitem(PROFILES, "attached-fake", replace(record, launch=None))
    cases = [load_cases(tmp_path / "cases", CASES)["forced-ok"]]
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="attached-fake", can_force=True),
                     tmp_path / "out")
        assert server.requests == []  # nothing forced was sent
    assert {(r.outcome, r.skip_kind) for r in output.results} == {("skip", "unforceable_output")}
    assert all(CANNOT_FORCE in r.reason for r in output.results)


def test_a_record_without_launch_is_not_offered_to_launch_but_can_be_attached(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(PROFILES, "attached-only", replace(fake_record(tmp_path), launch=None))
    assert main(["run", "--launch", "attached-only", "--out", str(tmp_path / "run")]) == 2
    assert f"unknown profile 'attached-only' for --launch; choose one of: {', '.join(launchable_profiles())}" in capsys.readouterr().err
    assert main(["gate", "--baseline", "attached-only"]) == 2
    assert f"'attached-only' is neither a URL nor a profile ({', '.join(launchable_profiles())})" in capsys.readouterr().err
    load_cases(tmp_path / "cases", CASES)
    with fake_server() as server:
        code = main(["run", "--base-url", server.base_url, "--model", "fake", "--profile", "attached-only",
                     "--cases", str(tmp_path / "cases"), "--case", "unforced-ok", "--out", str(tmp_path / "attached")])
    assert code == 0  # judged on hf's expectations by the record's fallback


@dataclass(frozen=True)
class FieldForcing:
    """A made-up forcing method: the text goes in a request field of its own; it cannot be verified."""

    probes: list = field(default_factory=list, compare=False)
    request_keys = ("force_text",)

    async def request_fields(self, raw_text, request, tokenizer):
        return {"force_text": raw_text}

    async def probe(self, root_url, model, timeout, api_key, text, markers):
        self.probes.append(root_url)

    def tokenizer(self, root_url, model, api_key, timeout):
        return ServerTokenizer(root_url, model, api_key)  # the fake refuses /tokenize: "could not verify"

    async def verify(self, tokenizer, case, transcript, markers):
        return None  # nothing to verify it with

    def forced_text(self, request):
        return request.get("force_text")


def test_a_new_forcing_method_is_asked_by_the_engine_and_the_report(tmp_path, monkeypatch) -> None:
    method = FieldForcing()
    monkeypatch.setitem(PROFILES, "field-forcing", replace(fake_record(tmp_path), launch=None, forcing=method))
    cases = [load_cases(tmp_path / "cases", CASES)["forced-ok"]]
    with fake_server() as server:
        output = run(cases, Target(base_url=server.base_url, model="fake", profile="field-forcing"), tmp_path / "out")
        assert method.probes == [server.base_url.removesuffix("/v1")]  # the record's probe decided can_force
        assert [r.get("force_text") for r in server.requests] == ["x", "x"]
    assert {r.outcome for r in output.results} == {"pass"}  # judged on hf's expectation, by the fallback
    page = html.render(output.results, output.stamp, output.transcripts)
    assert "<h4>Forced output (the raw text the model was made to generate)</h4><pre>x</pre>" in page


# --- the expectation fallback --------------------------------------------------------------------

FALLBACK_CASES = """
- id: hf-only
  description: Only hf has an expectation here.
  features: [content]
  request:
    messages: [{role: user, content: hi}]
  expect:
    hf: {message: {content: "from hf"}, finish_reason: stop}
- id: both
  description: Both legacy and hf have an expectation, and they differ.
  features: [content]
  request:
    messages: [{role: user, content: hi}]
  expect:
    hf: {message: {content: "from hf"}, finish_reason: stop}
    legacy: {message: {content: "from legacy"}, finish_reason: stop}
"""


@pytest.fixture
def fallback_profiles(tmp_path, monkeypatch) -> dict:
    """Profiles `hf-like` (falls back to hf), `legacy-first` (legacy, then hf) and `alone` (no fallback)."""
    base = fake_record(tmp_path)
    for name, fallback in (("hf-like", ("hf",)), ("legacy-first", ("legacy", "hf")), ("alone", ())):
        monkeypatch.setitem(PROFILES, name, replace(base, name=name, expectation_fallback=fallback))
    return load_cases(tmp_path / "cases", FALLBACK_CASES)


def expectation_check(case, profile: str, content: str):
    checks = judge(case, response_transcript({"content": content}, "stop", profile=profile))
    (check,) = [c for c in checks if c.name in ("expected_message", "expectation")]
    return check


def test_a_profile_falling_back_to_hf_is_judged_on_hfs_expectations(fallback_profiles) -> None:
    case = fallback_profiles["hf-only"]
    assert (expectation_check(case, "hf-like", "from hf").outcome) == "pass"
    failed = expectation_check(case, "hf-like", "something else")
    assert failed.outcome == "fail" and failed.expected["content"] == "from hf"


def test_the_fallback_chain_is_followed_in_order_and_a_profiles_own_expectation_wins(fallback_profiles) -> None:
    both = fallback_profiles["both"]
    assert expectation_check(both, "legacy-first", "from legacy").outcome == "pass"
    assert expectation_check(fallback_profiles["hf-only"], "legacy-first", "from hf").outcome == "pass"
    assert expectation_for(both, "legacy") is both.expect["legacy"]  # legacy has no fallback: its own


def test_a_profile_without_fallback_gets_the_named_no_expectation_skip(fallback_profiles) -> None:
    check = expectation_check(fallback_profiles["hf-only"], "alone", "from hf")
    assert (check.outcome, check.skip_kind) == ("skip", "no_expectation")
    assert check.reason == "no expectation for profile alone"
    both = fallback_profiles["both"]
    legacy_only = replace(both, expect={"legacy": both.expect["legacy"]})
    missed = expectation_check(legacy_only, "hf-like", "from legacy")
    assert (missed.skip_kind, missed.reason) == ("no_expectation", "no expectation for profile hf-like nor its fallbacks hf")


@dataclass(frozen=True)
class FailingSetup:
    """A runtime whose set-up step fails (say, its download was refused)."""

    def resolve(self, python):
        raise SetupError("the package index refused the download")


def test_a_gate_side_that_cannot_be_set_up_stops_the_side_already_started(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(PROFILES, "fake-server", fake_record(fake_venv(tmp_path / "venv")))
    broken = fake_record(fake_venv(tmp_path / "venv2"), name="broken-setup")
    monkeypatch.setitem(PROFILES, "broken-setup",
                        replace(broken, launch=replace(broken.launch, runtime=FailingSetup())))
    before = set(descendant_pids(os.getpid()))
    sides = [GateSide("baseline", "fake-server", checkpoint="some/model"),
             GateSide("candidate", "broken-setup", checkpoint="some/model")]
    with pytest.raises(GateSetupError, match="could not start the candidate server: .*refused the download"):
        with targets_for(sides, tmp_path / "gate", api_key="k", timeout=30, forcing={}):
            pass
    assert [pid for pid in set(descendant_pids(os.getpid())) - before if pid_alive(pid)] == []
