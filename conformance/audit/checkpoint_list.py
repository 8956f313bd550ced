"""The checkpoint list (`checkpoints.yaml`): load, validate against the shipped JSON Schema, explain errors.

Every error names the file, the entry (index and repo) and the field. A revision that is neither a commit
SHA nor a version-like tag gets a warning: if it is a branch, results are not reproducible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.util import safe_yaml
from conformance.util.package_paths import load_schema

COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
# Separators are required between alphanumeric runs, so a failing match cannot backtrack exponentially.
_VERSION_TAG = re.compile(r"v?\d[A-Za-z0-9]*(?:[.-][A-Za-z0-9]+)*")
_FIELDS = ("repo", "revision", "expect", "notes")


class CheckpointsError(ValueError):
    """The checkpoint list cannot be used; the message names file, entry and field."""


@dataclass(frozen=True)
class CheckpointEntry:
    repo: str
    revision: str
    expect: dict[str, str] = field(default_factory=dict)  # configuration -> "starts" | "fails"
    notes: str | None = None

    @property
    def pinned(self) -> bool:
        return bool(COMMIT_SHA.fullmatch(self.revision))



def revision_warning(entry: CheckpointEntry) -> str | None:
    if entry.pinned or _VERSION_TAG.fullmatch(entry.revision):
        return None
    return (
        f"{entry.repo}@{entry.revision}: revision {entry.revision!r} is not a commit SHA; if it is a branch, "
        "results are not reproducible (pin a commit)"
    )


def parse_spec(spec: str) -> CheckpointEntry:
    """`owner/name[@revision]` from the command line; the revision defaults to `main`."""
    repo, _, revision = spec.partition("@")
    entries = validate_entries([{"repo": repo, "revision": revision or "main"}], source="command line")
    return entries[0]


def _describe_error(source: str, data: Any, error: Any) -> str:
    path = list(error.absolute_path)
    if not path:
        return f"{source}: expected a list of checkpoint entries, got {_yaml_type(data)}"
    index = path[0]
    entry = data[index]
    repo = entry.get("repo") if isinstance(entry, dict) else None
    where = f"{source}: entry {index}" + (f" ({repo})" if isinstance(repo, str) else "")
    if len(path) == 1:
        if error.validator == "additionalProperties":
            unknown = sorted(set(entry) - set(_FIELDS))
            return f"{where}: unknown field(s) {', '.join(map(repr, unknown))} (allowed: {', '.join(_FIELDS)})"
        if error.validator == "required":
            # jsonschema reports each missing field apart, with the same list: name them all, once.
            missing = [name for name in error.validator_value if name not in entry]
            if len(missing) == 1:
                return f"{where}: field {missing[0]!r} is required"
            return f"{where}: fields {', '.join(map(repr, missing))} are required"
        return f"{where}: expected a mapping with fields {', '.join(_FIELDS)}, got {_yaml_type(entry)}"
    name = ".".join(str(part) for part in path[1:])
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"{where}: field {name!r}: unknown key(s) {', '.join(map(repr, unknown))} (allowed: {', '.join(allowed)})"
    if error.validator == "enum":
        return f"{where}: field {name!r}: {error.instance!r} is not one of {', '.join(error.validator_value)}"
    if error.validator == "pattern" and path[1:] == ["repo"]:
        return f"{where}: field 'repo': {error.instance!r} is not a Hub repo id (owner/name)"
    if error.validator == "type":
        return f"{where}: field {name!r}: expected {error.validator_value}, got {_yaml_type(error.instance)}"
    return f"{where}: field {name!r}: {error.message}"


def _yaml_type(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "nothing (null)" if value is None else names.get(type(value), type(value).__name__)


def validate_entries(data: Any, source: str) -> list[CheckpointEntry]:
    """Entries from parsed YAML/JSON data, or CheckpointsError listing every problem."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(load_schema("checkpoints.schema.json"))
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    if errors:
        messages = list(dict.fromkeys(_describe_error(source, data, error) for error in errors))
        raise CheckpointsError("\n".join(messages))
    return [
        CheckpointEntry(repo=item["repo"], revision=item["revision"], expect=dict(item.get("expect", {})),
                        notes=item.get("notes"))
        for item in data
    ]


def load_checkpoints(path: Path) -> list[CheckpointEntry]:
    """Read and validate a checkpoints.yaml file."""
    try:
        node, data = safe_yaml.load_file(path)
    except safe_yaml.YamlFileError as exc:
        where = f" at line {exc.line}, column {exc.column}" if exc.line else ""
        raise CheckpointsError(f"{path}: {exc.problem.replace('invalid YAML: ', f'invalid YAML{where}: ', 1)}") from exc
    duplicates = [_describe_duplicate(str(path), data, at, line) for at, line in safe_yaml.duplicate_keys(node)]
    if duplicates:
        raise CheckpointsError("\n".join(duplicates))
    return validate_entries(data, source=str(path))


def _describe_duplicate(source: str, data: Any, at: list[str | int], line: int) -> str:
    """The message for a key given twice (YAML would keep the last value silently), as the case linter says it."""
    if len(at) < 2 or not isinstance(data, list):
        return f"{source}: line {line}: duplicate key {at[-1]!r}"
    repo = data[at[0]].get("repo") if isinstance(data[at[0]], dict) else None
    where = f"{source}: entry {at[0]}" + (f" ({repo})" if isinstance(repo, str) else "")
    return f"{where}: line {line}: duplicate key {'.'.join(map(str, at[1:]))!r}"
