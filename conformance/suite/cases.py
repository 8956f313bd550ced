"""Load and validate the case suite (`cases/*.yaml`); the runner contract is cases/README.md.

`load_suite()` returns ready-to-run `Case` objects (`conformance.record.case_model`) or raises `CaseFileError`; `check_suite()` returns
every problem found (errors and warnings) for `conformance cases check`. Both apply the same rules:
the JSON Schema `schemas/case.schema.json`, the feature registry `features.txt`, unique ids and
descriptions, descriptions that state behaviour, known tool names (a file's own `tools` block and
the directory's `tools.yaml`) and known profiles.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml

from conformance.formats.format import Format
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
from conformance.formats.tiny_checkpoint import VARIANTS
from conformance.record.case_model import GRANULARITY_FEATURE, MODES, RUN_CONTROLS, Case, build_case
from conformance.servers.profiles import PROFILES
from conformance.suite.contract_document import reference_problem
from conformance.suite.format_cases import in_format
from conformance.util import safe_yaml
from conformance.util.locations import format_path, node_line
from conformance.util.package_paths import CASES_DIR, SCHEMAS_DIR

Severity = Literal["error", "warning"]

DEFAULT_CASES_DIR = CASES_DIR  # the shipped suite (conformance/util/package_paths.py says where it is)
SHIPPED_MISSING = "the shipped cases are missing from this installation; reinstall the package or give a case directory"
FEATURES_FILE = "features.txt"
TOOLS_FILE = "tools.yaml"  # named tools that every case file of the directory may use
SCHEMA_PATH = SCHEMAS_DIR / "case.schema.json"

CHAT_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter"})
RESPONSES_STATUSES = frozenset({"completed", "incomplete"})
MIN_DESCRIPTION_WORDS = 6
STREAM_FEATURE = "stream"  # the registry tag for "the stream knowingly differs": kept in step with `stream` overrides


# ---------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True)
class Issue:
    """One problem in a case file, located by file, case (index and id), field path and line."""

    file: Path
    message: str
    case_index: int | None = None
    case_id: str | None = None
    field: str = ""
    line: int | None = None
    severity: Severity = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        parts = [where]
        if self.case_index is not None:
            parts.append(f"case #{self.case_index}" + (f" '{self.case_id}'" if self.case_id else ""))
        if self.field:
            parts.append(f"field {self.field}")
        return f"{self.severity}: {': '.join(parts)}: {self.message}"


class CaseFileError(ValueError):
    """A case file is invalid. `issues` holds every error found; the message shows the first."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        more = f" (and {len(issues) - 1} more errors)" if len(issues) > 1 else ""
        super().__init__(f"{issues[0]}{more}")


@dataclass
class SuiteCheck:
    """Outcome of checking a suite directory: the cases that loaded and every issue found."""

    directory: Path
    files: list[Path] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    @property
    def errors(self) -> list[Issue]:
        return [issue for issue in self.issues if issue.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [issue for issue in self.issues if issue.severity == "warning"]


# ---------------------------------------------------------------------------------------------
# Public entry points


def load_suite(directory: Path | None = None, form: Format = DEFAULT_FORMAT) -> list[Case]:
    """Every case of the suite in `directory` (default: the shipped `cases/`), files in name order, as a
    run on a checkpoint of response format `form` sends them (`conformance.suite.format_cases.in_format`:
    each format-independent case rendered in it).

    Raises CaseFileError if any file has an error (warnings do not stop loading).
    """
    check = check_suite(directory)
    if check.errors:
        raise CaseFileError(check.errors)
    return in_format(check.cases, form)


def check_suite(directory: Path | None = None) -> SuiteCheck:
    """Validate every `*.yaml`/`*.yml` file in `directory` and collect all issues (never raises on bad input)."""
    shipped = directory is None
    directory = Path(directory) if directory is not None else DEFAULT_CASES_DIR
    check = SuiteCheck(directory)
    try:
        is_directory = directory.is_dir()
    except OSError as exc:  # e.g. a name too long
        check.issues.append(Issue(directory, f"cannot read: {exc.strerror or exc}"))
        return check
    if not is_directory:
        check.issues.append(Issue(directory, SHIPPED_MISSING if shipped else "not a directory"))
        return check
    try:
        names = sorted(directory.iterdir())
    except OSError as exc:
        check.issues.append(Issue(directory, f"cannot list the directory: {exc.strerror or exc}"))
        return check
    features, feature_issues = _load_features(directory)
    check.issues.extend(feature_issues)
    shared_tools, tool_issues = _load_shared_tools(directory)
    check.issues.extend(tool_issues)
    files = check.files = [p for p in names if p.suffix in (".yaml", ".yml") and p.is_file() and p.name != TOOLS_FILE]
    if not files:
        check.issues.append(Issue(directory, "no case files (*.yaml) in this directory"))
    seen_ids: dict[str, Issue] = {}
    seen_descriptions: dict[str, Issue] = {}
    for path in files:
        cases, issues = _check_file(path, features, shared_tools)
        check.issues.extend(issues)
        for case in cases:
            here = Issue(path, "", case.index, case.id, line=case.line)
            for key, seen, what in (
                (case.id, seen_ids, "id"),
                (" ".join(case.description.lower().split()), seen_descriptions, "description"),
            ):
                if key in seen:
                    first = seen[key]
                    check.issues.append(
                        replace(here, field=what, message=f"duplicate {what}: already used by case "
                                f"#{first.case_index} '{first.case_id}' in {first.file}")
                    )
                else:
                    seen[key] = here
        check.cases.extend(cases)
    return check


def load_features(directory: Path | None = None) -> dict[str, str]:
    """The feature registry used for `directory`: tag -> description."""
    if directory is None and not DEFAULT_CASES_DIR.is_dir():
        raise CaseFileError([Issue(DEFAULT_CASES_DIR, SHIPPED_MISSING)])
    features, issues = _load_features(Path(directory) if directory is not None else DEFAULT_CASES_DIR)
    errors = [issue for issue in issues if issue.severity == "error"]
    if errors:
        raise CaseFileError(errors)
    return features


# ---------------------------------------------------------------------------------------------
# Feature registry


def _load_features(directory: Path) -> tuple[dict[str, str], list[Issue]]:
    """Read `features.txt` from `directory`, falling back to the shipped registry."""
    path = directory / FEATURES_FILE
    try:
        own = path.exists()
    except OSError:  # a directory that cannot be looked up: check_suite says so
        own = False
    if not own:
        path = DEFAULT_CASES_DIR / FEATURES_FILE
    features: dict[str, str] = {}
    issues: list[Issue] = []
    try:
        text = safe_yaml.read_text(path)
    except safe_yaml.UnreadableFile as exc:
        reason = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        return features, [Issue(path, f"cannot read the feature registry: {reason}")]
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        tag, _, description = line.partition(" ")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", tag):
            issues.append(Issue(path, f"invalid feature tag {tag!r} (use [a-z][a-z0-9_]*)", line=number))
        elif not description.strip():
            issues.append(Issue(path, f"feature {tag!r} has no description", line=number))
        elif tag in features:
            issues.append(Issue(path, f"feature {tag!r} is listed twice", line=number))
        else:
            features[tag] = description.strip()
    return features, issues


# ---------------------------------------------------------------------------------------------
# One file


@cache
def _schema() -> dict[str, Any]:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@cache
def _validator() -> Any:
    """Validates a case file."""
    import jsonschema

    return jsonschema.Draft202012Validator(_schema())


@cache
def _tools_validator() -> Any:
    """Validates the directory's TOOLS_FILE: a case file's `tools` block alone (same definitions)."""
    import jsonschema

    schema = _schema()
    tools_only = {
        "title": "Shared tools file",
        "required": ["tools"],
        "properties": {"tools": schema["properties"]["tools"]},
    }
    return jsonschema.Draft202012Validator({**schema, **tools_only})


def _load_shared_tools(directory: Path) -> tuple[dict[str, Any], list[Issue]]:
    """The tools of `directory`/TOOLS_FILE (none if the file is absent) and its problems."""
    path = directory / TOOLS_FILE
    if not path.is_file():
        return {}, []
    locator, issues, _ = _read_document(path, _tools_validator())
    if locator is None:
        return {}, issues
    tools = locator.data["tools"]
    return tools, issues + list(_tool_name_issues(tools, locator))


def _read_document(path: Path, validator: Any) -> tuple[_Locator | None, list[Issue], set[int]]:
    """Parse and schema-check one file: (its locator, or None when nothing in it is usable; the
    problems found; the indices of cases with schema errors)."""
    try:
        node, data = safe_yaml.load_file(path)
    except safe_yaml.YamlFileError as exc:
        if exc.line is None:
            return None, [Issue(path, exc.problem)], set()
        problem = exc.problem.replace("invalid YAML: ", f"invalid YAML (column {exc.column}): ", 1)
        return None, [Issue(path, problem, line=exc.line)], set()
    locator = _Locator(path, data, node)
    issues = list(_duplicate_keys(node, locator))
    invalid_cases: set[int] = set()
    file_level_invalid = False
    for at, message in sorted(_schema_problems(data, validator), key=lambda problem: list(map(str, problem[0]))):
        issues.append(locator.issue(at, message))
        if len(at) >= 2 and at[0] == "cases" and isinstance(at[1], int):
            invalid_cases.add(at[1])
        else:
            file_level_invalid = True
    return (None if file_level_invalid else locator), issues, invalid_cases


def _tool_name_issues(tools: Mapping[str, Any], locator: _Locator) -> Iterator[Issue]:
    for name, tool in tools.items():
        if tool["function"]["name"] != name:
            yield locator.issue(["tools", name, "function", "name"],
                                f"tool is listed under {name!r} but its function.name is {tool['function']['name']!r}")


def _check_file(
    path: Path, features: Mapping[str, str], shared_tools: Mapping[str, Any]
) -> tuple[list[Case], list[Issue]]:
    locator, issues, invalid_cases = _read_document(path, _validator())
    if locator is None:
        return [], issues
    data, node = locator.data, locator.node
    own_tools = data.get("tools", {})
    issues.extend(_tool_name_issues(own_tools, locator))
    for name in sorted(own_tools.keys() & shared_tools.keys()):
        issues.append(locator.issue(["tools", name], f"tool {name!r} is already defined in {TOOLS_FILE} "
                                    "(use that one, or give this one another name)"))
    tools = {**shared_tools, **own_tools}
    cases = []
    for index, raw in enumerate(data["cases"]):
        case_issues = list(_semantic_issues(raw, index, tools, features, locator))
        issues.extend(case_issues)
        if index not in invalid_cases and not any(issue.severity == "error" for issue in case_issues):
            cases.append(build_case(raw, index, tools, path, node_line(node, ["cases", index]) or 0))
    return cases, sorted(issues, key=lambda issue: issue.line or 0)


def _semantic_issues(
    raw: Any, index: int, tools: Mapping[str, Any], features: Mapping[str, str], locator: _Locator
) -> Iterator[Issue]:
    """Rules the schema cannot express. Tolerates schema-invalid parts, so a case that breaks the
    schema still gets these findings too (the linter reports everything in one pass)."""
    if not isinstance(raw, dict):
        return
    at = ["cases", index]
    for position, tag in enumerate(_list(raw.get("features"))):
        if isinstance(tag, str) and tag not in features:
            yield locator.issue([*at, "features", position], f"unknown feature {tag!r} (not in {FEATURES_FILE})")
        elif tag == GRANULARITY_FEATURE:
            yield locator.issue([*at, "features", position], f"{tag!r} is the runner's: it lists every granular "
                                                             "stream's result under it (--granularities); a case does not")
    for position, reference in enumerate(_list(raw.get("references"))):
        if isinstance(reference, str) and (problem := reference_problem(reference)):
            yield locator.issue([*at, "references", position], problem)
    description, case_id = raw.get("description"), raw.get("id")
    if isinstance(description, str):
        words = description.split()
        if isinstance(case_id, str) and _words_of(description) == _words_of(case_id):
            yield locator.issue([*at, "description"], "description repeats the id; state the behaviour instead")
        elif len(words) < MIN_DESCRIPTION_WORDS:
            yield locator.issue([*at, "description"], f"description too short ({len(words)} words): "
                                f"state the behaviour in at least {MIN_DESCRIPTION_WORDS} words")
    request = raw.get("request") if isinstance(raw.get("request"), dict) else {}
    request_tool_names = set()
    for position, tool in enumerate(_list(request.get("tools"))):
        if isinstance(tool, str):
            if tool not in tools:
                known = ", ".join(sorted(tools)) or "none"
                yield locator.issue([*at, "request", "tools", position],
                                    f"unknown tool name {tool!r} (tools of this file and {TOOLS_FILE}: {known})")
            request_tool_names.add(tool)
        elif isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            request_tool_names.add(tool["function"].get("name"))
    natural = raw.get("natural") if isinstance(raw.get("natural"), dict) else {}
    natural_tool = natural.get("expect_tool")
    if natural_tool is not None and natural_tool not in request_tool_names:
        yield locator.issue([*at, "natural", "expect_tool"], f"{natural_tool!r} is not among the request's tools")
    variant = raw.get("fixture_variant")
    if isinstance(variant, str) and variant not in VARIANTS:
        yield locator.issue([*at, "fixture_variant"], f"unknown fixture variant {variant!r} "
                            f"(known: {', '.join(VARIANTS)})")
    written_in = raw.get("format")
    if isinstance(written_in, str) and written_in not in FORMATS:
        yield locator.issue([*at, "format"], f"unknown response format {written_in!r} (known: {', '.join(FORMATS)})")
    endpoint = raw.get("endpoint", "chat")
    judged_by_parse = raw.get("reference") == "parse"
    if ("turn" in raw or judged_by_parse) and endpoint != "chat":
        yield locator.issue([*at, "endpoint"], "a case judged by its format's parse (turn, or reference: parse) is "
                            "sent to chat completions only")
    yield from _second_turn_issues(raw, at, locator)
    allowed = RESPONSES_STATUSES if endpoint == "responses" else CHAT_FINISH_REASONS
    expect = raw.get("expect") if isinstance(raw.get("expect"), dict) else {}
    for profile, expectation in expect.items():
        if profile not in PROFILES:
            yield locator.issue([*at, "expect", profile], f"expectation for unknown profile {profile!r} "
                                f"(known: {', '.join(PROFILES)})", severity="warning")
        if not isinstance(expectation, dict):
            continue
        if judged_by_parse and "message" in expectation:
            yield locator.issue([*at, "expect", profile, "message"], "a case judged by its format's parse "
                                "(reference: parse) expects that parse of every profile: state only a refusal or a "
                                "skip here, and a server's known bug as a deviation declared on the format")
        stream = expectation.get("stream") if isinstance(expectation.get("stream"), dict) else {}
        if "usage" in expectation and "stream" in _list(raw.get("modes", list(MODES))) and not _asks_usage(request):
            yield locator.issue([*at, "expect", profile, "usage"], "a stream carries usage only when asked: set "
                                "request.stream_options.include_usage, or give modes: [non-stream]")
        for path, value in ((["finish_reason"], expectation.get("finish_reason")),
                            (["stream", "finish_reason"], stream.get("finish_reason"))):  # fmt: skip
            if value in CHAT_FINISH_REASONS | RESPONSES_STATUSES and value not in allowed:  # others: schema
                what = "status" if endpoint == "responses" else "finish_reason"
                yield locator.issue([*at, "expect", profile, *path], f"{value!r} is not a valid {what} for endpoint "
                                    f"{endpoint} (use one of {', '.join(sorted(allowed))})")
    if judged_by_parse:
        yield from _parse_reference_issues(raw, at, locator, features)
    elif STREAM_FEATURE in features:
        tagged = STREAM_FEATURE in _list(raw.get("features"))
        overridden = [profile for profile, e in expect.items() if isinstance(e, dict) and "stream" in e]
        if tagged and not overridden:
            yield locator.issue([*at, "features"], f"feature {STREAM_FEATURE!r} marks a known difference between "
                                "streaming and non-streaming, but no expectation has a `stream` override")
        elif overridden and not tagged:
            yield locator.issue([*at, "features"], f"expect.{overridden[0]}.stream records a difference between "
                                f"streaming and non-streaming: list the feature {STREAM_FEATURE!r}")


# Request options under which the answer is not the format's parse of the text the model wrote and that no
# request rule of the contract describes (`conformance.record.request_rules`): a case judged by its format's
# parse may not send them
ANSWER_CHANGING_OPTIONS: dict[str, tuple[str | bool, ...]] = {"tool_choice": ("required",)}


def _parse_reference_issues(raw: Mapping[str, Any], at: list[str | int], locator: _Locator,
                            features: Mapping[str, str]) -> Iterator[Issue]:
    """A case judged by its format's parse (`reference: parse`): parsed with its format's own templates, for a
    request that leaves the answer the parse; tagged `stream` exactly when a deviation declared on its format
    shows in one mode only (the stream then differs from the non-streaming answer)."""
    if "fixture_variant" in raw:
        yield locator.issue([*at, "fixture_variant"], "a case judged by its format's parse is parsed with the "
                            "format's own templates, not a fixture variant's: state each profile's answer instead")
    request = raw.get("request") if isinstance(raw.get("request"), dict) else {}
    for option, values in ANSWER_CHANGING_OPTIONS.items():
        value = request.get(option)
        if isinstance(value, dict) or (isinstance(value, (str, bool)) and value in values):  # a dict: a named tool
            yield locator.issue([*at, "request", option], f"{option}: {json.dumps(value)} changes what the answer "
                                "holds, so it is not the format's parse of the text: state each profile's answer instead")
    form = FORMATS.get(raw["format"] if isinstance(raw.get("format"), str) else DEFAULT_FORMAT.name)
    if STREAM_FEATURE in features and form is not None:
        one_mode = any(len(d.modes) == 1 for d in form.deviations if d.case == raw.get("id"))
        if (STREAM_FEATURE in _list(raw.get("features"))) != one_mode:
            yield locator.issue([*at, "features"], f"feature {STREAM_FEATURE!r} marks a known difference between "
                                "streaming and non-streaming: for a case judged by its format's parse, list it exactly "
                                f"when a deviation declared on {form.name} for the case names one mode only")


# What a case with a second turn may ask: what the clients send back and the run controls the run adds.
SECOND_TURN_REQUEST_KEYS = frozenset({"messages", "tools", "tool_choice", *RUN_CONTROLS})


def _second_turn_issues(raw: Mapping[str, Any], at: list[str | int], locator: _Locator) -> Iterator[Issue]:
    """A second turn answers turn 1's calls as the model wrote them: one tool result per call, a plain turn
    (no shape, no format delimiter named in it: the conversation sent back must be what the model wrote).
    Turn 1 as written is the turn case's `turn`, or the raw case's `second_turn.written`."""
    second = raw.get("second_turn")
    if not isinstance(second, dict):
        return
    if "turn" in raw and "written" in second:
        yield locator.issue([*at, "second_turn", "written"], "a turn case's turn is what the model wrote: no "
                            "`written` (it is for a case with a raw `force`)")
    elif "force" in raw and "written" not in second:
        yield locator.issue([*at, "second_turn"], "a case with a raw `force` states turn 1 as the model wrote it "
                            "in `second_turn.written` (the conversation its second turn sends back)")
    elif "force" not in raw and "turn" not in raw:
        yield locator.issue([*at, "second_turn"], "a second turn follows a forced turn 1 (`turn`, or `force`)")
    if "non-stream" not in _list(raw.get("modes", list(MODES))):
        yield locator.issue([*at, "modes"], "a second turn answers the non-streaming turn 1: keep non-stream")
    request = raw.get("request") if isinstance(raw.get("request"), dict) else {}
    if extra := sorted(set(request) - SECOND_TURN_REQUEST_KEYS):
        yield locator.issue([*at, "request"], f"a case with a second turn sends {', '.join(extra)}, which the clients "
                            f"do not send back (only {', '.join(sorted(SECOND_TURN_REQUEST_KEYS))})")
    turn = raw.get("turn") if isinstance(raw.get("turn"), dict) else second.get("written")
    if not isinstance(turn, dict):
        return
    calls, results = _list(turn.get("tool_calls")), _list(second.get("tool_results"))
    if len(calls) != len(results):
        yield locator.issue([*at, "second_turn", "tool_results"], f"{len(results)} tool result(s) for the "
                            f"{len(calls)} call(s) of the turn: give one per call, in order")
    if "shape" in raw:
        yield locator.issue([*at, "shape"], "a case with a second turn sends turn 1 back as the model wrote it: "
                            "no shape")
    if "{{" in json.dumps(turn):
        yield locator.issue([*at, "turn"], "a case with a second turn sends turn 1 back as the model wrote it: no "
                            "format delimiter ({{...}}) in it")


def _asks_usage(request: Mapping[str, Any]) -> bool:
    """Whether a streaming request asks for the final usage chunk."""
    options = request.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _words_of(text: str) -> list[str]:
    """Lower-case words, hyphens counting as spaces: how a description is compared with an id."""
    return text.lower().replace("-", " ").split()


# ---------------------------------------------------------------------------------------------
# Locating problems: case index/id, field path and YAML line


class _Locator:
    """Turns a path inside a parsed file into an Issue naming the case, the field and the line."""

    def __init__(self, path: Path, data: Any, node: yaml.Node | None) -> None:
        self.path, self.data, self.node = path, data, node

    def issue(self, at: list[str | int], message: str, severity: Severity = "error") -> Issue:
        case_index = case_id = None
        field_path = at
        if len(at) >= 2 and at[0] == "cases" and isinstance(at[1], int):
            case_index, field_path = at[1], at[2:]
            case = self.data["cases"][case_index]
            if isinstance(case, dict) and isinstance(case.get("id"), str):
                case_id = case["id"]
        return Issue(self.path, message, case_index, case_id, format_path(field_path),
                     node_line(self.node, at), severity)


def _duplicate_keys(node: yaml.Node | None, locator: _Locator) -> Iterator[Issue]:
    """YAML silently keeps the last of two equal keys; report them instead."""
    for path, line in safe_yaml.duplicate_keys(node):
        yield replace(locator.issue(path, f"duplicate key {path[-1]!r}"), line=line)


def _schema_problems(data: Any, validator: Any) -> Iterator[tuple[list[str | int], str]]:
    """Schema violations as (path, message), phrased for a person editing the YAML."""
    for error in validator.iter_errors(data):
        at = list(error.absolute_path)
        if error.schema is False:
            # jsonschema places a `false` subschema's error on the parent object: find the key
            parent = _at_path(data, at)
            keys = [key for key in _FORBIDDEN_KEYS if isinstance(parent, dict) and parent.get(key, ()) is error.instance]
            yield [*at, *keys[:1]], "key not allowed here" if keys else _one_line(error.message)
        elif error.validator == "additionalProperties" and error.validator_value is False:
            known = error.schema.get("properties", {})
            for key in error.instance:
                if key not in known:
                    yield [*at, key], f"unknown key {key!r} (allowed here: {', '.join(known)})"
        elif error.validator == "required" and (missing := re.match(r"^'(.*)' is a required property$", error.message)):
            yield [*at, missing.group(1)], "required key is missing"
        elif error.validator in ("oneOf", "anyOf") and all(set(sub) == {"required"} for sub in error.validator_value):
            yield at, "give exactly one of " + " or ".join(f"`{sub['required'][0]}`" for sub in error.validator_value)
        elif error.validator == "anyOf" and "tools" in at:
            yield at, f"a tool must be a name from the file's `tools` block or {TOOLS_FILE}, or a full tool object"
        else:
            yield at, _one_line(error.message)


# keys that some subschema forbids with `false` (see _schema_problems)
_FORBIDDEN_KEYS = ("model", "stream", "message", "finish_reason", "tool_call_streaming", "force", "natural", "modes",
                   "error", "usage")


def _at_path(data: Any, path: list[str | int]) -> Any:
    for part in path:
        data = data[part]
    return data


def _one_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 300 else text[:297] + "..."
