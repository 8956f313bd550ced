"""Machine-readable run output: `results.jsonl` (one `CaseResult` per line) and `run.json`
(the stamp and the summary), the files a gate or a script reads back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from conformance.record.results import CaseResult, Summary
from conformance.record.transcript import JsonLinesWriter

RUN_FILE = "run.json"


def write_results(path: Path, results: Iterable[CaseResult], header: Mapping[str, Any]) -> None:
    """A results.jsonl: the run header (`conformance.record.recording.make_header`), then one result per line."""
    with JsonLinesWriter(path) as writer:
        writer.write(dict(header))
        for result in results:
            writer.write(result.to_dict())


def write_run_summary(path: Path, stamp: Mapping[str, Any], summary: Summary) -> None:
    path.write_text(json.dumps({"stamp": dict(stamp), "summary": summary.to_dict()}, indent=2) + "\n", "utf-8")
