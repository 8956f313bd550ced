"""Results: one per case x mode x profile (x repeat), with four outcomes.

* pass: every contract and expectation check passed (schema and finding checks are reported, never
  blocking);
* fail: a contract or expectation check failed (check name, expected, actual in `checks`);
* skip: the case could not be judged for a reason about the server's capabilities or the run's
  choices, a named `skip_kind` (`conformance.record.outcomes.SkipKind`); `skip_allowed` when the case declares
  it or the user allowed the kind;
* error: the tool could not judge (connection refused, 5xx, an HTTP error about the setup such as
  401/404/429, timeout, invalid SSE). Never a pass.

The run's verdict (`Summary.exit_outcome`, `Summary.verdict_reason`) is `pass` only when every
result was judged and passed or skipped for an allowed kind, and something was judged at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from conformance.record.case_model import (
    GRANULARITY_FEATURE,
    SECOND_TURN_FEATURE,
    Case,
    Mode,
    rebuilder_of,
    tokens_per_delta,
)
from conformance.record.outcomes import BLOCKING_KINDS, ERROR, FAIL, FINDING, PASS, SCHEMA, SKIP, Check, SkipKind
from conformance.record.recording import records
from conformance.record.transcript import Transcript, TranscriptError
from conformance.util import exit_codes

OUTCOMES = (PASS, FAIL, SKIP, ERROR)
MAX_WHY = 500  # characters of `rendered_why` kept (results.schema.json says so too)
RESULTS_FILE = "results.jsonl"


@dataclass
class CaseResult:
    case_id: str
    mode: Mode
    profile: str
    outcome: str
    reason: str = ""
    repeat: int = 0
    forced: bool = True
    natural: bool = False
    model_miss: bool = False
    skip_kind: SkipKind | None = None
    skip_allowed: bool = False  # a skip the case declares or the run allows (never counted against the verdict)
    features: tuple[str, ...] = ()
    description: str = ""
    checks: list[Check] = field(default_factory=list)
    # How the case's turn was written (a format-independent case): by the format's `chat_template`, or from its
    # `response_template`'s delimiters where the chat template could not (`rendered_why`: why not, cut)
    rendered_with: Literal["chat_template", "response_template"] | None = None
    rendered_why: str | None = None

    @property
    def name(self) -> str:
        """Readable id, e.g. `reasoning-then-one-call[stream]`."""
        return f"{self.case_id}[{self.mode}]"

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if c.outcome in (FAIL, ERROR) and c.kind in BLOCKING_KINDS]

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["features"] = list(self.features)
        data["checks"] = [check.to_dict() for check in self.checks]
        for key in ("rendered_with", "rendered_why"):  # a case with a raw forced text has neither
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        data = dict(data)
        data["features"] = tuple(data.get("features") or ())
        data["checks"] = [Check.from_dict(c) for c in data.get("checks") or []]
        return cls(**data)


def outcome_of(checks: Sequence[Check]) -> tuple[str, str, SkipKind | None]:
    """(outcome, reason, skip kind) of a list of checks."""
    errors = [c for c in checks if c.outcome == ERROR]
    if errors:
        return ERROR, f"{errors[0].name}: {errors[0].reason}", None
    failures = [c for c in checks if c.outcome == FAIL and c.kind in BLOCKING_KINDS]
    if failures:
        return FAIL, "; ".join(f"{c.name}: {c.reason}" for c in failures), None
    skipped = next((c for c in checks if c.outcome == SKIP and c.skip_kind), None)
    if skipped is not None:  # not sent, a model miss, nothing to compare against...
        return SKIP, skipped.reason, skipped.skip_kind
    return PASS, "", None


# Skips never counted against a verdict: the case declares it, or it needs another checkpoint variant
# than the run serves (the run's own choice; cases/README.md, "Fixture variant").
# A second turn not sent because its first turn failed is counted there; a client not installed is the machine's.
ALWAYS_ALLOWED_SKIPS = frozenset({"declared", "other_fixture_variant", "other_format", "granularity_not_asked",
                                  "first_turn_unusable", "client_unavailable"})


def make_result(case: Case, transcript: Transcript, checks: list[Check],
                allowed_skips: Collection[str] = ()) -> CaseResult:
    """The result of one judged transcript; a skip is allowed when declared or its kind is in `allowed_skips`."""
    outcome, reason, skip_kind = outcome_of(checks)
    return CaseResult(
        case_id=case.id,
        mode=transcript.mode,
        profile=transcript.profile,
        outcome=outcome,
        reason=reason,
        repeat=transcript.repeat,
        forced=transcript.forced,
        natural=transcript.natural,
        model_miss=skip_kind == "model_miss",
        skip_kind=skip_kind,
        skip_allowed=skip_kind in ALWAYS_ALLOWED_SKIPS or skip_kind in allowed_skips,
        features=_features(case, transcript.mode),
        description=case.description or "",
        checks=checks,
        rendered_with=case.reference.rendered_with if case.reference is not None else None,
        rendered_why=_cut(case.reference.rendered_why) if case.reference is not None else None,
    )


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= MAX_WHY else text[: MAX_WHY - 1] + "…"


def _features(case: Case, mode: str) -> tuple[str, ...]:
    """The case's features and the runner's for the mode: a granular stream's, a second turn's."""
    features = tuple(case.features or ())
    runner = GRANULARITY_FEATURE if tokens_per_delta(mode) else SECOND_TURN_FEATURE if rebuilder_of(mode) else None
    return features + ((runner,) if runner and runner not in features else ())


@dataclass
class Summary:
    counts: dict[str, int]
    model_misses: int
    total: int
    pass_at_k: dict[str, Any] | None = None  # {"k": K, "cases": N, "passed": M} when repeated
    verdict: str = PASS  # pass | fail | error: see `verdict_of`
    verdict_reason: str = ""

    @property
    def exit_outcome(self) -> str:
        return self.verdict

    @property
    def exit_code(self) -> int:
        """0 pass, 1 a fail, 2 an error or something not judged."""
        return {ERROR: exit_codes.ERROR, FAIL: exit_codes.FAILED}.get(self.verdict, exit_codes.OK)

    def line(self) -> str:
        parts = [f"{self.counts.get(o, 0)} {o}" for o in OUTCOMES]
        if self.model_misses:
            parts.append(f"{self.model_misses} model miss")
        if self.pass_at_k:
            p = self.pass_at_k
            parts.append(f"pass@{p['k']}: {p['passed']}/{p['cases']}")
        return f"{self.total} results: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summaries_by_profile(results: Iterable[CaseResult]) -> dict[str, Summary]:
    """One summary per profile, profiles in name order."""
    by_profile: dict[str, list[CaseResult]] = {}
    for result in results:
        by_profile.setdefault(result.profile, []).append(result)
    return {profile: summarize(by_profile[profile]) for profile in sorted(by_profile)}


def summarize(results: Iterable[CaseResult]) -> Summary:
    results = list(results)
    counts = Counter(r.outcome for r in results)
    repeats = {r.repeat for r in results}
    pass_at_k = None
    if len(repeats) > 1:
        groups: dict[tuple[str, str, str], list[CaseResult]] = {}
        for r in results:
            groups.setdefault((r.case_id, r.mode, r.profile), []).append(r)
        passed = sum(any(r.outcome == PASS for r in group) for group in groups.values())
        pass_at_k = {"k": len(repeats), "cases": len(groups), "passed": passed}
    verdict, reason = verdict_of(results)
    return Summary(
        counts={o: counts.get(o, 0) for o in OUTCOMES},
        model_misses=sum(r.model_miss for r in results),
        total=len(results),
        pass_at_k=pass_at_k,
        verdict=verdict,
        verdict_reason=reason,
    )


def verdict_of(results: Sequence[CaseResult]) -> tuple[str, str]:
    """(pass | fail | error, why). `error`: a result is an error, a skip is not allowed, or nothing
    was judged (no result passed or failed); else `fail` if one failed; else `pass`."""
    errors = [r for r in results if r.outcome == ERROR]
    if errors:
        return ERROR, f"{len(errors)} error(s), first {errors[0].name}: {errors[0].reason}"[:300]
    if not any(r.outcome in (PASS, FAIL) for r in results):
        return ERROR, "nothing was judged: " + (_skip_kinds_text(results) or "no results")
    unallowed = [r for r in results if r.outcome == SKIP and not r.skip_allowed]
    if unallowed:
        return ERROR, (f"{len(unallowed)} result(s) not judged, skipped for a kind that is not allowed "
                       f"(allow it with --allow-skip KIND): {_skip_kinds_text(unallowed)}")
    if any(r.outcome == FAIL for r in results):
        return FAIL, "a contract or expectation check failed"
    return PASS, ""


def _skip_kinds_text(results: Sequence[CaseResult]) -> str:
    """`N kind (first reason)` for each skip kind among `results`, e.g. `4 cannot_force (server ...)`."""
    by_kind: dict[str, list[CaseResult]] = {}
    for r in results:
        if r.outcome == SKIP:
            by_kind.setdefault(r.skip_kind or "unknown", []).append(r)
    return "; ".join(f"{len(rs)} {kind} ({rs[0].reason[:200]})" for kind, rs in by_kind.items())


def finding_counts(results: Iterable[CaseResult]) -> Counter[tuple[str, str, str]]:
    """How often each (profile, finding or schema check, observed value) occurs; skipped ones left out.
    The value is the finding's observation (e.g. `reasoning`, `whole`) or else its outcome."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for result in results:
        for check in result.checks:
            if check.kind in (FINDING, SCHEMA) and check.outcome != SKIP:
                value = check.actual if check.kind == FINDING and isinstance(check.actual, str) else check.outcome
                counts[(result.profile, check.name, str(value))] += 1
    return counts


def failed_findings(results: Iterable[CaseResult]) -> list[tuple[CaseResult, Check]]:
    """Finding and schema checks that came out `fail` (never blocking, but worth a look)."""
    return [(r, c) for r in results for c in r.checks if c.kind in (FINDING, SCHEMA) and c.outcome == FAIL]


def read_results(path: Path) -> list[CaseResult]:
    """Every result of a `results.jsonl`; a record that is not one raises TranscriptError naming the line."""
    results = []
    for number, record in records(path, "results"):
        try:
            results.append(CaseResult.from_dict(record))
        except (TypeError, ValueError, AttributeError) as exc:
            raise TranscriptError(f"{path}:{number}: not a result: {exc}") from exc
    return results
