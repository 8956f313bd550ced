"""Machine-readable run output: `results.jsonl` (one `CaseResult` per line) and `run.json`
(the stamp and the summary), the files a gate or a script reads back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.record.recording import read_transcripts
from conformance.record.results import RESULTS_FILE, CaseResult, Summary, read_results
from conformance.record.stamp import stamp_of_recording
from conformance.record.transcript import TRANSCRIPTS_FILE, JsonLinesWriter, Transcript, TranscriptError
from conformance.util.files import read_bounded, write_atomically

RUN_FILE = "run.json"
MAX_RUN_FILE_BYTES = 16 * 1024 * 1024  # run.json holds a stamp and a summary
RUN_RECORD_FILES = (TRANSCRIPTS_FILE, RESULTS_FILE, RUN_FILE)  # the files a run writes into its directory


def write_results(path: Path, results: Iterable[CaseResult], header: Mapping[str, Any]) -> None:
    """A results.jsonl: the run header (`conformance.record.recording.make_header`), then one result per line."""
    with JsonLinesWriter(path) as writer:
        writer.write(dict(header))
        for result in results:
            writer.write(result.to_dict())


def write_run_summary(path: Path, stamp: Mapping[str, Any], summary: Summary) -> None:
    write_atomically(path, json.dumps({"stamp": dict(stamp), "summary": summary.to_dict()}, indent=2) + "\n")


@dataclass
class Recording:
    """One side of a gate: a run's transcripts, results and stamp, and a label for people."""

    label: str
    transcripts: Sequence[Transcript]
    results: Sequence[CaseResult]
    stamp: Mapping[str, Any]
    run_dir: str | None = None
    startup_seconds: float | None = None  # the server's start to healthy, when the gate launched it

    @property
    def response_format(self) -> str | None:
        """The response format its checkpoint writes: its stamp's, else its answers' (None: recorded before
        formats were, the default one's)."""
        told = self.stamp.get("response_format")
        return told or next((t.server.format for t in self.transcripts if t.server.format), None)


def read_run_dir(run_dir: Path, label: str | None = None) -> Recording:
    """A recorded run directory (`conformance run --out DIR`, or one side of a gate)."""
    transcripts = read_transcripts(run_dir / TRANSCRIPTS_FILE)
    results = read_results(run_dir / RESULTS_FILE)
    if not transcripts:
        raise TranscriptError(f"{run_dir / TRANSCRIPTS_FILE}: no transcripts in this run")
    try:
        stamp = json.loads(read_bounded(run_dir / RUN_FILE, MAX_RUN_FILE_BYTES, "a run summary"))["stamp"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):  # none (a run interrupted early), or not one
        stamp = None
    except OSError as exc:  # a FIFO, a device, too large, no permission
        raise TranscriptError(f"{run_dir / RUN_FILE}: cannot read: {exc.strerror or exc}") from exc
    if not isinstance(stamp, dict):  # the transcripts' own stamp
        stamp = stamp_of_recording(transcripts)
    return Recording(label or str(stamp.get("profile") or run_dir.name), transcripts, results, stamp, str(run_dir))


def recorded_so_far(run_dir: Path) -> tuple[list[Transcript], list[CaseResult]]:
    """The answers and results an interrupted run had written (both are written as they come); empty
    lists for a file it never began."""
    transcripts = read_transcripts(run_dir / TRANSCRIPTS_FILE) if (run_dir / TRANSCRIPTS_FILE).is_file() else []
    results = read_results(run_dir / RESULTS_FILE) if (run_dir / RESULTS_FILE).is_file() else []
    return transcripts, results
