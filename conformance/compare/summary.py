"""Many gates (or runs) on one page: the record of `conformance summary DIR...`, one row per directory with
its checkpoint, response format, servers and a verdict class a CI matrix's merge job can show at a glance.

A gate passed (exit 0), needs acknowledging (exit 1 with no case newly failing: only differences the
expectations do not acknowledge yet, or stale ones under --strict) or broke (a case newly failing, or an
error or interruption: exit 2, 130, 143). A run passed (exit 0) or broke. Each row keeps the path of the
directory's own reports, relative to where the summary is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.compare.gate import GATE_FILE, MAX_GATE_BYTES
from conformance.record.run_dir import MAX_RUN_FILE_BYTES, RUN_FILE
from conformance.util.files import read_bounded
from conformance.util.json_codec import MAX_RECORD_DEPTH, parse_json

SUMMARY_FORMAT = "conformance-summary/1"
PASSED, NEEDS_ACKNOWLEDGING, BROKE = "passed", "needs acknowledging", "broke"
VERDICTS = (PASSED, NEEDS_ACKNOWLEDGING, BROKE)
RUN_EXIT_CODES = {"pass": 0, "fail": 1, "error": 2}  # a run.json's summary verdict -> the run's exit code


class SummaryError(Exception):
    """A directory that holds neither a gate nor a run, or whose record cannot be read."""


def gate_verdict(gate: dict[str, Any]) -> str:
    """The class of a gate.json's verdict: a candidate that refuses to start broke, whatever its exit code."""
    verdict = gate.get("verdict") or {}
    if verdict.get("exit_code") == 0:
        return PASSED
    if verdict.get("exit_code") == 1 and not verdict.get("newly_failing") and not gate.get("refused_to_start"):
        return NEEDS_ACKNOWLEDGING
    return BROKE


def _record(path: Path, limit: int, what: str) -> dict[str, Any]:
    try:
        record = parse_json(read_bounded(path, limit, what), MAX_RECORD_DEPTH)
    except OSError as exc:
        raise SummaryError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise SummaryError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise SummaryError(f"{path}: the top level is not a JSON object")
    return record


def _link(directory: Path, name: str, out_dir: Path) -> str:
    return Path(os.path.relpath(directory / name, out_dir)).as_posix()


def _checkpoint(stamp: dict[str, Any]) -> str:
    model, revision = str(stamp.get("model") or "?"), stamp.get("checkpoint_revision")
    return f"{model}@{revision}" if revision else model


def row_of(directory: Path, out_dir: Path) -> dict[str, Any]:
    """The summary row of a gate directory (gate.json) or a run directory (run.json)."""
    if (directory / GATE_FILE).is_file():
        gate = _record(directory / GATE_FILE, MAX_GATE_BYTES, "a gate record")
        sides = gate.get("sides") or {}
        stamps = [((sides.get(side) or {}).get("stamp") or {}) for side in ("baseline", "candidate")]
        verdict = gate.get("verdict") or {}
        return {"directory": str(directory), "kind": "gate", "checkpoint": _checkpoint(stamps[1]),
                "format": stamps[1].get("response_format"),
                "servers": f"{stamps[0].get('profile') or '?'} -> {stamps[1].get('profile') or '?'}",
                "verdict": gate_verdict(gate), "exit_code": verdict.get("exit_code"),
                "line": str(verdict.get("line") or ""), "unacknowledged": verdict.get("unacknowledged", 0),
                "newly_failing": verdict.get("newly_failing", 0),
                "report_html": _link(directory, "report.html", out_dir),
                "report_md": _link(directory, "report.md", out_dir)}
    if (directory / RUN_FILE).is_file():
        run = _record(directory / RUN_FILE, MAX_RUN_FILE_BYTES, "a run summary")
        stamp, summary = run.get("stamp") or {}, run.get("summary") or {}
        return {"directory": str(directory), "kind": "run", "checkpoint": _checkpoint(stamp),
                "format": stamp.get("response_format"), "servers": str(stamp.get("profile") or "?"),
                "verdict": PASSED if summary.get("verdict") == "pass" else BROKE,
                "exit_code": RUN_EXIT_CODES.get(str(summary.get("verdict")), 2),
                "line": f"{summary.get('total', 0)} results, {summary.get('verdict')}"
                        + (f": {summary['verdict_reason']}" if summary.get("verdict_reason") else ""),
                "unacknowledged": 0,
                "newly_failing": 0, "report_html": _link(directory, "report.html", out_dir),
                "report_md": _link(directory, "report.md", out_dir)}
    raise SummaryError(f"{directory}: neither a gate ({GATE_FILE}) nor a run ({RUN_FILE}) is recorded there")


def build_summary(directories: Sequence[Path], out_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """(the summary record of `directories` (gate or run directories), links relative to `out_dir`; why each
    directory that could not be read was left out)."""
    rows, skipped = [], []
    for directory in directories:
        try:
            rows.append(row_of(directory, out_dir))
        except SummaryError as exc:
            skipped.append(str(exc))
    rows.sort(key=lambda row: (row["checkpoint"], str(row["format"]), row["servers"], row["directory"]))
    return {"format": SUMMARY_FORMAT, "suite_version": __version__,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "counts": {verdict: sum(row["verdict"] == verdict for row in rows) for verdict in VERDICTS},
            "rows": rows}, skipped


def exit_code_of(summary: dict[str, Any]) -> int:
    """0 when every row passed, 1 otherwise (the merge job fails as its worst gate did)."""
    return 0 if all(row["verdict"] == PASSED for row in summary["rows"]) else 1
