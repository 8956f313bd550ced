"""`conformance contract RUN_DIR [RUN_DIR ...]`: the contract matrix of recorded runs, one column per server."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from conformance.commands import add_json_argument, add_verb, json_output
from conformance.util import exit_codes
from conformance.util.output_dirs import OutputDirError, cannot_write, claimed_directory, fresh_directory

DESCRIPTION = """\
Put recorded runs of the same cases side by side, one column per server (say legacy, hf, hf-rust,
transformers-serve): one row per behaviour (case x mode, grouped by feature) saying what each server
did (refusal status and param, the parsed message, how it streamed, finish_reason, the CORS preflight
answer), with the cells that differ from the row's first answering server highlighted and how they
differ. No server is contacted: record each run once (`conformance run --out DIR`, or a gate's
baseline/ and candidate/), render as often as wanted. A gate directory stands for its two sides.
Writes contract.json (the matrix), contract.md and contract.html to --out (default: reports/contract-<time>, a new directory).

example:
  conformance contract reports/legacy-run reports/hf-run reports/hf-rust-run --out reports/contract
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_verb(subparsers, "contract", "side by side: what each recorded server does, per behaviour",
                      DESCRIPTION)
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="recorded run directory (or a gate directory: its baseline/ and candidate/)")
    parser.add_argument("--cases", type=Path, metavar="DIR",
                        help="case directory whose contract references are shown (default: the shipped cases)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output directory (default: reports/contract-<time>, a new one)")
    add_json_argument(parser, "contract.json (the matrix)")
    parser.set_defaults(func=run)


def _run_dirs(paths: list[Path]) -> list[Path]:
    """Each path, a gate directory (no transcripts of its own, a baseline/ and a candidate/) as its two sides."""
    from conformance.record.transcript import TRANSCRIPTS_FILE

    found = []
    for path in paths:
        sides = [path / side for side in ("baseline", "candidate")]
        gate = not (path / TRANSCRIPTS_FILE).exists() and all((side / TRANSCRIPTS_FILE).exists() for side in sides)
        found += sides if gate else [path]
    return found


def run(args: argparse.Namespace) -> int:
    with json_output(args.json) as emit:
        return _run(args, emit)


def _run(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    from conformance.compare.contract_matrix import build_matrix
    from conformance.record.run_dir import read_run_dir
    from conformance.record.transcript import TranscriptError
    from conformance.report.contract_matrix.write import write_contract_reports
    from conformance.suite.cases import CaseFileError, load_suite

    try:
        recordings = [read_run_dir(path) for path in _run_dirs(args.runs)]
        references = {case.id: case.references for case in load_suite(args.cases)}
    except (TranscriptError, CaseFileError) as exc:
        print(f"conformance contract: error: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    matrix = build_matrix(recordings, references)
    try:
        out = args.out or fresh_directory(Path("reports"), "contract")
        with claimed_directory(out, records=(), replace=True):  # a matrix is rendered again at will: no refusal
            paths = write_contract_reports(out, matrix)
    except OutputDirError as exc:
        print(f"conformance contract: error: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    except OSError as exc:
        print(f"conformance contract: error: {cannot_write(exc, out)}", file=sys.stderr)
        return exit_codes.ERROR
    differing = sum(1 for row in matrix["rows"] if row["differs"])
    print(f"{len(matrix['rows'])} behaviours of {len(recordings)} servers "
          f"({', '.join(c['label'] for c in matrix['columns'])}); {differing} differ")
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    try:
        emit(paths["json"].read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"conformance contract: error: --json: {exc.filename}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return exit_codes.ERROR
    return exit_codes.OK
