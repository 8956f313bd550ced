"""`conformance recheck TRANSCRIPTS.jsonl`: judge a recorded run again, with no server."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from conformance.commands import add_out_arguments, add_verb, recorded_files
from conformance.record.outcomes import SKIP_KINDS
from conformance.util import exit_codes
from conformance.util.output_dirs import OutputDirError, cannot_write, claimed_directory, fresh_directory

DESCRIPTION = """\
Re-judge the transcripts of an earlier `conformance run` against the current case definitions and
checks, without any server: useful after changing a case's expectation or upgrading this tool.
Writes results.jsonl, report.md, junit.xml, report.html and run.json to --out (default: a new
`recheck-<time>` folder next to the transcripts file; an --out that already holds a run or a gate is refused
unless --replace). The stamp (server version, model, profile) is the one recorded in the transcripts.

example:
  conformance recheck reports/run-20261130-201500/transcripts.jsonl --out /tmp/recheck
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_verb(
        subparsers, "recheck", "re-judge a recorded transcripts.jsonl offline and write reports", DESCRIPTION
    )
    parser.add_argument("transcripts", type=Path, metavar="TRANSCRIPTS.jsonl", help="a run's transcripts file")
    parser.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: the shipped cases/)")
    add_out_arguments(parser, "<transcripts dir>/recheck-<time>")
    parser.add_argument("--checkpoint", type=Path, metavar="DIR",
                        help="local checkpoint directory: its response_template gives the markers checked for leaks")
    parser.add_argument("--allow-skip", action="append", default=[], choices=SKIP_KINDS, metavar="KIND",
                        help="a skip of this kind does not keep the verdict from passing (repeatable; as for run)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.formats.markers import CheckpointError, markers_for_checkpoint
    from conformance.formats.recorded_format import format_of_run
    from conformance.record.recording import make_header, read_transcripts
    from conformance.record.results import RESULTS_FILE, summarize
    from conformance.record.run_dir import write_results
    from conformance.record.stamp import stamp_of_recording
    from conformance.record.transcript import TranscriptError
    from conformance.report.run.write import write_reports
    from conformance.run.engine import recheck
    from conformance.servers.profiles import upgrade_recording
    from conformance.suite.cases import CaseFileError, load_suite

    if args.out == Path("-"):
        print("conformance recheck: error: --out is the directory for the reports; `-` (standard output) "
              "cannot hold them", file=sys.stderr)
        return exit_codes.ERROR
    try:
        transcripts = read_transcripts(args.transcripts)
        upgrade_recording(transcripts)
        # a checkpoint's own format is read from the run's response_format.json beside the transcripts
        form = format_of_run(transcripts[0].server.format if transcripts else None, args.transcripts.parent)
        cases = load_suite(args.cases, form)
        markers = markers_for_checkpoint(args.checkpoint)
    except (TranscriptError, CaseFileError, CheckpointError, ValueError) as exc:
        print(f"conformance recheck: error: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    if not transcripts:
        print(f"conformance recheck: error: {args.transcripts}: no transcripts in this file", file=sys.stderr)
        return exit_codes.ERROR
    results = recheck(transcripts, cases, markers=markers, allowed_skips=args.allow_skip)
    header = make_header("results", cases=[c for c in cases if c.id in {t.case_id for t in transcripts}],
                         markers=markers, server=asdict(transcripts[0].server),
                         created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    try:
        out_dir = args.out or fresh_directory(args.transcripts.parent, "recheck")
        with claimed_directory(out_dir, recorded_files(), args.replace):
            write_results(out_dir / RESULTS_FILE, results, header)
            paths = write_reports(out_dir, results, stamp_of_recording(transcripts), transcripts)
    except OutputDirError as exc:
        print(f"conformance recheck: error: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    except OSError as exc:
        print(f"conformance recheck: error: {cannot_write(exc, out_dir)}", file=sys.stderr)
        return exit_codes.ERROR
    summary = summarize(results)
    print(summary.line())
    for kind, path in {"results": out_dir / RESULTS_FILE, **paths}.items():
        print(f"{kind}: {path}")
    return summary.exit_code
