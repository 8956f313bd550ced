"""The profile registry: every server under test as a record (`conformance.servers.profile`), one line each.

A `Profile` says how to launch the server (`Launch`: command template, the profile's own flags,
common flags, environment defaults, the `Runtime` its executable comes from, the readiness path
and the finder of the telling line in its log), which version it is (`version_probe`), how to make
it emit an exact raw output (`forcing`, a `ForcingMethod` strategy the engine asks, or
`NoForcing` with the reason), under which field clients read reasoning, and whose expectations
it inherits when a case has none of its own (`expectation_fallback`, in order and not transitive:
a profile listing nothing is judged on its own expectations only, never silently on `hf`'s).

A new server is a new record in `PROFILES` (built by its family's module: `vllm`, `vllm_rs`,
`transformers_serve`) plus the cases' expectations for it: the launcher
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
from collections.abc import Iterable
from dataclasses import replace

from conformance.formats.format import Format
from conformance.record.case_model import Case, Expectation
from conformance.record.transcript import Transcript
from conformance.servers.forcing_methods import RegexForcing
from conformance.servers.profile import Profile, VersionProbe
from conformance.servers.transformers_serve import TRANSFORMERS_SERVE_PROFILE
from conformance.servers.vllm import VLLM_PROFILES
from conformance.servers.vllm_rs import VLLM_RS_PROFILES

PROFILES: dict[str, Profile] = {
    profile.name: profile for profile in (*VLLM_PROFILES, *VLLM_RS_PROFILES, TRANSFORMERS_SERVE_PROFILE)
}


def cors_advice_for(name: str, origin: str) -> str | None:
    """Profile `name`'s CORS advice for a browser app on `origin` (None: the record has none)."""
    advice = profile_record(name).cors_advice
    fill = {"{origin}": origin, "{origins}": json.dumps([origin])}
    return advice and re.sub(r"\{origins?\}", lambda m: fill[m.group()], advice)


def served_profile(name: str, form: Format, flags: tuple[str, ...] | None = None) -> Profile:
    """Profile `name`'s record as launched on a checkpoint of response format `form`: a record whose
    flags are the format's own parsers (`Launch.format_parsers`, the legacy profiles) takes `form`'s
    legacy flags and the environment they need; `flags`, when given, are its own flags as chosen for the
    checkpoint (`Launch.parsers_by_template`); any other is launched as it is."""
    record = resolve_profile(name)
    if record.launch is None:
        return record
    if flags is not None:
        return replace(record, launch=replace(record.launch, flags=flags))
    if not record.launch.format_parsers:
        return record
    launch = replace(record.launch, flags=form.legacy_flags, env={**record.launch.env, **form.legacy_env})
    return replace(record, launch=launch)


def speaks_format_parsers(name: str) -> bool:
    """Whether launched profile `name`'s parsers are the served format's own (`Launch.format_parsers`: legacy)."""
    launch = resolve_profile(name).launch
    return launch is not None and launch.format_parsers


def served_variant(name: str, told: str | None = None) -> str:
    """The tiny checkpoint's variant a server of profile `name` serves: as told, else its record's."""
    return told or profile_record(name).fixture_variant


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
    has, else the case's reference outcome (a format-independent case; None: the case expects nothing
    of this profile)."""
    return next((case.expect[n] for n in expectation_chain(name) if n in case.expect), case.reference)


def upgrade_recording(transcripts: Iterable[Transcript]) -> None:
    """Fill in `forced_text` on the forced transcripts of a recording made before it was recorded, read back
    out of the request's forcing fields by the profile's forcing method (so views need no registry)."""
    for transcript in transcripts:
        if transcript.forced and transcript.forced_text is None:
            transcript.forced_text = profile_record(transcript.profile).forcing.forced_text(transcript.request)
