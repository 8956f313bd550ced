"""What a request needs before it is sent, decided per run and per case: whether the server forces outputs
(one probe per run), the forcing fields of a case's output, and why a request is not sent at all (`NotSent`:
a case written for another format or checkpoint variant, a declared skip, an output that cannot be forced);
then the verification of a forced answer within the run's timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from conformance.formats.registry import DEFAULT_FORMAT, format_named
from conformance.record.case_model import Case
from conformance.record.outcomes import SkipKind
from conformance.run.driver import Target
from conformance.servers.forcing import ForcingUnsupported, ServerRefused, TokensUnavailable
from conformance.servers.profiles import expectation_for, profile_record, served_variant


def other_variant(case: Case, target: Target) -> NotSent | None:
    """The skip of a case that needs another checkpoint variant than the target serves (None: it runs).
    A case naming no variant needs the profile record's."""
    needed = served_variant(target.profile, case.fixture_variant)
    served = served_variant(target.profile, target.fixture_variant)
    if needed == served:
        return None
    return NotSent("other_fixture_variant", f"needs the tiny checkpoint's {needed!r} variant; this run serves {served!r}")


def format_of(case: Case) -> str:
    """The response format a case is written (or rendered) in: a case naming none is the default format's."""
    return case.format or DEFAULT_FORMAT.name


def other_format(case: Case, target: Target) -> NotSent | None:
    """The skip of a case written for another response format than the target's checkpoint writes
    (None: it runs): its forced text, and the expectations of an unforced one (what the model generates
    under a guided tool choice, which requests a format's parsers refuse), are that format's. A case
    naming no format is written in the default one; a format-independent case is rendered in the target's."""
    written_in = format_of(case)
    if written_in == target.format:
        return None
    return NotSent("other_format", f"it is written for the {written_in} format; this run serves {target.format}")


@dataclass(frozen=True)
class NotSent:
    """Why a request is not sent: a skip of `kind`, or (kind None) an error."""

    kind: SkipKind | None
    reason: str


async def forcing_for(case: Case, target: Target, natural: bool,
                       tokenizer: Callable[[], Any]) -> tuple[dict[str, Any] | None, NotSent | None]:
    """(extra body fields that force the case's output, or None; why it is not sent, or None).
    `tokenizer()` is the run's tokenizer of the profile's forcing method."""
    expectation = expectation_for(case, target.profile)
    if expectation is not None and expectation.skip is not None:
        return None, NotSent("declared", f"declared: {expectation.skip}")
    if (elsewhere := other_format(case, target) or other_variant(case, target)) is not None:
        return None, elsewhere
    if natural or case.force is None:  # natural mode, or an unforced case (cases/README.md)
        return None, None
    if target.can_force is False:
        reason = f"server {target.shown_url} cannot force outputs: {target.cannot_force_reason or 'as told'}"
        return None, NotSent(target.cannot_force_kind, reason)

    method = profile_record(target.profile).forcing
    try:  # a method that names tokens asks its tokenizer (a server's, a checkpoint's): within --timeout
        async with asyncio.timeout(target.timeout):
            forcing = await method.request_fields(case.force, case.request, tokenizer)
    except (ForcingUnsupported, ValueError) as exc:
        return None, NotSent("unforceable_output", f"cannot force this output: {exc}")
    except (TokensUnavailable, TimeoutError) as exc:
        detail = str(exc) or f"no answer within {target.timeout:g}s"
        return None, NotSent(None, f"not sent: the tokenizer did not give the forced output's tokens: "
                                   f"{target.redact(detail)}")
    except OSError as exc:  # a tokenizer that cannot be loaded
        return None, NotSent(None, f"not sent: the forcing method's tokenizer cannot be loaded: {exc}")
    return forcing, NotSent(None, target.forcing_error) if target.forcing_error else None


async def resolve_forcing(target: Target, cases: Sequence[Case], natural: bool) -> Target:
    """Settle `target.can_force` once per run: when unknown (None) and some case is forced, one small
    forced request tells whether the server honours forced outputs with canonical tokens. A probe
    that cannot tell (an HTTP error about the setup, no answer, an answer that is not JSON) sets
    `forcing_error`: the forced cases are then errors, never skips nor assumed to be forced."""
    if target.can_force is not None or natural or all(case.force is None for case in cases):
        return target

    method = profile_record(target.profile).forcing
    try:  # the probe and its verification, within --timeout
        async with asyncio.timeout(target.timeout):
            served = format_named(target.format)
            await method.probe(target.root_url, target.model, target.timeout, target.api_key,
                               text=served.probe_text, markers=served.marker_tokens)
    except ForcingUnsupported as exc:
        return replace(target, can_force=False, cannot_force_reason=target.redact(str(exc)))
    except (ServerRefused, OSError, ValueError, LookupError, TypeError, AttributeError) as exc:
        return replace(target, forcing_error="not sent: the forcing probe cannot tell whether the server forces "
                       f"outputs: {target.redact(_probe_failure(exc, target.timeout))}")
    return replace(target, can_force=True)


def _probe_failure(exc: BaseException, timeout: float) -> str:
    """What went wrong with the forcing probe, in the words of the server where it answered."""
    import urllib.error


    if isinstance(exc, (ServerRefused, ValueError)):
        return str(exc)
    if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
        return f"timeout: no answer within {timeout:g}s"
    if isinstance(exc, urllib.error.URLError):
        return f"connection failed: {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


Verified = TypeVar("Verified")


async def verify_within(timeout: float, verify: Awaitable[Verified]) -> Verified | None:
    """`verify` (a forcing method's checks of a forced answer, with their requests to its tokenizer:
    vLLM's /tokenize and /detokenize) within `timeout` (None: no answer in time, unverified)."""
    try:
        async with asyncio.timeout(timeout):
            return await verify
    except TimeoutError:
        return None
