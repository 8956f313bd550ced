"""`conformance run`: drive a live server through the case set, record transcripts, write reports."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from conformance.commands import (
    add_granularities_argument,
    add_json_argument,
    add_out_arguments,
    add_second_turn_argument,
    add_verb,
    json_output,
    recorded_files,
    second_turn_rebuilders,
    timeout_problem,
)
from conformance.formats.checkpoint_format import served_format
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS, format_named
from conformance.formats.tiny_checkpoint import VARIANTS
from conformance.record.outcomes import SKIP_KINDS
from conformance.run.driver import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_TIMEOUT,
    FORCING_CHOICES,
    FORCING_HELP,
    forcing_fields,
)
from conformance.util import exit_codes
from conformance.util.markdown_text import visible
from conformance.util.output_dirs import OutputDirError, cannot_write, claimed_directory, fresh_directory

DESCRIPTION = """\
Send every case (streaming and non-streaming unless a case says otherwise) to an OpenAI-compatible
server and judge the answers: stream framing, tool-call deltas, valid JSON arguments, leaked
template markers, stream vs non-stream, the expected outcome for the profile, plus findings
(reasoning field, tool-call streaming, openai-python client replay, argument schema).

Either attach to a running server (--base-url URL --model NAME --profile hf|legacy), or let the
tool build the tiny checkpoint and start real vLLM itself (--launch hf|legacy).

Writes to --out (default reports/run-<time>, a new directory): transcripts.jsonl and results.jsonl as the
run goes (a crash loses nothing), then report.md (for $GITHUB_STEP_SUMMARY), junit.xml, report.html and
run.json; an --out that already holds a run or a gate is refused unless --replace. `conformance recheck
OUT/transcripts.jsonl` judges the recording again with no server.

examples:
  conformance run --launch hf
  conformance run --base-url http://127.0.0.1:8000/v1 --model tiny --profile legacy --feature tool_call
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_verb(
        subparsers, "run", "run the case set against a live server and write transcripts and reports", DESCRIPTION
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--base-url", metavar="URL", help="server to attach to, ending in /v1 (needs --model and --profile; "
                       "default: $OPENAI_BASE_URL when --launch is not given either)")
    where.add_argument("--launch", metavar="PROFILE", help="build the tiny checkpoint and start real vLLM with PROFILE")
    parser.add_argument("--model", metavar="NAME", help="model name the server serves (with --base-url); with "
                        "--launch, the checkpoint directory to serve instead of the tiny checkpoint")
    parser.add_argument("--profile", metavar="NAME", help="profile whose expectations apply (default: the --launch profile)")
    parser.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: the shipped cases/)")
    add_out_arguments(parser, "reports/run-<time>")
    add_json_argument(parser, "the run's run.json (its stamp and summary)")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY, metavar="N",
                        help=f"requests in flight at once (default: {DEFAULT_CONCURRENCY})")
    parser.add_argument("--repeat", type=int, default=1, metavar="K", help="run every case K times; reports pass@K")
    add_granularities_argument(parser, default=())  # a sweep of the cases as written; the gate adds a few
    add_second_turn_argument(parser, default="none")
    parser.add_argument("--case", action="append", default=[], metavar="ID", help="only this case (repeatable)")
    parser.add_argument("--feature", action="append", default=[], metavar="TAG",
                        help="only cases with this feature tag (repeatable)")
    parser.add_argument("--natural", action="store_true",
                        help="natural mode: send prompts without forcing outputs (for real models)")
    parser.add_argument("--forcing", choices=FORCING_CHOICES, default="probe", help=FORCING_HELP)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"seconds per request (default: {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--max-line-bytes", type=int, default=DEFAULT_MAX_LINE_BYTES, metavar="N",
                        help="longest SSE line (or non-streaming body) read; a longer one makes the answer an error "
                             f"(default: {DEFAULT_MAX_LINE_BYTES})")
    parser.add_argument("--api-key", metavar="KEY",
                        help="API key sent to the server (default: $OPENAI_API_KEY, else EMPTY); never written anywhere")
    parser.add_argument("--allow-skip", action="append", default=[], choices=SKIP_KINDS, metavar="KIND",
                        help="a skip of this kind does not keep the run from passing (repeatable; kinds: "
                             f"{', '.join(SKIP_KINDS)}; see cases/README.md)")
    parser.add_argument("--checkpoint", type=Path, metavar="DIR",
                        help="local checkpoint directory: its response_template gives the markers checked for leaks")
    parser.add_argument("--checkpoint-revision", metavar="REV", help="revision recorded in the reports")
    parser.add_argument("--format", choices=sorted(FORMATS), metavar="NAME",
                        help="the response format the server's checkpoint writes (default: the --launch --model or "
                             f"--checkpoint directory's own, else {DEFAULT_FORMAT.name}; `conformance formats` lists "
                             "them): --launch builds and serves "
                             "its tiny checkpoint (the legacy profile with the format's own parsers); format-"
                             "independent cases are rendered in it, cases written in another are skipped")
    parser.add_argument("--fixture-variant", choices=VARIANTS, metavar="NAME",
                        help="the tiny checkpoint's variant: the one --launch builds and serves, or the one the "
                             "--base-url server serves (default: the profile record's); cases that need another "
                             f"are skipped (kind other_fixture_variant). Variants: {', '.join(VARIANTS)}")
    parser.set_defaults(func=run)


def _usage_error(message: str) -> int:
    print(f"conformance run: error: {message}", file=sys.stderr)
    return exit_codes.ERROR


def run(args: argparse.Namespace) -> int:
    with json_output(args.json) as emit:
        return _run(args, emit)


def _run(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    from conformance.formats.markers import CheckpointError
    from conformance.run.engine import known_profiles, select_cases
    from conformance.servers.profiles import speaks_format_parsers
    from conformance.suite.cases import CaseFileError, load_features, load_suite

    if not (args.base_url or args.launch):
        args.base_url = os.environ.get("OPENAI_BASE_URL")  # as the openai client reads it
        if not args.base_url:
            return _usage_error("one of the arguments --base-url --launch is required (or set OPENAI_BASE_URL)")
    if args.base_url and not (args.model and args.profile):
        return _usage_error("--base-url needs --model and --profile")
    if problem := timeout_problem(args.timeout):
        return _usage_error(f"{problem}, not {args.timeout:g}")
    args.api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"  # as the openai client does
    if args.launch:
        from conformance.servers.profiles import launchable_profiles

        if args.launch not in launchable_profiles():
            return _usage_error(f"unknown profile {args.launch!r} for --launch; choose one of: "
                                f"{', '.join(launchable_profiles())}")
    if args.out == Path("-"):
        return _usage_error("--out is the directory for the run's files; `-` (standard output) cannot hold them")
    if args.natural:  # natural outputs differ between requests: no stream to compare a granular one with
        args.granularities = ()
    try:  # natural outputs have no known calls to answer: no second turn
        args.rebuilders = {} if args.natural else second_turn_rebuilders(args.second_turn)
    except ValueError as exc:
        return _usage_error(str(exc))
    if args.repeat < 1 or args.concurrency < 1 or args.max_line_bytes < 1:
        return _usage_error("--repeat, --concurrency and --max-line-bytes must be at least 1")
    try:
        form = served_format(args.format, args.model if args.launch else args.checkpoint)
    except ValueError as exc:  # a checkpoint's files that cannot be read
        return _usage_error(str(exc))
    args.format = form.name
    if args.launch and form.checkpoint is not None and speaks_format_parsers(args.launch):
        return _usage_error(f"--launch {args.launch}: its parsers are the format's own, and the {form.name} format "
                            "has no record to name them: launch a profile whose parsers read the checkpoint (hf), "
                            "gate it with --baseline-args \"--tool-call-parser P --reasoning-parser R\", or give "
                            "--format NAME when the checkpoint is of a family `conformance formats` lists")
    try:
        unknown_features = sorted(set(args.feature) - set(load_features(args.cases)))
        if unknown_features:
            return _usage_error(f"unknown feature tag(s): {', '.join(unknown_features)} (see cases/features.txt)")
        suite = load_suite(args.cases, form)
        cases = select_cases(suite, args.case, args.feature)
    except (CaseFileError, ValueError) as exc:
        return _usage_error(str(exc))
    profile = args.profile or args.launch
    if profile not in known_profiles(suite):
        return _usage_error(f"unknown profile {profile!r}: no profile record and no case expectation names it "
                            f"(known: {', '.join(sorted(known_profiles(suite)))})")
    if not cases:
        return _usage_error("no case matches the selection")
    signal.signal(signal.SIGTERM, exit_codes.raise_terminated)  # unwind: a launched server is stopped
    try:
        out_dir = args.out or fresh_directory(Path("reports"), "run")
        with claimed_directory(out_dir, recorded_files(), args.replace), _target(args, out_dir) as (target, markers):
            print(f"running {len(cases)} cases against {target.shown_url} ({target.profile} profile); "
                  f"writing to {out_dir}", file=sys.stderr)
            return _run_and_report(cases, target, markers, out_dir, args, emit)
    except (OutputDirError, TargetError, CheckpointError) as exc:
        return _usage_error(str(exc))
    except OSError as exc:  # a full disk, a file size limit
        return _usage_error(cannot_write(exc, out_dir))


def _run_and_report(cases: list[Any], target: Any, markers: tuple[str, ...], out_dir: Path,
                    args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    from conformance.clients.second_turn import import_libraries
    from conformance.report.run.write import write_reports
    from conformance.run.engine import request_count
    from conformance.run.engine import run as run_engine

    import_libraries(args.rebuilders)  # before any request: see import_libraries
    try:
        output = run_engine(
            cases, target, out_dir, concurrency=args.concurrency, repeat=args.repeat, natural=args.natural,
            markers=markers, progress=True, allowed_skips=args.allow_skip, granularities=args.granularities,
            rebuilders=args.rebuilders,
        )  # fmt: skip
    except KeyboardInterrupt as stop:
        emit(_report_interrupted_run(out_dir, expected=request_count(cases, args.repeat, args.granularities,
                                                                   args.rebuilders),
                                     target=target))
        return exit_codes.stopped_by(exit_codes.signal_of(stop))
    paths = write_reports(out_dir, output.results, output.stamp, output.transcripts)
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    for line in problem_lines(output.results):
        print(line)
    print(output.summary.line())
    if output.summary.verdict_reason:
        print(f"{output.summary.verdict}: {output.summary.verdict_reason}")
    emit(paths["run"].read_text(encoding="utf-8"))
    return output.summary.exit_code


MAX_PROBLEM_LINES = 50


def problem_lines(results: list[Any], width: int = 160) -> list[str]:
    """One line per failed or errored check (outcome, case, mode, check: reason), for the end of a run."""
    lines = []
    for result in results:
        if result.outcome in ("fail", "error"):
            for check in result.failed_checks() or [None]:
                name, reason = (check.name, check.reason) if check else ("-", result.reason)
                line = visible(f"{result.outcome.upper():5} {result.case_id} {result.mode} {name}: "
                               f"{' '.join(reason.split())}")  # a server's words: its control characters as escapes
                lines.append(line if len(line) <= width else line[: width - 1] + "…")
    if len(lines) > MAX_PROBLEM_LINES:
        lines[MAX_PROBLEM_LINES:] = [f"... and {len(lines) - MAX_PROBLEM_LINES} more (see report.md)"]
    return (["failures and errors:", *lines] if lines else [])


def _report_interrupted_run(out_dir: Path, expected: int, target: Any) -> str:
    """Reports from what an interrupted run had already written (results are flushed as judged); interrupted
    before any answer was recorded, the reports say that nothing was judged. Returns its run.json."""
    from conformance.record.run_dir import recorded_so_far
    from conformance.record.stamp import make_stamp, stamp_of_recording
    from conformance.report.run.write import write_reports

    transcripts, results = recorded_so_far(out_dir)
    completion = f"interrupted after {len(results)} of {expected} results"
    if not transcripts:
        completion = f"interrupted before any answer was recorded: nothing was judged (0 of {expected} results)"
    print(completion, file=sys.stderr)
    stamp = stamp_of_recording(transcripts, completion) if transcripts else make_stamp(target.stamp().__dict__,
                                                                                     completion=completion)
    paths = write_reports(out_dir, results, stamp, transcripts)
    for kind, path in paths.items():
        print(f"{kind} (partial): {path}")
    return paths["run"].read_text(encoding="utf-8")


class TargetError(Exception):
    """The server could not be started."""


@contextlib.contextmanager
def _target(args: argparse.Namespace, out_dir: Path) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """(Target, markers) for an attached server, or for a freshly launched one (stopped on exit)."""
    from conformance.formats.markers import markers_for_checkpoint
    from conformance.run.driver import Target, target_of

    form = format_named(args.format)
    if args.base_url:
        yield Target(
            base_url=args.base_url, model=args.model, profile=args.profile, api_key=args.api_key,
            timeout=args.timeout, **forcing_fields(args.forcing), checkpoint_revision=args.checkpoint_revision,
            max_line_bytes=args.max_line_bytes, fixture_variant=args.fixture_variant, format=form.name,
        ), markers_for_checkpoint(args.checkpoint, form)
        return
    from conformance.formats.tiny_checkpoint import build_fixture
    from conformance.servers.launch import ServerStartError, launch
    from conformance.servers.profiles import served_profile, served_variant

    variant = served_variant(args.launch, args.fixture_variant)
    try:
        checkpoint = Path(args.model) if args.model else build_fixture(out_dir / "checkpoint", variant=variant,
                                                                       form=form)
    except ValueError as exc:  # a variant the format has not
        raise TargetError(f"the {form.name} tiny checkpoint: {exc}") from exc
    record = served_profile(args.launch, form)
    print(f"starting {record.server_name} ({args.launch} profile) on {checkpoint} ...", file=sys.stderr)
    try:
        with launch(record, checkpoint, log_dir=out_dir) as server:
            yield target_of(
                server, args.profile, api_key=args.api_key, timeout=args.timeout, **forcing_fields(args.forcing),
                checkpoint_revision=args.checkpoint_revision or _directory_digest(checkpoint),
                max_line_bytes=args.max_line_bytes, fixture_variant=variant, format=form.name,
            ), markers_for_checkpoint(checkpoint)  # fmt: skip
    except ServerStartError as exc:
        raise TargetError(f"could not start {record.server_name}: {exc}") from exc


def _directory_digest(directory: Path) -> str:
    """A content revision for a local checkpoint: sha256 over its files' names and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes())
    return "sha256:" + digest.hexdigest()[:16]
