"""The profile record: a whole server under test as data.

A `Profile` says how to launch the server (`Launch`: command template, the profile's own flags,
common flags, environment defaults, the `Runtime` its executable comes from, the readiness path
and the finder of the telling line in its log), which version it is (`version_probe`), how to make
it emit an exact raw output (`forcing`, a `ForcingMethod`), under which field clients read
reasoning, and whose expectations it inherits when a case has none of its own
(`expectation_fallback`, in order and not transitive). One module per server family builds its
records (`vllm`, `vllm_rs`, `transformers_serve`); `conformance.servers.profiles` registers them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from conformance.record.server_rules import ServerRule
from conformance.servers.forcing_methods import ForcingMethod
from conformance.servers.runtimes import CurrentInterpreter, Runtime, SetupError

# A request's `stream_interval`: it batches the stream's tokens; it is ignored (one token per delta all
# the same); the request is refused; not measured (an attached server).
StreamInterval = Literal["honoured", "ignored", "refused", "unknown"]
STREAM_INTERVAL_WORDS: dict[str, str] = {
    "ignored": "ignores it and streams one token per delta",
    "refused": "refuses a request that carries it",
    "unknown": "is not known to take it",
}


@dataclass(frozen=True)
class VersionProbe:
    """GET `path` answers a JSON object whose `key` is the server's version (vLLM: /version).

    Every probe has `version(get_json, runtime)`: `get_json(path)` is the server's parsed answer to
    a GET (raising when there is none), `runtime` the record's `Runtime`; None: no version told."""

    path: str = "/version"
    key: str = "version"

    def read(self, answer: Any) -> str | None:
        """The version in a parsed answer, or None when it has none."""
        value = answer.get(self.key) if isinstance(answer, dict) else None
        return None if value is None else str(value)

    def version(self, get_json: Callable[[str], Any], runtime: Runtime) -> str | None:
        return self.read(get_json(self.path))


COMMAND_PROBE_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class CommandVersionProbe:
    """A server without a version route: the version is what `command` (its placeholders filled
    from the record's runtime, e.g. `{python}`) prints on its first line, run where the server's
    package is installed."""

    command: tuple[str, ...]

    def version(self, get_json: Callable[[str], Any], runtime: Runtime) -> str | None:
        try:
            argv = [part.format_map(runtime.resolve(None).placeholders) for part in self.command]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_PROBE_TIMEOUT_SECONDS)
        except (OSError, subprocess.TimeoutExpired, KeyError, SetupError):
            return None
        lines = done.stdout.strip().splitlines()
        return lines[0].strip() if done.returncode == 0 and lines else None


@dataclass(frozen=True)
class Launch:
    """How to start a server: argv = `command` (its `{placeholders}` filled: `model`, `host`, `port`
    and the runtime's), then `flags` (the profile's own), `common_flags` and the caller's extra
    arguments. `env` are defaults under the caller's environment; the runtime's variables win over
    both. Ready when GET `health_path` answers 200; `find_error` picks the telling line out of its
    log, which is written to `<log_prefix>-<profile>-<port>.log`; `is_refusal` says whether that line,
    when the server exits during start-up, is the server refusing what it was told to serve (its
    configuration, the checkpoint) rather than a fault of the machine (a port taken, memory)."""

    command: tuple[str, ...]
    flags: tuple[str, ...]
    find_error: Callable[[str], str | None]
    common_flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    runtime: Runtime = CurrentInterpreter()
    health_path: str = "/health"
    log_prefix: str = "server"
    # `flags` are the served format's own parsers: a checkpoint of another format is served with that
    # format's `legacy_flags` and `legacy_env` instead (conformance.servers.profiles.served_profile).
    format_parsers: bool = False
    # The key of the audit's start-up predictor (`conformance.audit.predictors`) that chooses, per checkpoint,
    # which of `flags`' parsers are launched: those the checkpoint's template is predicted to start with.
    # None: `flags` as they are.
    parsers_by_template: str | None = None
    is_refusal: Callable[[str], bool] = lambda line: True


@dataclass(frozen=True)
class KnownRefusal:
    """A known bug of a server: requests sent in `mode` whose last assistant message holds every field of
    `fields` (with text) refused with `status` and an error message holding `message`, for `reason` (`link`:
    where it is reported or shown)."""

    mode: str
    fields: tuple[str, ...]
    status: int
    message: str
    reason: str
    link: str


@dataclass(frozen=True)
class Profile:
    """A server under test, as data (a new profile is a new entry in PROFILES)."""

    name: str
    description: str
    server_name: str  # what to call it in messages ("vLLM")
    launch: Launch | None  # None: it can only be attached by URL
    forcing: ForcingMethod
    version_probe: VersionProbe | CommandVersionProbe | None  # None: the server does not tell its version
    # The message/delta field clients read reasoning from (vLLM 0.32: `reasoning`; vLLM 0.31 and
    # `transformers serve`: `reasoning_content`): reasoning under another name fails. None: not pinned.
    reasoning_field: str | None
    # Profiles whose expectations apply, in order, when a case has none for this one.
    expectation_fallback: tuple[str, ...] = ()
    # Whether its streams end with `data: [DONE]` (the contract's framing). False records a server
    # that just closes the stream: a [DONE] from it then fails, as any unmet expectation.
    ends_stream_with_done: bool = True
    # The variant of the tiny checkpoint (`conformance.formats.tiny_checkpoint.VARIANTS`) it is launched on.
    fixture_variant: str = "full"
    # What to do so that browsers on `{origin}` may call the server, when its preflight refuses them
    # (`backticks` are code; `{origins}` is filled with a JSON list holding the origin). None: no advice known.
    cors_advice: str | None = None
    # The release the launched server must report (its version probe's answer, a `+local` part
    # aside): another one fails the start. None: whatever it reports.
    expected_version: str | None = None
    # Its documented departures from a format's own meaning: the differences from a format-independent
    # case's reference outcome that pass (conformance.record.server_rules).
    rules: tuple[ServerRule, ...] = ()
    # What it does with a chat request's `stream_interval` (several tokens per stream delta, vLLM's Python
    # frontend 0.32 on), as measured: granular streams (`stream@N`) are sent only where it is honoured; on
    # any other server they are a skip of kind `granularity_not_asked` saying which.
    stream_interval: StreamInterval = "unknown"
    # The fields of an assistant message it renders reasoning from when a conversation is sent back (a
    # second turn, conformance.run.checks.second_turn): reasoning sent only under another field is lost, the
    # client's finding. None: not known (reasoning sent under any name must then reach the prompt).
    reasoning_input_fields: tuple[str, ...] | None = None
    # Requests it refuses that it should accept, each a known bug declared with its reason and a link: the
    # refusal is a finding (`known_refusal`), and the declaration fails as stale once the server accepts it.
    known_refusals: tuple[KnownRefusal, ...] = ()
    # Whether its /tokenize renders a conversation (`messages`): how a second turn's prompts are read. False:
    # the prompt check is not judged, and says why.
    tokenizes_conversations: bool = True

    @property
    def stream_interval_per_request(self) -> bool:
        return self.stream_interval == "honoured"

    @property
    def build_note(self) -> str | None:
        """What the report stamp says about how the launched server was built when its runtime
        assembles something no one ships (None: nothing to say). The stamp takes the launched
        server's own note (`Server.build_note`): a runtime that finds the release installed as
        shipped (vLLM 0.33 on a GPU machine, via `--python`) has none."""
        return getattr(self.runtime, "build_note", None)

    @property
    def server_args(self) -> tuple[str, ...]:
        """The profile's own server flags (none for a record that cannot be launched)."""
        return self.launch.flags if self.launch else ()

    @property
    def runtime(self) -> Runtime:
        """Where its executable comes from (an attached record: this interpreter)."""
        return self.launch.runtime if self.launch else CurrentInterpreter()
