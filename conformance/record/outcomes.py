"""The outcome vocabulary every stage shares: a check's outcome (pass, fail, skip, error), its kind
(contract, expectation, schema, finding), the named reasons a result may be skipped, and `Check`,
the record of one check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"
CONTRACT, EXPECTATION, SCHEMA, FINDING = "contract", "expectation", "schema", "finding"
BLOCKING_KINDS = (CONTRACT, EXPECTATION)
# Why a result was not judged; only reasons about the server's capabilities or the run's own choices
# (an HTTP error about the setup is an `error`, never a skip). See cases/README.md, "Verdict".
SkipKind = Literal[
    "declared",  # the case's expectation for the profile declares a known skip
    "cannot_force",  # the server cannot force outputs (the forcing probe said why)
    "forcing_off",  # `--forcing off`
    "unforceable_output",  # this case's output cannot be written as a forcing regex
    "no_responses_api",  # the server has no Responses API (404/405 on /responses, not about the model)
    "no_expectation",  # the case has no expectation for this profile
    "model_miss",  # natural mode: the model did not call the tool the prompt asks for
    "other_fixture_variant",  # the case needs another variant of the tiny checkpoint than the run serves
    "other_format",  # the case's forced text is written in another response format than the run serves
    "granularity_not_asked",  # the server cannot be asked for several tokens per stream delta
    "first_turn_unusable",  # a second turn: the server's turn-1 answer has no call to answer (judged there)
    "client_unavailable",  # a second turn: the client library that rebuilds it is not installed here
]
SKIP_KINDS: tuple[str, ...] = get_args(SkipKind)


@dataclass(frozen=True)
class Check:
    name: str
    outcome: str  # pass | fail | skip | error
    kind: str = CONTRACT
    reason: str = ""
    expected: Any = None
    actual: Any = None
    skip_kind: SkipKind | None = None  # set on the skip that makes the whole result a skip

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        return cls(**data)
