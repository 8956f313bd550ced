"""Results: one per case x mode x profile (x repeat), with four outcomes.

* pass: every contract and expectation check passed (schema and finding checks are reported, never
  blocking);
* fail: a contract or expectation check failed (check name, expected, actual in `checks`);
* skip: the case could not be judged for a stated reason (no forcing, a model miss in natural mode,
  a refusal with no expectation);
* error: the tool could not judge (connection refused, 5xx, timeout, invalid SSE). Never a pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import exit_codes
from conformance.checks import BLOCKING_KINDS, ERROR, EXPECTATION, FAIL, FINDING, PASS, SCHEMA, SKIP, Check
from conformance.transcript import Transcript, TranscriptError

OUTCOMES = (PASS, FAIL, SKIP, ERROR)
RESULTS_FILE = "results.jsonl"


@dataclass
class CaseResult:
    case_id: str
    mode: str
    profile: str
    outcome: str
    reason: str = ""
    repeat: int = 0
    forced: bool = True
    natural: bool = False
    model_miss: bool = False
    features: tuple[str, ...] = ()
    description: str = ""
    checks: list[Check] = field(default_factory=list)

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
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        data = dict(data)
        data["features"] = tuple(data.get("features") or ())
        data["checks"] = [Check.from_dict(c) for c in data.get("checks") or []]
        return cls(**data)


def outcome_of(checks: Sequence[Check]) -> tuple[str, str, bool]:
    """(outcome, reason, model_miss) of a list of checks."""
    errors = [c for c in checks if c.outcome == ERROR]
    if errors:
        return ERROR, f"{errors[0].name}: {errors[0].reason}", False
    failures = [c for c in checks if c.outcome == FAIL and c.kind in BLOCKING_KINDS]
    if failures:
        return FAIL, "; ".join(f"{c.name}: {c.reason}" for c in failures), False
    skipped = next((c for c in checks if c.outcome == SKIP and (c.kind == EXPECTATION or c.name == "request")), None)
    if skipped is not None:  # not sent, a model miss, or nothing to compare against
        return SKIP, skipped.reason, skipped.name == "natural"
    return PASS, "", False


def make_result(case: Any, transcript: Transcript, checks: list[Check]) -> CaseResult:
    outcome, reason, miss = outcome_of(checks)
    return CaseResult(
        case_id=case.id,
        mode=transcript.mode,
        profile=transcript.profile,
        outcome=outcome,
        reason=reason,
        repeat=transcript.repeat,
        forced=transcript.forced,
        natural=transcript.natural,
        model_miss=miss,
        features=tuple(case.features or ()),
        description=case.description or "",
        checks=checks,
    )


@dataclass
class Summary:
    counts: dict[str, int]
    model_misses: int
    total: int
    pass_at_k: dict[str, Any] | None = None  # {"k": K, "cases": N, "passed": M} when repeated

    @property
    def exit_outcome(self) -> str:
        """The worst outcome: error > fail > pass/skip."""
        if self.counts.get(ERROR):
            return ERROR
        if self.counts.get(FAIL):
            return FAIL
        return PASS

    @property
    def exit_code(self) -> int:
        """0 all pass or skip, 1 a fail, 2 an error."""
        return {ERROR: exit_codes.ERROR, FAIL: exit_codes.FAILED}.get(self.exit_outcome, exit_codes.OK)

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
    return Summary(
        counts={o: counts.get(o, 0) for o in OUTCOMES},
        model_misses=sum(r.model_miss for r in results),
        total=len(results),
        pass_at_k=pass_at_k,
    )


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
    from conformance.recording import records

    results = []
    for number, record in records(path, "results"):
        try:
            results.append(CaseResult.from_dict(record))
        except (TypeError, ValueError, AttributeError) as exc:
            raise TranscriptError(f"{path}:{number}: not a result: {exc}") from exc
    return results
