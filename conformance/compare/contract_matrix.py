"""The contract matrix: N recorded runs of the same cases (one per server: legacy, hf, hf-rust,
transformers-serve...), one row per behaviour (case x mode, grouped by feature), one column per run:
what each server did (refusal status and param, the parsed message, how it streamed, finish_reason,
the CORS preflight answer) and where the servers differ.

A pure function of the recordings (`conformance.record.run_dir.read_run_dir`), so servers are run once and the
matrix is rendered as often as wanted (`conformance contract RUN_DIR...`). A cell differs when the gate's
own comparison (`conformance.compare.diff.diff_pair`) finds a client-visible difference between it and the
row's reference cell (the first column that answered); the case's pass/fail outcome, which depends on
each profile's expectations, is shown but is not a difference of behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from conformance import __version__
from conformance.compare.diff import Pair, diff_pair
from conformance.compare.gate import answer_summary
from conformance.formats.registry import DEFAULT_FORMAT
from conformance.record.results import CaseResult, summarize
from conformance.record.run_dir import Recording
from conformance.record.transcript import Transcript

MATRIX_FORMAT = "conformance-matrix/1"


def column_labels(recordings: Sequence[Recording]) -> list[str]:
    """One label per run: its profile, with its response format when the runs span several (a format x
    server matrix), and the run directory's name when two runs still share a label."""
    forms = [r.response_format or DEFAULT_FORMAT.name for r in recordings]
    labels = [f"{r.label} ({form})" if len(set(forms)) > 1 else r.label for r, form in zip(recordings, forms)]
    return [label if labels.count(label) == 1 else f"{label} ({str(r.run_dir or i).rstrip('/').rsplit('/', 1)[-1]})"
            for i, (label, r) in enumerate(zip(labels, recordings))]


def _observed(transcript: Transcript | None) -> bool:
    """The server answered (any HTTP status): something to compare."""
    return (transcript is not None and transcript.skip_reason is None and transcript.transport_error is None
            and transcript.status is not None)


def _by_key(recording: Recording) -> tuple[dict[tuple[str, str], Transcript], dict[tuple[str, str], CaseResult]]:
    transcripts = {(t.case_id, t.mode): t for t in reversed(recording.transcripts) if t.repeat == 0}
    results = {(r.case_id, r.mode): r for r in reversed(recording.results) if r.repeat == 0}
    return transcripts, results


def _differences(reference: tuple[Transcript, CaseResult | None], other: tuple[Transcript, CaseResult | None],
                 case_id: str, mode: str) -> list[dict[str, Any]]:
    """What a client sees differ between the reference cell and another one (never the outcome)."""
    (ref_t, ref_r), (t, r) = reference, other
    pair = Pair(case_id, mode, {"baseline": ref_t, "candidate": t}, {"baseline": ref_r, "candidate": r})
    found = [{"kind": d.kind, "field": d.field, "reference": d.baseline, "value": d.candidate}
             for d in diff_pair(pair) if d.kind != "outcome"]
    if not found and ref_t.status != t.status:  # e.g. a 5xx beside an answer: no field to compare
        found.append({"kind": "request_refused" if t.status >= 400 else "request_accepted", "field": "status",
                      "reference": ref_t.status, "value": t.status})
    return found


def _cell(transcript: Transcript | None, result: CaseResult | None) -> dict[str, Any]:
    return {"observed": _observed(transcript),
            "answer": answer_summary(transcript) if transcript is not None else "not recorded",
            "outcome": result.outcome if result else None,
            "reason": result.reason if result and result.outcome != "pass" else None,
            "differences": []}


def build_matrix(recordings: Sequence[Recording], references: Mapping[str, Sequence[str]] | None = None
                 ) -> dict[str, Any]:
    """The matrix of `recordings` (in column order); `references` maps case ids to their contract
    references (from the case files, when known)."""
    labels = column_labels(recordings)
    indexed = [_by_key(r) for r in recordings]
    keys: dict[tuple[str, str], None] = {}
    for recording in recordings:
        keys.update(dict.fromkeys((t.case_id, t.mode) for t in recording.transcripts if t.repeat == 0))
    rows = []
    for case_id, mode in keys:
        pairs = [(transcripts.get((case_id, mode)), results.get((case_id, mode))) for transcripts, results in indexed]
        cells = [_cell(t, r) for t, r in pairs]
        reference = next((i for i, cell in enumerate(cells) if cell["observed"]), None)
        for i, (cell, (transcript, result)) in enumerate(zip(cells, pairs)):
            if reference is not None and i != reference and cell["observed"]:
                cell["differences"] = _differences(pairs[reference], (transcript, result), case_id, mode)
        info = next((r for _, r in pairs if r is not None), None)
        rows.append({"case_id": case_id, "mode": mode, "features": list(info.features) if info else [],
                     "description": info.description if info else "",
                     "references": list((references or {}).get(case_id, ())),
                     "reference_column": reference, "differs": any(cell["differences"] for cell in cells),
                     "cells": cells})
    return {
        "format": MATRIX_FORMAT,
        "suite_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "columns": [_column(label, r) for label, r in zip(labels, recordings)],
        "rows": rows,
    }


def _column(label: str, recording: Recording) -> dict[str, Any]:
    summary = summarize(recording.results)
    return {"label": label, "run_dir": recording.run_dir, "stamp": dict(recording.stamp),
            "summary": {"counts": summary.counts, "total": summary.total}}


def rows_by_feature(matrix: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    """Rows under their case's first feature (each case once), features in name order, cases in run order."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for row in matrix.get("rows") or []:
        grouped.setdefault(str((row.get("features") or ["(no feature)"])[0]), []).append(row)
    return dict(sorted(grouped.items()))
