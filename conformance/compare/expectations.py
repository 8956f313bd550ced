"""Gate expectations: a YAML file acknowledging known differences between a baseline and a candidate.

    acknowledge:
      - case: tool-choice-required          # or a list, `*` matching anything; or feature: a tag or a list
        kind: request_refused               # a conformance.compare.diff.DifferenceKind
        field: tool_calls[*].arguments      # optional: only this field (`*` matches anything)
        mode: stream                        # optional: only this mode
        reason: hf refuses required tool choice it cannot guarantee
        reference: docs/vllm-0.32-contract.md#2-1
        client_action: send tool_choice auto
        occasional: true                    # optional: the difference depends on timing (never stale)

Validated against `schemas/expectations.schema.json`, no key given twice; every problem names the file, the
line and the field. A difference is acknowledged by the first entry that matches it; an entry that matches no
difference is stale.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.compare.diff import Difference
from conformance.formats.registry import DEFAULT_FORMAT
from conformance.util import safe_yaml
from conformance.util.locations import format_path, node_line
from conformance.util.package_paths import SHIPPED_EXPECTATIONS_DIR, load_schema

SHIPPED_DIR = SHIPPED_EXPECTATIONS_DIR
DEFAULT_PAIR_FILE = SHIPPED_DIR / "vllm-0.32-legacy-to-hf.yaml"  # the expectations of the default gate
# The shipped expectations of a (baseline, candidate) profile pair: a gate's default for that pair.
SHIPPED_PAIRS: dict[tuple[str, str], Path] = {("legacy", "hf"): DEFAULT_PAIR_FILE,
                                              ("hf", "hf-0.33"): SHIPPED_DIR / "vllm-0.32-to-0.33-hf.yaml"}
# The same for a response format other than the tiny checkpoint's: by (format, baseline, candidate).
SHIPPED_FORMAT_PAIRS: dict[tuple[str, str, str], Path] = {
    (form, "legacy", "hf"): SHIPPED_DIR / f"{form}-vllm-0.32-legacy-to-hf.yaml" for form in ("gemma4", "qwen3-xml", "glm45")}


def shipped_expectations(baseline: str | None, candidate: str | None, form: str = DEFAULT_FORMAT.name) -> Path | None:
    """The expectations file shipped for gating `baseline` -> `candidate` on a checkpoint of response
    format `form` (None: none ships)."""
    if form != DEFAULT_FORMAT.name:
        return SHIPPED_FORMAT_PAIRS.get((form, str(baseline), str(candidate)))
    return SHIPPED_PAIRS.get((str(baseline), str(candidate)))


class ExpectationsError(ValueError):
    """An expectations file that cannot be used; the message names file, line and field."""


@dataclass(frozen=True)
class Acknowledgement:
    kind: str
    reason: str
    cases: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    field: str | None = None
    mode: str | None = None
    reference: str | None = None
    client_action: str | None = None
    source: str = ""  # file:line
    # The difference comes and goes between runs (how a busy server groups tokens into chunks): an entry
    # that matches nothing in a run is not stale.
    occasional: bool = False

    def matches(self, difference: Difference) -> bool:
        if difference.kind != self.kind or (self.mode and difference.mode != self.mode):
            return False
        if not (any(_pattern(case).fullmatch(difference.case_id) for case in self.cases)
                or set(difference.features) & set(self.features)):
            return False
        return self.field is None or _pattern(self.field).fullmatch(difference.field or "") is not None

    def selector(self) -> dict[str, Any]:
        selected: dict[str, Any] = {}
        for key, value in (("case", self.cases), ("feature", self.features)):
            if value:
                selected[key] = list(value)
        for key, value in (("field", self.field), ("mode", self.mode)):
            if value:
                selected[key] = value
        return selected

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in (("reason", self.reason), ("reference", self.reference),
                                              ("client_action", self.client_action), ("source", self.source))
                if value}


def _pattern(text: str) -> re.Pattern[str]:
    """`text` as a pattern in which `*` matches any run of characters and nothing else is special."""
    return re.compile(".*".join(re.escape(part) for part in text.split("*")))


def acknowledge_line(path: Path) -> int:
    """The line of an expectations file where an acknowledgement is added (its `acknowledge:` key; 1 when the
    file cannot say), for annotations that point there."""
    try:
        node, _ = safe_yaml.load_file(path)
    except safe_yaml.YamlFileError:
        return 1
    return node_line(node, ["acknowledge"]) or 1


def load_expectations(path: Path) -> list[Acknowledgement]:
    """The entries of an expectations file, or ExpectationsError listing every problem."""
    import jsonschema


    try:
        node, data = safe_yaml.load_file(path)
    except safe_yaml.YamlFileError as exc:
        raise ExpectationsError(f"{path}{f':{exc.line}' if exc.line else ''}: {exc.problem}") from exc
    duplicates = [f"{path}:{line}: {format_path(at)}: duplicate key {at[-1]!r} (YAML would keep the last one)"
                  for at, line in safe_yaml.duplicate_keys(node)]
    if duplicates:
        raise ExpectationsError("\n".join(duplicates))
    validator = jsonschema.Draft202012Validator(load_schema("expectations.schema.json"))
    problems = []
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        at = list(error.absolute_path)
        line = node_line(node, at)
        problems.append(f"{path}:{line or 1}: {format_path(at) or 'the file'}: {_message(error)}")
    if not problems:
        from conformance.suite.contract_document import reference_problem

        for index, entry in enumerate(data["acknowledge"]):
            problem = reference_problem(entry["reference"]) if "reference" in entry else None
            if problem:
                at = ["acknowledge", index, "reference"]
                problems.append(f"{path}:{node_line(node, at)}: {format_path(at)}: {problem}")
    if problems:
        raise ExpectationsError("\n".join(dict.fromkeys(problems)))
    return [
        Acknowledgement(
            kind=entry["kind"], reason=" ".join(entry["reason"].split()), cases=_names(entry.get("case")),
            features=_names(entry.get("feature")), field=entry.get("field"), mode=entry.get("mode"),
            reference=entry.get("reference"), client_action=entry.get("client_action"),
            source=f"{path.name}:{node_line(node, ['acknowledge', index])}", occasional=entry.get("occasional", False),
        )
        for index, entry in enumerate(data["acknowledge"])
    ]  # fmt: skip


def _message(error: Any) -> str:
    if error.validator == "anyOf" and error.schema.get("anyOf") == [{"required": ["case"]}, {"required": ["feature"]}]:
        return "an entry needs `case` or `feature` to say which cases it acknowledges"
    if error.validator == "additionalProperties":
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        return f"{error.message} (allowed: {allowed})"
    return error.message


def _names(value: str | list[str] | None) -> tuple[str, ...]:
    return () if value is None else (value,) if isinstance(value, str) else tuple(value)


def unknown_selectors(entries: Sequence[Acknowledgement], case_ids: set[str], features: set[str]) -> list[str]:
    """Entries naming a case id or feature tag the compared runs do not know (a typo never matches)."""
    problems = []
    for entry in entries:
        for case in entry.cases:
            if not any(_pattern(case).fullmatch(known) for known in case_ids):
                problems.append(f"{entry.source}: case: unknown case id {case!r}")
        for feature in entry.features:
            if feature not in features:
                problems.append(f"{entry.source}: feature: unknown feature tag {feature!r}")
    return problems


def acknowledge(differences: Sequence[Difference], entries: Sequence[Acknowledgement]
                ) -> tuple[list[tuple[Difference, Acknowledgement | None]], list[Acknowledgement]]:
    """(each difference with the first entry that acknowledges it, or None; the stale entries: those that
    matched nothing and are not `occasional`)."""
    used: set[int] = set()
    matched = []
    for difference in differences:
        entry_index = next((i for i, entry in enumerate(entries) if entry.matches(difference)), None)
        if entry_index is not None:
            used.add(entry_index)
        matched.append((difference, entries[entry_index] if entry_index is not None else None))
    return matched, [entry for i, entry in enumerate(entries) if i not in used and not entry.occasional]
