"""A predicted server release as a record: what its start-up (or its answers to chat requests, for a
frontend that starts anyway) will be for a checkpoint's `response_template`.

Every predictor reads the same `TemplateFacts`, what the format's own loader made of the template, and
returns its verdict per configuration. `conformance.audit.predictors.registry` lists them in one place,
in the order of the audit report's keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class TemplateFacts:
    template: dict | None  # the `response_template` value when it is an object (vLLM's resolve), else None
    raw_template: object  # the value as it stands in tokenizer_config.json (absent: None)
    serving_error: str | None  # the loader's or the serving check's message (None: it loads and serves)
    fields: frozenset[str]  # the fields the loaded template has
    model_type: str | None = None  # config.json's, where the server decides by it (None: unknown or none)


@dataclass(frozen=True)
class Predictor:
    """`key` names it in the audit report (and on the analysis), `label` on a terminal (`vLLM 0.32`); `kind`
    says what its verdicts are:
    `startup` (`StartupVerdict`, judged against a checkpoint's `expect`, unreadable files fail every
    configuration) or `outcome` (the outcome records of a frontend that may start and refuse requests).
    `expect_label` starts a message about an unmet `expect` (vLLM 0.32's names no release)."""

    key: str
    label: str
    kind: Literal["startup", "outcome"]
    predict: Callable[[TemplateFacts], Mapping[str, Any]]
    expect_label: str = ""
