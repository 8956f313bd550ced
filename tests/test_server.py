"""The launcher: fast tests drive it with fake `python` interpreters (our own error handling);
`vllm`-marked tests run real vLLM 0.32 and pin what the facts documents say it does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conformance.formats.tiny_checkpoint import VARIANTS, build_fixture
from conformance.servers.forcing import (
    ServerTokenizer,
    forcing_extra_body,
    token_ids_of,
    token_ids_of_stream,
    verify_forced_output,
)
from conformance.servers.launch import ServerStartError, descendant_pids, launch, pid_alive, start
from conformance.servers.profiles import PROFILES, resolve_profile
from conformance.servers.vllm import find_vllm_error, vllm_profile
from conformance.util import exit_codes
from tests.scripted_server import Reply, scripted_server
from tests.server_helpers import WEATHER_TOOL, chat, chat_stream
from tests.startup_attempts import StartupAttempts, assert_started_as_predicted

# A stand-in for `python -m vllm.entrypoints.openai.api_server ...`, steered by FAKE_VLLM_MODE:
#   error   print a log like vLLM's and exit 1
#   hang    start a child, never become healthy
#   serve   start a child, answer /health, /version and /v1/models on --port
#   stubborn  like serve, but ignore SIGTERM (the launcher must SIGKILL)
#   auth    like serve, but /v1/... answers 401 (as vLLM does under --api-key)
# Every process it starts appends its pid to FAKE_VLLM_PIDS.
FAKE_VLLM = textwrap.dedent(
    """\
    import http.server, json, os, signal, subprocess, sys, time
    mode = os.environ["FAKE_VLLM_MODE"]
    def record(pid):
        with open(os.environ["FAKE_VLLM_PIDS"], "a") as f:
            f.write(f"{pid}\\n")
    record(os.getpid())
    if mode == "error":
        print("(APIServer pid=1) INFO 11-30 20:00:00 [utils.py:1] vLLM API server version 0.32.0")
        print("Traceback (most recent call last):")
        print('  File "serving.py", line 3, in <module>')
        print("(APIServer pid=1) TypeError: --tool-call-parser hf requires a response_template with a tool_calls field")
        sys.exit(1)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN) "
                              "if %r == 'stubborn' else None; time.sleep(600)" % mode])
    record(child.pid)
    if mode == "hang":
        time.sleep(600)
    port = int(sys.argv[sys.argv.index("--port") + 1])
    routes = {"/health": b"", "/version": json.dumps({"version": "0.32.0-fake"}).encode(),
              "/v1/models": json.dumps({"data": [{"id": "fake-model"}]}).encode()}
    if mode == "auth":
        del routes["/v1/models"]
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = routes.get(self.path)
            self.send_response(200 if body is not None else 401 if self.path.startswith("/v1/") else 404)
            self.end_headers()
            self.wfile.write(body or b"")
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


@pytest.fixture
def fake_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Returns (path of a fake interpreter, function giving the pids it started) for a mode."""
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    interpreter = tmp_path / "python"
    interpreter.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    interpreter.chmod(0o755)
    pid_file = tmp_path / "pids"
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(pid_file))

    def configure(mode: str) -> tuple[Path, callable]:
        monkeypatch.setenv("FAKE_VLLM_MODE", mode)
        return interpreter, lambda: [int(line) for line in pid_file.read_text().split()]

    return configure


def wait_for_pids(pids, count: int) -> list[int]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            found = pids()
        except FileNotFoundError:
            found = []
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"the fake server did not start {count} processes")


def assert_all_gone(pids: list[int]) -> None:
    assert [pid for pid in pids if pid_alive(pid)] == []


# -- fast tier ------------------------------------------------------------------------------------


def test_a_server_that_exits_raises_with_its_own_error_line(fake_python, tmp_path: Path) -> None:
    python, pids = fake_python("error")
    with pytest.raises(ServerStartError) as raised:
        with launch("hf", "some/model", python=python, log_dir=tmp_path / "logs", timeout=30):
            pytest.fail("the block must not run")
    error = raised.value
    assert error.server_error == "TypeError: --tool-call-parser hf requires a response_template with a tool_calls field"
    assert error.server_error in str(error)
    assert "exited with code 1" in str(error)
    assert error.log_path.parent == tmp_path / "logs" and "vLLM API server version" in error.log_path.read_text()
    assert_all_gone(pids())


def test_a_server_that_never_gets_healthy_times_out_and_its_tree_is_killed(fake_python) -> None:
    python, pids = fake_python("hang")
    started = time.monotonic()
    with pytest.raises(ServerStartError, match=r"not healthy after 3 s") as raised:
        with launch("legacy", "some/model", python=python, timeout=3):
            pytest.fail("the block must not run")
    assert time.monotonic() - started < 25
    assert raised.value.server_error is None
    found = wait_for_pids(pids, 2)
    assert_all_gone(found)


def test_a_healthy_server_is_described_and_its_whole_tree_stopped(fake_python) -> None:
    python, pids = fake_python("serve")
    with launch("hf", "some/model", python=python, extra_args=["--seed", "7"], timeout=30) as server:
        found = wait_for_pids(pids, 2)
        assert set(found) <= {server.pid, *descendant_pids(server.pid)}
        assert all(pid_alive(pid) for pid in found)
        assert server.profile is PROFILES["hf"]
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        assert server.version == "0.32.0-fake"
        assert server.model == "fake-model"
        assert server.args[:2] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert server.args[-2:] == ["--seed", "7"]
        for flags in (PROFILES["hf"].server_args, PROFILES["hf"].launch.common_flags):
            assert " ".join(flags) in " ".join(server.args)
        assert server.startup_seconds > 0
    assert_all_gone(found)


def test_a_port_another_process_answers_on_is_a_start_error_not_that_server(fake_python) -> None:
    # The server was told a port someone else listens on: it has not bound it yet (vLLM listens once
    # its engine is up), and the answers that come are the other one's. (Two pooled servers got the
    # same port: the legacy-0.33 tests were answered by hf-0.33 and failed by the hundred.)
    python, pids = fake_python("hang")
    with scripted_server({("GET", "/health"): lambda body: Reply()}) as other:
        port = int(other.root_url.rsplit(":", 1)[1])
        with pytest.raises(ServerStartError, match=rf"port {port} answers, but not only from the "
                                                   "legacy server: another process listens there"):
            with launch("legacy", "some/model", python=python, port=port, timeout=20):
                pytest.fail("the block must not run")
    with contextlib.suppress(FileNotFoundError):  # (the answer may have come before the fake recorded any)
        assert_all_gone(pids())


def test_a_listener_on_another_address_with_the_same_port_is_not_taken_for_the_servers(fake_python) -> None:
    import socket

    python, _ = fake_python("serve")
    with socket.socket() as elsewhere:  # 127.0.0.2:P takes no connection to 127.0.0.1:P
        elsewhere.bind(("127.0.0.2", 0))
        elsewhere.listen()
        with launch("hf", "some/model", python=python, port=elsewhere.getsockname()[1], timeout=30) as server:
            assert server.version == "0.32.0-fake"


def test_a_port_is_handed_out_once_even_when_the_kernel_offers_it_again(monkeypatch) -> None:
    from types import SimpleNamespace

    from conformance.servers import launch as server

    offered = iter([1, 1, 2])  # the kernel offering port 1 twice (ports it never gives for port 0)

    class OfferedSocket:
        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            pass

        def bind(self, address):
            self.port = next(offered)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(server, "socket", SimpleNamespace(socket=OfferedSocket))
    monkeypatch.setattr(server, "_HANDED_OUT_PORTS", set())
    assert [server.free_port(), server.free_port()] == [1, 2]


def test_a_proxy_in_the_environment_is_not_used_for_the_loopback_server(fake_python, monkeypatch) -> None:
    python, pids = fake_python("serve")
    for variable in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(variable, "http://127.0.0.1:9")  # nothing listens there
    for variable in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    with launch("hf", "some/model", python=python, timeout=30) as server:
        found = wait_for_pids(pids, 2)
        assert (server.model, server.version) == ("fake-model", "0.32.0-fake")
    assert_all_gone(found)


def test_a_server_whose_model_list_needs_a_key_is_described_from_its_arguments(fake_python) -> None:
    python, pids = fake_python("auth")
    extra = ["--api-key", "secret", "--served-model-name", "tiny", "alias"]
    with launch("hf", "some/model", python=python, extra_args=extra, timeout=30) as server:
        found = wait_for_pids(pids, 2)
        assert server.model == "tiny"
        assert server.version == "0.32.0-fake"
    assert_all_gone(found)


def test_an_interpreter_that_cannot_run_is_a_start_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-python"
    with pytest.raises(ServerStartError, match=f"cannot start the hf server with {missing}: .*No such file"):
        with launch("hf", "some/model", python=missing, log_dir=tmp_path, timeout=30):
            pytest.fail("the block must not run")


@pytest.mark.parametrize("interruption", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_block_still_stops_the_tree(fake_python, interruption: type[BaseException]) -> None:
    python, pids = fake_python("serve")
    with pytest.raises(interruption):
        with launch("hf", "some/model", python=python, timeout=30):
            found = wait_for_pids(pids, 2)
            raise interruption()
    assert_all_gone(found)


def test_processes_that_ignore_sigterm_are_killed(fake_python) -> None:
    python, pids = fake_python("stubborn")
    server_process = start("hf", "some/model", python=python)
    try:
        server_process.wait_until_healthy(30)
        found = wait_for_pids(pids, 2)
    finally:
        server_process.stop(grace=1)
    assert_all_gone(found)


def test_the_server_is_terminated_when_the_launching_process_dies(fake_python) -> None:
    python, pids = fake_python("serve")
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from conformance.servers.launch import start; "
         f"start('hf', 'm', python={str(python)!r}).wait_until_healthy(30); print('up', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert launcher.stdout.readline() == "up\n"
        server_pid, child_pid = wait_for_pids(pids, 2)
        launcher.kill()  # SIGKILL: no finally block runs in the launcher
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 10
        while pid_alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(server_pid)
    finally:
        for pid in wait_for_pids(pids, 2):  # the fake's own child is the fake's business; vLLM stops its engine
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_serve_command_reports_the_server_error_line(fake_python, tmp_path: Path) -> None:
    python, _ = fake_python("error")
    result = subprocess.run(
        [sys.executable, "-m", "conformance", "serve", "--profile", "hf", "--model", "m", "--python", str(python),
         "--log-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == exit_codes.ERROR
    assert "--tool-call-parser hf requires a response_template with a tool_calls field" in result.stderr


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_serve_command_stops_the_tree_on_ctrl_c_or_sigterm(fake_python, stop_signal: int) -> None:
    python, pids = fake_python("serve")
    command = subprocess.Popen(
        [sys.executable, "-m", "conformance", "serve", "--profile", "legacy", "--model", "m", "--python", str(python),
         "--", "--seed", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as a shell's background job has it
    )  # fmt: skip
    try:
        printed = [command.stdout.readline() for _ in range(5)]  # healthy, base_url, model, log, press Ctrl-C
        assert "press Ctrl-C" in printed[-1], printed + [command.stderr.read()]
        found = wait_for_pids(pids, 2)
        command.send_signal(stop_signal)
        command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
    assert command.returncode == exit_codes.OK
    assert "base_url: http://127.0.0.1:" in printed[1] and printed[2] == "model: fake-model\n"
    assert_all_gone(found)


def test_unknown_profile_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown profile 'nope'; choose one of: hf, legacy"):
        resolve_profile("nope")


# Log excerpts from real vLLM 0.32.0 start-up failures on these machines.
PYDANTIC_LOG = """\
(APIServer pid=6533) WARNING 11-30 20:15:04 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n
pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig
  Value error, The hf parser requires `response_template` metadata in the tokenizer configuration [type=value_error, input_value=ArgsKwargs((), {'model_co... 'shutdown_timeout': 0}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""
ENGINE_LOG = """\
(EngineCore_DP0 pid=77) ERROR 11-30 20:00:00 [core.py:1] EngineCore failed to start.
(EngineCore_DP0 pid=77) RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0
(APIServer pid=70) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (PYDANTIC_LOG, "The hf parser requires `response_template` metadata in the tokenizer configuration"),
        (ENGINE_LOG, "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0"),
        (
            "                     [model_tag]\napi_server.py: error: argument --dtype: invalid choice: 'bogus'\n",
            "api_server.py: error: argument --dtype: invalid choice: 'bogus'",
        ),
        ("INFO all good\n", None),
    ],
)
def test_find_vllm_error_picks_the_telling_line(log: str, expected: str | None) -> None:
    assert find_vllm_error(log) == expected


# -- real vLLM ------------------------------------------------------------------------------------

FORCED_REASONING_AND_CALL = (
    '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    "\n</tool_call>"
)


def forced_weather_exchange(server) -> tuple[dict, list[dict], list[dict]]:
    """Force FORCED_REASONING_AND_CALL without and with streaming; check both came out canonically
    tokenized; return (non-streaming choice, stream deltas, stream tool-call deltas)."""
    request = {
        "model": server.model,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "temperature": 0,
        **forcing_extra_body(FORCED_REASONING_AND_CALL),
    }
    response = chat(server, request)
    chunks = chat_stream(server, request)
    for token_ids in (token_ids_of(response), token_ids_of_stream(chunks)):
        assert asyncio.run(verify_forced_output(ServerTokenizer(server.root_url, server.model),
                                                FORCED_REASONING_AND_CALL, token_ids)) == []
    choices = [chunk["choices"][0] for chunk in chunks if chunk.get("choices")]
    assert choices[-1]["finish_reason"] == "tool_calls"
    deltas = [choice["delta"] for choice in choices]
    assert "".join(delta.get("reasoning") or "" for delta in deltas) == "\nThe user wants weather.\n"
    return response["choices"][0], deltas, [call for delta in deltas for call in delta.get("tool_calls") or []]


def parsed_calls(message: dict) -> list[tuple[str, object]]:
    return [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message["tool_calls"]]


@pytest.mark.vllm
def test_both_profiles_run_at_once_and_report_version_and_flags(hf_server, legacy_server) -> None:
    assert hf_server.pid != legacy_server.pid and pid_alive(hf_server.pid) and pid_alive(legacy_server.pid)
    for server in (hf_server, legacy_server):
        assert server.version == "0.32.0"
        assert " ".join(server.profile.server_args) in " ".join(server.args)
        assert '--structured-outputs-config {"enable_in_reasoning": true}' in " ".join(server.args)
        print(f"{server.profile.name}: healthy after {server.startup_seconds:.1f} s")


@pytest.mark.vllm
def test_hf_parses_forced_reasoning_and_one_whole_tool_call_delta(hf_server) -> None:
    choice, _, call_deltas = forced_weather_exchange(hf_server)
    assert choice["message"]["reasoning"] == "\nThe user wants weather.\n"
    assert parsed_calls(choice["message"]) == [("get_weather", {"city": "Paris"})]
    assert choice["finish_reason"] == "tool_calls"
    assert len(call_deltas) == 1
    (call,) = call_deltas
    assert call["index"] == 0 and call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


@pytest.mark.vllm
def test_legacy_streams_the_name_first_then_argument_fragments(legacy_server) -> None:
    choice, _, call_deltas = forced_weather_exchange(legacy_server)
    # With </think> as its single token nothing leaks into reasoning (it did with plain random weights).
    assert choice["message"]["reasoning"] == "\nThe user wants weather.\n"
    assert parsed_calls(choice["message"]) == [("get_weather", {"city": "Paris"})]
    first, *rest = call_deltas
    assert first["function"]["name"] == "get_weather" and not first["function"].get("arguments")
    assert len(rest) > 1 and all("name" not in call["function"] for call in rest)
    assert json.loads("".join(call["function"]["arguments"] for call in rest)) == {"city": "Paris"}


# Every variant with the hf profile's flags, plus the single flag each partial template satisfies
# (closer-ends-with-anchor: the pool's hf_closer_server, tests/test_gate_upgrade_033.py).
STARTUPS = [(variant, "both") for variant in VARIANTS if variant not in ("full", "closer-ends-with-anchor")] + [
    ("thinking-only", "reasoning_parser_hf"), ("tools-only", "tool_call_parser_hf")]


@pytest.fixture(scope="module")
def startups(tmp_path_factory: pytest.TempPathFactory) -> StartupAttempts:
    """The real server with each configuration's flags on each variant, all started together."""
    from conformance.audit.predictors.vllm_032 import CONFIGURATIONS

    models = {variant: build_fixture(tmp_path_factory.mktemp("startups") / variant, variant) for variant, _ in STARTUPS}
    return StartupAttempts({(variant, configuration): (
        vllm_profile(configuration, tuple(CONFIGURATIONS[configuration].split()), f"hf flags: {configuration}"),
        models[variant]) for variant, configuration in STARTUPS}, tmp_path_factory.mktemp("startup-logs"))


@pytest.mark.vllm
@pytest.mark.parametrize(("variant", "configuration"), STARTUPS)
def test_the_audit_predicts_what_the_real_server_does(startups: StartupAttempts, variant: str, configuration: str) -> None:
    from conformance.audit.template_worker import predict_vllm_startup

    _, model = startups.attempts[(variant, configuration)]
    predicted = predict_vllm_startup(json.loads((model / "tokenizer_config.json").read_text()))[configuration]
    assert_started_as_predicted(startups.outcome((variant, configuration)), predicted)


@pytest.mark.vllm
@pytest.mark.parametrize("profile", ["hf", "hf-rust"])  # hf-rust: the vllm-rs binary and its managed engine
def test_a_real_server_and_its_engine_stop_when_the_launcher_is_killed(tiny_checkpoint: Path, profile: str) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import time; from conformance.servers.launch import start; "
         f"server = start({profile!r}, {str(tiny_checkpoint)!r}).wait_until_healthy(); print(server.pid, flush=True); "
         "time.sleep(900)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        server_pid = int(launcher.stdout.readline())
        pids = [server_pid, *descendant_pids(server_pid)]
        assert len(pids) > 1  # the API server (vLLM's, or vllm-rs) and its engine
    finally:
        launcher.kill()  # SIGKILL: nothing in the launcher gets to clean up
        launcher.wait(timeout=10)
    deadline = time.monotonic() + 60
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert_all_gone(pids)
