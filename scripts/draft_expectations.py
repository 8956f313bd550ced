#!/usr/bin/env python3
"""Draft a profile's case expectations from a recorded run (a maintainer's tool, no server).

    scripts/draft_expectations.py RUN_DIR PROFILE [--cases DIR] [--write AFTER]

RUN_DIR is the output folder of `conformance run --launch PROFILE` (its transcripts.jsonl; its
`checkpoint` folder, when there, gives the markers checked for leaks). For each case recorded there,
every existing expectation of the case (another profile's, not a `skip`) is judged on PROFILE's
recorded answers with the run's own checks: those that pass on every mode and repeat "hold". The
tool prints, per case, which existing expectations hold, and else the expectation the recorded
answers give (the non-streaming answer, the stream's differences as `stream:` overrides; a refusal
as `error`, a preflight as its status, allow-origin header and body), itself judged the same way.

`--write AFTER` also puts PROFILE's entry into the case files, right after AFTER's entry of each case
that has none for PROFILE yet: `PROFILE: *anchor` when a held expectation has an anchor or alias
(AFTER's first, then in the case's order), else the drafted YAML. Review the diff before committing
it: an expectation that holds pins what the server did, not what it should do.
Exit 0 when every case got an expectation that holds, 1 when some drafted one does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from conformance.formats.markers import markers_for_checkpoint
from conformance.record.case_model import build_expectation
from conformance.record.recording import read_transcripts
from conformance.record.transcript import Transcript, TranscriptError, group_by_key
from conformance.record.wire import Message, error_object, read_stream, response_message
from conformance.run.engine import judge_group
from conformance.suite.cases import CaseFileError, load_suite

PREFLIGHT_HEADER = "access-control-allow-origin"


@dataclass(frozen=True)
class Draft:
    """One case's outcome: the existing profiles whose expectation holds, the expectation the
    recorded answers give (YAML-shaped), and the problems that one still has when judged (none: it holds)."""

    case: Any
    holds: tuple[str, ...]
    drafted: dict[str, Any]
    drafted_problems: tuple[str, ...]


def _calls(message: Message) -> list[dict[str, Any]]:
    calls = []
    for call in message.tool_calls:
        try:  # absent arguments are the empty object; an empty string is no JSON (hermes streams one)
            calls.append({"name": call.name, "arguments": {} if call.arguments is None else json.loads(call.arguments)})
        except json.JSONDecodeError:
            calls.append({"name": call.name, "arguments_raw": call.arguments})
    return calls


def _message_fields(message: Message) -> dict[str, Any]:
    fields = {"reasoning": message.reasoning, "content": message.content, "tool_calls": _calls(message)}
    return {key: value for key, value in fields.items() if value}


def observed(transcript: Transcript) -> dict[str, Any]:
    """What one recorded answer says, in the shape of a case expectation."""
    if transcript.endpoint == "preflight":
        response = transcript.response or {}
        headers, body = response.get("headers") or {}, str(response.get("body") or "")
        shown = {"status": transcript.status, "headers": {PREFLIGHT_HEADER: headers.get(PREFLIGHT_HEADER)}}
        return {"preflight": {**shown, **({"body": body.strip()[:80]} if body.strip() else {})}}
    if transcript.status is None or transcript.status >= 400:
        error = error_object(transcript.error_body)
        message = error.get("message") or error.get("detail")
        fields = {"status": transcript.status, "param": error.get("param"),
                  "message": message if isinstance(message, str) and message else None}
        return {"error": {key: value for key, value in fields.items() if value is not None}}
    message = read_stream(transcript).message if transcript.mode == "stream" else response_message(transcript)
    if message is None:
        return {"error": {"status": transcript.status}}
    return {"message": _message_fields(message), "finish_reason": message.finish_reason}


def draft_of(by_mode: Mapping[str, Transcript]) -> dict[str, Any]:
    """The expectation of one case's recorded modes: the non-streaming answer (else the stream's),
    with the fields where the stream differs as `stream:` overrides."""
    base = observed(by_mode.get("non-stream") or by_mode["stream"])
    if "stream" not in by_mode or "non-stream" not in by_mode or "message" not in base:
        return base
    stream = observed(by_mode["stream"])
    if "message" not in stream:
        return base
    overrides = {key: stream["message"].get(key) for key in ("reasoning", "content", "tool_calls")
                 if stream["message"].get(key) != base["message"].get(key)}
    if stream["finish_reason"] != base["finish_reason"]:
        overrides["finish_reason"] = stream["finish_reason"]
    return {**base, "stream": {key: value if value is not None else "" for key, value in overrides.items()}} \
        if overrides else base


def _problems(case: Any, profile: str, expectation: Any, groups: Sequence[Mapping[str, Transcript]],
              markers: Sequence[str]) -> list[str]:
    """What fails or is not judged when `expectation` is `profile`'s, over every recorded repeat."""
    judged_case = replace(case, expect={**case.expect, profile: expectation})
    results = [result for by_mode in groups for result in judge_group(judged_case, dict(by_mode), markers)]
    return [f"{r.mode}: {r.outcome}: {r.reason}" for r in results if r.outcome != "pass"]


def draft_case(case: Any, profile: str, groups: Sequence[Mapping[str, Transcript]], markers: Sequence[str]) -> Draft:
    holds = tuple(name for name, expectation in case.expect.items()
                  if name != profile and expectation.skip is None
                  and not _problems(case, profile, expectation, groups, markers))
    drafted = draft_of(groups[0])
    problems = _problems(case, profile, build_expectation(drafted), groups, markers)
    return Draft(case, holds, drafted, tuple(problems))


def drafts(run_dir: Path, profile: str, cases_dir: Path | None = None) -> list[Draft]:
    """Every recorded case's Draft for `profile`, in the case set's order."""
    transcripts = [t for t in read_transcripts(run_dir / "transcripts.jsonl") if t.profile == profile]
    if not transcripts:
        raise ValueError(f"{run_dir / 'transcripts.jsonl'} holds no transcript of profile {profile!r}")
    checkpoint = run_dir / "checkpoint"
    markers = markers_for_checkpoint(checkpoint if (checkpoint / "tokenizer_config.json").is_file() else None)
    groups: dict[str, list[Mapping[str, Transcript]]] = {}
    for (case_id, _, _), by_mode in group_by_key(transcripts).items():
        if not any(t.skip_reason for t in by_mode.values()):  # a request not sent says nothing
            groups.setdefault(case_id, []).append(by_mode)
    return [draft_case(case, profile, groups[case.id], markers) for case in load_suite(cases_dir) if case.id in groups]


# --- YAML -----------------------------------------------------------------------------------------


def yaml_block(value: Any, indent: int) -> str:
    text = yaml.safe_dump(value, allow_unicode=True, sort_keys=False, width=100, default_flow_style=None)
    return "".join(" " * indent + line + "\n" for line in text.splitlines())


_ENTRY = re.compile(r"^(?P<indent>\s*)(?P<key>[a-z][a-z0-9._-]*):\s*(?:(?P<mark>[&*])(?P<anchor>[\w.-]+))?")


def _expect_entries(lines: list[str], case_line: int) -> dict[str, tuple[int, str | None]]:
    """{profile: (line index, its anchor or alias name)} of the `expect:` block of the case at `case_line` (1-based)."""
    start = next(i for i in range(case_line - 1, len(lines)) if lines[i].strip() == "expect:")
    entries: dict[str, tuple[int, str | None]] = {}
    key_indent = None
    for index in range(start + 1, len(lines)):
        match = _ENTRY.match(lines[index])
        stripped = lines[index].strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(lines[index]) - len(lines[index].lstrip())
        if key_indent is None:
            key_indent = indent
        if indent < key_indent:
            break
        if indent == key_indent and match:
            entries[match.group("key")] = (index, match.group("anchor"))
    return entries


def _end_of_entry(lines: list[str], entries: dict[str, tuple[int, str | None]], key: str) -> int:
    """The line index just after `key`'s entry (before the next entry, or after its last indented line)."""
    start, _ = entries[key]
    later = sorted(index for index, _ in entries.values() if index > start)
    if later:
        return later[0]
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _anchored(lines: list[str], index: int, name: str) -> str:
    """Line `index` (an expect entry `key:` ...) with the anchor `&name` put after its key."""
    key, rest = lines[index].split(":", 1)
    return f"{key}: &{name}{rest.rstrip() and ' ' + rest.strip()}\n"


def new_anchor(case_id: str, profile: str, used: set[str]) -> str:
    """`<case-id>`, or `<case-id>-<profile>` when the file has that anchor already; YAML (as PyYAML reads
    it) spells anchors with letters, digits, "-" and "_" only, so hf-0.33 becomes hf-0-33."""
    return case_id if case_id not in used else re.sub(r"[^\w-]", "-", f"{case_id}-{profile}")


def entry_text(draft: Draft, profile: str, after: str, lines: list[str],
               entries: dict[str, tuple[int, str | None]], indent: str) -> str:
    """PROFILE's entry: an alias of a held expectation's anchor or alias (AFTER's first; a held entry
    without one is given the anchor `<case-id>` or, when the file has that already, `<case-id>-<profile>`),
    else the drafted YAML."""
    held = sorted((name for name in draft.holds if name in entries), key=lambda name: name != after)
    for name in held:
        if entries[name][1]:
            return f"{indent}{profile}: *{entries[name][1]}\n"
    if held:
        anchor = new_anchor(draft.case.id, held[0], set(re.findall(r"&([\w.-]+)", "".join(lines))))
        lines[entries[held[0]][0]] = _anchored(lines, entries[held[0]][0], anchor)
        return f"{indent}{profile}: *{anchor}\n"
    return f"{indent}{profile}:\n" + yaml_block(draft.drafted, len(indent) + 2)


def write_entries(found: Sequence[Draft], profile: str, after: str) -> list[str]:
    """Insert PROFILE's entry after AFTER's into every case lacking one; the ids of the cases written."""
    written = []
    by_file: dict[Path, list[Draft]] = {}
    for draft in found:
        if profile not in draft.case.expect and after in draft.case.expect and not draft.case.judged_by_parse:
            by_file.setdefault(draft.case.source, []).append(draft)
    for source, file_drafts in by_file.items():
        lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        for draft in sorted(file_drafts, key=lambda d: d.case.line, reverse=True):  # later cases first: lines stay put
            entries = _expect_entries(lines, draft.case.line)
            indent = _ENTRY.match(lines[entries[after][0]]).group("indent")
            text = entry_text(draft, profile, after, lines, entries, indent)
            lines.insert(_end_of_entry(lines, entries, after), text)
            written.append(draft.case.id)
        source.write_text("".join(lines), encoding="utf-8")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("profile", metavar="PROFILE")
    parser.add_argument("--cases", type=Path, default=None, help="case directory (default: the shipped cases/)")
    parser.add_argument("--write", metavar="AFTER", help="insert PROFILE's entries after AFTER's in the case files")
    args = parser.parse_args(argv)
    try:
        found = drafts(args.run_dir, args.profile, args.cases)
    except (OSError, TranscriptError, CaseFileError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for draft in found:
        if draft.case.judged_by_parse:
            print(f"# {draft.case.id} ({draft.case.source.name}:{draft.case.line}): judged by its format's parse "
                  "(reference: parse): nothing to write; a server's known bug there is a deviation on the format")
            continue
        print(f"# {draft.case.id} ({draft.case.source.name}:{draft.case.line}): "
              + (f"holds: {', '.join(draft.holds)}" if draft.holds else "no existing expectation holds"))
        if not draft.holds:
            print(yaml_block({args.profile: draft.drafted}, 6), end="")
            for problem in draft.drafted_problems:
                print(f"#   the drafted one does not hold: {problem}")
    if args.write:
        written = write_entries(found, args.profile, args.write)
        print(f"wrote {args.profile} into {len(written)} case(s)", file=sys.stderr)
    return 1 if any(not d.holds and d.drafted_problems and not d.case.judged_by_parse for d in found) else 0


if __name__ == "__main__":
    sys.exit(main())
