"""`conformance summary DIR...`: many gates (or runs) on one page, for a CI matrix's merge job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from conformance.commands import add_json_argument, add_verb, json_output
from conformance.util import exit_codes
from conformance.util.output_dirs import OutputDirError, cannot_write, claimed_directory, fresh_directory

DESCRIPTION = """\
Read many gate directories (gate.json) or run directories (run.json), say the per-checkpoint x format x
server-pair jobs of a CI matrix, and write one page: summary.md (fit for $GITHUB_STEP_SUMMARY) and
summary.html, a table of checkpoint, format, servers and verdict, linked to each gate's own report. A gate
passed (exit 0), needs acknowledging (only differences the expectations do not acknowledge yet) or broke (a
case newly failing, an error, an interruption); a run passed or broke. A directory holding neither is skipped
with a warning when others are read.

Exit 0 when every gate and run passed, 1 when one needs acknowledging or broke, 2 when nothing could be read
or the page cannot be written.

example:
  conformance summary gates/*/ --out reports/summary && cat reports/summary/summary.md >> "$GITHUB_STEP_SUMMARY"
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_verb(subparsers, "summary", "many gates or runs on one page (a CI matrix's merge job)", DESCRIPTION)
    parser.add_argument("directories", nargs="+", type=Path, metavar="DIR", help="a gate or run directory")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output directory (default: reports/summary-<time>, a new one)")
    add_json_argument(parser, "the summary record (one row per directory)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with json_output(args.json) as emit:
        return _run(args, emit)


def _run(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    import json

    from conformance.compare.summary import build_summary, exit_code_of
    from conformance.report.summary import write_summary_reports

    try:
        out = args.out or fresh_directory(Path("reports"), "summary")
        summary, skipped = build_summary(args.directories, out)  # links relative to `out`
        for problem in skipped:
            print(f"conformance summary: warning: {problem}; skipped", file=sys.stderr)
        if not summary["rows"]:
            print("conformance summary: error: no gate or run could be read", file=sys.stderr)
            return exit_codes.ERROR
        with claimed_directory(out, records=(), replace=True):  # rendered again at will, as the contract matrix
            paths = write_summary_reports(out, summary)
            emit(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    except OutputDirError as exc:
        print(f"conformance summary: error: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    except OSError as exc:
        print(f"conformance summary: error: {cannot_write(exc, out)}", file=sys.stderr)
        return exit_codes.ERROR
    counts = summary["counts"]
    print(f"{len(summary['rows'])} gates and runs: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return exit_code_of(summary)
