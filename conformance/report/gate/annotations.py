"""GitHub Actions annotations from a gate.json: one `::error` per thing clients must do about
unacknowledged differences (the advice and the case runs it concerns), one when the verdict fails for
another reason (a case newly failing), one `::warning` per stale expectation. GitHub shows at most 10
of each per step, so the tenth says how many more.

    python -m conformance.report.gate.annotations reports/gate-X/gate.json

Exit 0 after printing (the gate's own exit code fails the job); 2 when gate.json cannot be read."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conformance.compare.gate import MAX_GATE_BYTES
from conformance.report.gate import actions, view
from conformance.util import exit_codes
from conformance.util.json_codec import MAX_RECORD_DEPTH, parse_json

GITHUB_LIMIT = 10  # annotations of one level GitHub keeps per step


def _data(text: str) -> str:
    """A workflow-command message: one line, `%`, CR and LF escaped as GitHub's toolkit does."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, title: str, message: str, place: str = "") -> str:
    return f"::{level} {place}title={_property(view.printable(title))}::{_data(view.printable(message))}"


def _capped(level: str, items: Sequence[tuple[str, str]], what: str, places: Sequence[str] = ()) -> list[str]:
    places = [*places, *[""] * (len(items) - len(places))]
    if len(items) > GITHUB_LIMIT:
        rest = len(items) - GITHUB_LIMIT + 1
        items = [*items[: GITHUB_LIMIT - 1], (f"{rest} more {what}", "see the job summary (report.md) or report.html")]
    return [_command(level, title, message, place) for (title, message), place in zip(items, places)]


def _place(file: str | None, line: object) -> str:
    """`file=F,line=N,` of an annotation shown on the expectations file (GitHub shows it in the pull request's
    diff when F is in the repository), or nothing when the gate used no file given with --expect."""
    return f"file={_property(view.printable(file))},line={line}," if file and isinstance(line, int) else ""


def annotations(gate: Mapping[str, Any]) -> list[str]:
    """Unacknowledged differences point at the `acknowledge:` key of the --expect file, where an entry would
    acknowledge them; stale expectations at their own entry."""
    expectations = gate.get("expectations") or {}
    where_to_acknowledge = _place(expectations.get("file"), expectations.get("line"))
    labels = view.labels(gate)
    errors = []
    for item in actions.to_do(view.difference_groups(gate), labels):
        if item.acknowledged:
            continue
        cases = item.where()
        where = ", ".join(f"{case_id} ({modes})" for case_id, modes, _ in cases[: actions.MAX_ROWS_LISTED])
        more = f" and {len(cases) - actions.MAX_ROWS_LISTED} more" if len(cases) > actions.MAX_ROWS_LISTED else ""
        errors.append((f"Unacknowledged: {item.title} ({len(item.entries)} in {len(item.rows)} case runs)",
                       f"Client action: {''.join(item.action)} Where: {where}{more}."))
    _, outcome, line = view.verdict(gate)
    if outcome != "PASS" and not errors:
        errors.append((f"Gate {outcome.lower()}", line))
    stale = gate.get("stale") or []
    warnings = [(f"Stale expectation {s.get('source') or ''}".strip(),
                 f"{s.get('kind')} {view.json_text(s.get('selector'))} no longer differs: {s.get('reason') or ''}")
                for s in stale]
    entry_lines = [str(s.get("source") or "").rpartition(":")[2] for s in stale]
    stale_places = [_place(expectations.get("file"), int(line)) if where_to_acknowledge and line.isdigit() else ""
                    for line in entry_lines]
    return (_capped("error", errors, "things to do", [where_to_acknowledge] * len(errors))
            + _capped("warning", warnings, "stale expectations", stale_places))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m conformance.report.gate.annotations GATE_JSON", file=sys.stderr)
        return exit_codes.ERROR
    path = Path(args[0])
    try:
        if path.stat().st_size > MAX_GATE_BYTES:
            raise ValueError(f"larger than {MAX_GATE_BYTES} bytes")
        gate = parse_json(path.read_text(encoding="utf-8"), MAX_RECORD_DEPTH)
        if not isinstance(gate, dict):
            raise ValueError("the top level is not a JSON object")
        lines = annotations(gate)
    except json.JSONDecodeError as exc:
        print(f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}", file=sys.stderr)
        return exit_codes.ERROR
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError) as exc:
        print(f"{path}: cannot read the gate: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    print("\n".join(lines))
    return exit_codes.OK


if __name__ == "__main__":
    raise SystemExit(main())
