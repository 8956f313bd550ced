"""Every report of one run written in one go: report.md, junit.xml, report.html and run.json
(results.jsonl and transcripts.jsonl are written while the run goes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.record.results import CaseResult, summarize
from conformance.record.run_dir import RUN_FILE, Recording, write_run_summary
from conformance.record.transcript import Transcript
from conformance.report.run import html, junit, markdown
from conformance.util.files import write_atomically

REPORT_FILES = {"markdown": "report.md", "junit": "junit.xml", "html": "report.html"}


def write_reports(out_dir: Path, results: Sequence[CaseResult], stamp: dict[str, Any],
                  transcripts: Sequence[Transcript] = ()) -> dict[str, Path]:
    """Render every report of one run into `out_dir` (results.jsonl is written while running);
    returns {kind: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {kind: out_dir / name for kind, name in REPORT_FILES.items()}
    # each whole or not at all; a lone surrogate a server sent is written as its escape
    write_atomically(paths["markdown"], markdown.render(results, stamp))
    write_atomically(paths["junit"], junit.render(results, stamp, transcripts))
    write_atomically(paths["html"], html.render(results, stamp, transcripts))
    paths["run"] = out_dir / RUN_FILE
    write_run_summary(paths["run"], stamp, summarize(results))
    return paths


def write_side_reports(out_dir: Path, recordings: Sequence[Recording]) -> None:
    """Each side's own run reports (report.md, junit.xml, report.html, run.json) in its directory."""
    for recording in recordings:
        write_reports(out_dir / str(recording.run_dir), recording.results, recording.stamp, recording.transcripts)
