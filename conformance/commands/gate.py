"""`conformance gate` and `conformance compare`: baseline vs candidate, every client-visible difference,
acknowledged or not, and a verdict for CI."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Callable
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
from conformance.record.case_model import DEFAULT_GRANULARITIES
from conformance.run.driver import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT, FORCING_CHOICES, FORCING_HELP, forcing_fields
from conformance.util import exit_codes
from conformance.util.files import read_bounded, write_atomically
from conformance.util.markdown_text import visible
from conformance.util.output_dirs import OutputDirError, cannot_write, claimed_directory, fresh_directory

GATE_DESCRIPTION = """\
Run the same cases against a baseline and a candidate server and report every difference a client
would notice: requests newly refused or accepted, parsed messages field by field, the reasoning
field name, stream shape, finish_reason, usage, openai-python's own reading, and cases that pass on
one side only. An expectations file (--expect) acknowledges known differences with their reasons.

With no arguments: builds the tiny checkpoint, launches real vLLM 0.32 with the legacy profile
(hermes + qwen3) and the hf profile at once, runs the gate with the shipped expectations for that
switch (conformance/shipped_expectations/vllm-0.32-legacy-to-hf.yaml) and writes everything under
reports/gate-<time>/: gate.json, report.md, report.html, timing.png, junit.xml, and each side's
run in baseline/ and candidate/ (`conformance compare` re-judges those with no server).

A TARGET is a profile name (launched on --model, default the tiny checkpoint) or a server URL
ending in /v1 (then give --baseline-model/--candidate-model and --baseline-profile/--candidate-profile,
the profile whose expectations apply). Any two profiles can be gated; the default expectations are
the file shipped for that (baseline, candidate) pair if one ships, else none.

examples:
  conformance gate
  conformance gate --no-expect                      # every legacy -> hf difference, unacknowledged
  conformance gate --baseline hf --candidate hf-rust   # vLLM's Python frontend -> its Rust frontend
  conformance gate --baseline hf --candidate hf-0.33   # a vLLM upgrade, 0.32 -> 0.33, with its shipped expectations
  conformance gate --format gemma4                  # gemma4 + gemma4 -> hf on a Gemma 4 checkpoint (format-independent cases)
  conformance gate --model ./ckpt --baseline-args "--tool-call-parser mistral --dtype bfloat16"
  conformance gate --baseline http://10.0.0.5:8000/v1 --baseline-model m --baseline-profile legacy \\
                   --candidate http://127.0.0.1:8001/v1 --candidate-model m --candidate-profile hf \\
                   --expect my-expectations.yaml
"""

COMPARE_DESCRIPTION = """\
Compare two recorded runs (directories written by `conformance run --out` or the baseline/ and
candidate/ folders of a gate) exactly as `conformance gate` compares live servers, with no server:
the same differences, expectations, verdict and reports. Each side's transcripts are judged again with
the case set (--cases, default the shipped cases), so a results.jsonl the answers do not bear out
never passes; a case the set does not hold keeps its recorded result only where its answer bears it
out (exit 2 otherwise).

example:
  conformance compare reports/gate-X/baseline reports/gate-X/candidate --expect expect.yaml --out /tmp/cmp
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    gate = add_verb(subparsers, "gate", "baseline vs candidate: every client-visible difference and a CI verdict",
                    GATE_DESCRIPTION)
    for side, default in (("baseline", "legacy"), ("candidate", "hf")):
        gate.add_argument(f"--{side}", metavar="TARGET", default=default,
                          help=f"profile to launch or server URL (default: {default})")
        gate.add_argument(f"--{side}-model", metavar="NAME", help=f"model name the {side} URL serves")
        gate.add_argument(f"--{side}-profile", metavar="NAME", help=f"profile whose expectations apply to the {side} URL")
        gate.add_argument(f"--{side}-args", metavar="ARGS", default="",
                          help=f"extra arguments for the launched {side} server, one shell-quoted string (a format's "
                               "parsers when it has no record; what a GPU deployment needs: --dtype, "
                               "--max-model-len, --tensor-parallel-size); they come after the profile's own, so a "
                               "flag given again wins")
    gate.add_argument("--model", metavar="DIR_OR_REPO",
                      help="checkpoint directory or Hub repo id for launched profiles (default: the tiny checkpoint, built)")
    gate.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: the shipped cases)")
    gate.add_argument("--case", action="append", default=[], metavar="ID", help="only this case (repeatable)")
    gate.add_argument("--feature", action="append", default=[], metavar="TAG", help="only cases with this tag (repeatable)")
    gate.add_argument("--origin", default=None, metavar="ORIGIN",
                      help="browser origin of the CORS preflight sent to both sides (default: http://localhost:3000)")
    add_granularities_argument(gate, default=DEFAULT_GRANULARITIES)
    add_second_turn_argument(gate, default="all")
    gate.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY, metavar="N",
                      help=f"requests in flight per side (default: {DEFAULT_CONCURRENCY})")
    gate.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                      help=f"seconds per request (default: {DEFAULT_TIMEOUT:g})")
    gate.add_argument("--api-key", metavar="KEY", help="API key sent to both servers (default: each side's "
                      "--SIDE-api-key-env, else $OPENAI_API_KEY, else none)")
    for side in ("baseline", "candidate"):
        gate.add_argument(f"--{side}-api-key-env", metavar="NAME",
                          help=f"environment variable holding the {side}'s API key (a key stays off the command line)")
    gate.add_argument("--forcing", choices=FORCING_CHOICES, default="probe", help=FORCING_HELP + " (per side)")
    gate.add_argument("--format", choices=sorted(FORMATS), metavar="NAME",
                      help=f"the response format both sides' checkpoint writes (default: a --model directory's own, "
                           f"else {DEFAULT_FORMAT.name}; `conformance formats` lists them): launched sides serve its "
                           "tiny checkpoint, the legacy profile with the format's own parsers; format-independent "
                           "cases are rendered in it and judged against its own parse, cases written in another "
                           "format are skipped")
    gate.add_argument("--fixture-variant", choices=VARIANTS, metavar="NAME",
                      help="the tiny checkpoint's variant both sides serve (launched: built and served; URLs: as told; "
                           "default: each profile record's); cases that need another are skipped on both sides")
    _common(gate, "reports/gate-<time>")
    gate.set_defaults(func=run_gate)

    compare = add_verb(subparsers, "compare", "compare two recorded runs as the gate does, with no server",
                       COMPARE_DESCRIPTION)
    compare.add_argument("baseline", type=Path, metavar="RUN_A", help="the baseline's run directory")
    compare.add_argument("candidate", type=Path, metavar="RUN_B", help="the candidate's run directory")
    compare.add_argument("--cases", type=Path, metavar="DIR",
                         help="the case directory both runs were recorded with (default: the shipped cases): each "
                              "side's transcripts are judged again with it, results.jsonl is not trusted")
    _common(compare, "<RUN_B>/../compare-<time>")
    compare.set_defaults(func=run_compare)


def _common(parser: argparse.ArgumentParser, default_out: str) -> None:
    expect = parser.add_mutually_exclusive_group()
    expect.add_argument("--expect", type=Path, metavar="FILE", help="expectations file acknowledging known differences "
                        "(default: the file shipped for the two profiles, if one ships)")
    expect.add_argument("--no-expect", action="store_true", help="acknowledge nothing")
    parser.add_argument("--strict", action="store_true", help="stale acknowledgements fail the gate too")
    add_out_arguments(parser, default_out)
    add_json_argument(parser, "gate.json")


def _error(verb: str, message: str) -> int:
    """Print `message` (which may quote a server's refusal or log line: its control characters as escapes)."""
    print(visible(f"conformance {verb}: error: {message}", keep_newlines=True), file=sys.stderr)
    return exit_codes.ERROR


def _expectations(args: argparse.Namespace, pair: tuple[str, str] | None,
                  form: str = DEFAULT_FORMAT.name) -> tuple[list[Any], dict[str, Any]]:
    """(the entries acknowledging differences, where they come from: gate.json's `expectations`).
    Without --expect/--no-expect the default is the file shipped for the (baseline, candidate) profile
    `pair` in response format `form`, if one ships (`pair` None: servers given by URL, no default)."""
    from conformance.compare.expectations import acknowledge_line, load_expectations, shipped_expectations

    if args.no_expect:
        return [], {"file": None, "note": "--no-expect: nothing is acknowledged"}
    if args.expect is not None:
        entries = load_expectations(args.expect)
        return entries, {"file": str(args.expect), "note": "given with --expect", "line": acknowledge_line(args.expect)}
    shipped = shipped_expectations(*pair, form) if pair else None
    on_format = "" if form == DEFAULT_FORMAT.name else f" on the {form} format"
    if shipped is None:
        why = f"no expectations ship for {pair[0]} -> {pair[1]}{on_format}" if pair else "servers given by URL have no default"
        return [], {"file": None, "note": f"{why}: nothing is acknowledged (give --expect FILE)"}
    return load_expectations(shipped), {"file": shipped.name, "note": f"shipped for {pair[0]} -> {pair[1]}{on_format}"}


def _check_selectors(entries: list[Any], recordings: list[Any], cases_dir: Path | None) -> list[str]:
    """Entries naming a case or feature neither the recordings nor the case set know (typos)."""
    from conformance.compare.expectations import unknown_selectors
    from conformance.suite.cases import CaseFileError, load_features, load_suite

    case_ids = {t.case_id for recording in recordings for t in recording.transcripts}
    try:
        case_ids |= {case.id for case in load_suite(cases_dir)}
        features = set(load_features(cases_dir))
    except CaseFileError:
        features = set()
    features |= {tag for recording in recordings for result in recording.results for tag in result.features}
    return unknown_selectors(entries, case_ids, features)


def _finish(gate: dict[str, Any], out_dir: Path, emit: Callable[[str], None]) -> int:
    """Write gate.json and every gate report, print the verdict and the unacknowledged differences (what a
    server sent shown `visible`: one line each, a lone surrogate as its escape); `emit` gets gate.json (--json)."""
    import json

    from conformance.compare.gate import GATE_FILE, exit_code_of

    document = json.dumps(gate, indent=1, ensure_ascii=False) + "\n"
    write_atomically(out_dir / GATE_FILE, document)
    paths = {"gate": out_dir / GATE_FILE, **_write_gate_reports(out_dir, gate)}
    for difference in gate["differences"]:
        if difference["acknowledged"] is None:
            print(visible(f"  {difference['case_id']}[{difference['mode']}] {difference['kind']}: "
                          f"{difference['summary']}"))
    for entry in gate["stale"]:
        print(visible(f"  stale: {entry['source']} {entry['kind']} {entry['selector']}"))
    print(visible(gate["verdict"]["line"]))  # it can quote a server's error
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    emit(document)
    return exit_code_of(gate)


def _import_reports() -> None:
    """The report modules (matplotlib among them, ~0.5 s) imported while vLLM boots, not after the run."""
    import conformance.report.gate.write  # noqa: F401


def _write_gate_reports(out_dir: Path, gate: dict[str, Any]) -> dict[str, Path]:
    from conformance.report.gate.write import write_gate_reports

    return write_gate_reports(out_dir, gate)


def run_compare(args: argparse.Namespace) -> int:
    with json_output(args.json) as emit:
        return _run_compare(args, emit)


def _run_compare(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    from conformance.compare.expectations import ExpectationsError
    from conformance.compare.gate import build_gate
    from conformance.compare.rejudge import UnsupportedResults
    from conformance.formats.recorded_format import format_of_run
    from conformance.record.run_dir import read_run_dir
    from conformance.record.transcript import TranscriptError
    from conformance.servers.profiles import upgrade_recording
    from conformance.suite.cases import CaseFileError, load_suite

    try:
        recordings = [read_run_dir(args.baseline), read_run_dir(args.candidate)]
        forms = [format_of_run(recording.response_format, Path(str(recording.run_dir))) for recording in recordings]
        for recording in recordings:
            upgrade_recording(recording.transcripts)
        # each side judged again with the cases in the format its checkpoint writes
        recordings = [_judged_again(recording, load_suite(args.cases, form)) for recording, form in zip(recordings, forms)]
        pair = (str(recordings[0].stamp.get("profile")), str(recordings[1].stamp.get("profile")))
        entries, source = _expectations(args, pair, forms[1].name)
    except (TranscriptError, ExpectationsError, CaseFileError, UnsupportedResults, ValueError) as exc:
        return _error("compare", str(exc))
    problems = _check_selectors(entries, recordings, args.cases)
    if problems:
        return _error("compare", "\n".join(problems))
    try:
        cors = _recorded_cors(args.candidate.parent)
    except OSError as exc:
        return _error("compare", f"{exc.filename}: cannot read: {exc.strerror or exc}")
    gate = build_gate(*recordings, entries, strict=args.strict, cors=cors, expectations=source)
    return _written_out("compare", args, args.candidate.resolve().parent, lambda out_dir: _finish(gate, out_dir, emit))


def _written_out(verb: str, args: argparse.Namespace, default_parent: Path, write: Callable[[Path], int]) -> int:
    """`write(out_dir)`'s exit code, `out_dir` being --out (else a new `<verb>-<time>` under `default_parent`),
    held for this process while it writes; exit 2 when it cannot be written, saying why."""
    try:
        out_dir = args.out or fresh_directory(default_parent, verb)
        with claimed_directory(out_dir, recorded_files(), args.replace):
            return write(out_dir)
    except OutputDirError as exc:
        return _error(verb, str(exc))
    except OSError as exc:  # a full disk, a file size limit
        return _error(verb, cannot_write(exc, out_dir))


def _judged_again(recording: Any, cases: list[Any]) -> Any:
    """The recording judged again from its transcripts, with the markers its run checked (its header)."""
    from conformance.compare.rejudge import judged_again
    from conformance.formats.markers import DEFAULT_MARKERS
    from conformance.record.recording import read_header
    from conformance.record.transcript import TRANSCRIPTS_FILE

    header = read_header(Path(str(recording.run_dir)) / TRANSCRIPTS_FILE, "transcripts") or {}
    judged, notes = judged_again(recording, cases, tuple(header.get("markers") or DEFAULT_MARKERS))
    if notes:
        print(f"conformance compare: {recording.run_dir}: {len(notes)} recorded result(s) differ from their "
              f"transcripts judged again (e.g. {notes[0]}); the gate uses the judgement of the transcripts",
              file=sys.stderr)
    return judged


def _recorded_cors(gate_dir: Path) -> dict[str, Any] | None:
    """The CORS section of the live gate whose sides are being compared (preflights are not cases): None
    without a gate.json there or one that says none; OSError for one that cannot be read (a FIFO, too large)."""
    import json

    from conformance.compare.gate import GATE_FILE, MAX_GATE_BYTES

    try:
        return json.loads(read_bounded(gate_dir / GATE_FILE, MAX_GATE_BYTES, "a gate record")).get("cors")
    except (FileNotFoundError, ValueError, AttributeError):
        return None


def run_gate(args: argparse.Namespace) -> int:
    with json_output(args.json) as emit:
        return _run_gate(args, emit)


def _run_gate(args: argparse.Namespace, emit: Callable[[str], None]) -> int:
    from conformance.compare.expectations import ExpectationsError
    from conformance.run.engine import select_cases
    from conformance.run.gate_sides import GateSide
    from conformance.servers.profiles import launchable_profiles, speaks_format_parsers
    from conformance.suite.cases import CaseFileError, load_features, load_suite

    try:
        form = served_format(args.format, args.model)
    except ValueError as exc:  # a checkpoint's files that cannot be read
        return _error("gate", f"--model: {exc}")
    args.format = form.name
    sides = []
    for name in ("baseline", "candidate"):
        target, model, profile = (getattr(args, f"{name}{suffix}") for suffix in ("", "_model", "_profile"))
        key_variable = getattr(args, f"{name}_api_key_env")
        if key_variable and not os.environ.get(key_variable):
            return _error("gate", f"--{name}-api-key-env: the environment variable {key_variable} is not set")
        # the side's own variable, else --api-key, else $OPENAI_API_KEY (as the openai client reads it), else none
        api_key = (os.environ.get(key_variable) if key_variable else None) or args.api_key or os.environ.get(
            "OPENAI_API_KEY") or "EMPTY"
        if "://" in target:
            if getattr(args, f"{name}_args"):
                return _error("gate", f"--{name}-args: the {name} is a URL, not a server the gate launches")
            if not (model and profile):
                return _error("gate", f"--{name} URL needs --{name}-model and --{name}-profile")
            sides.append(GateSide(name, profile, base_url=target, model=model, fixture_variant=args.fixture_variant,
                                  api_key=api_key, format=args.format))
        elif target in launchable_profiles():
            try:
                extra_args = tuple(shlex.split(getattr(args, f"{name}_args")))
            except ValueError as exc:
                return _error("gate", f"--{name}-args: {exc}")
            if form.checkpoint is not None and not extra_args and speaks_format_parsers(target):
                return _error("gate", f"--{name} {target}: its parsers are the format's own, and the {form.name} "
                              "format has no record to name them: give them with "
                              f"--{name}-args \"--tool-call-parser P --reasoning-parser R\" (or --format NAME "
                              "when the checkpoint is of a family `conformance formats` lists)")
            sides.append(GateSide(name, target, fixture_variant=args.fixture_variant, api_key=api_key,
                                  format=args.format, extra_args=extra_args))
        else:
            return _error("gate", f"--{name}: {target!r} is neither a URL nor a profile "
                          f"({', '.join(launchable_profiles())})")
    if args.concurrency < 1:
        return _error("gate", "--concurrency must be at least 1")
    if problem := timeout_problem(args.timeout):
        return _error("gate", f"{problem}, not {args.timeout:g}")
    launched = all(side.base_url is None for side in sides)
    try:
        unknown = sorted(set(args.feature) - set(load_features(args.cases)))
        if unknown:
            return _error("gate", f"unknown feature tag(s): {', '.join(unknown)}")
        cases = select_cases(load_suite(args.cases, form), args.case, args.feature)
        entries, source = _expectations(args, (sides[0].profile, sides[1].profile) if launched else None, args.format)
    except (CaseFileError, ExpectationsError, ValueError) as exc:
        return _error("gate", str(exc))
    if not cases:
        return _error("gate", "no case matches the selection")
    try:
        rebuilders = second_turn_rebuilders(args.second_turn)
    except ValueError as exc:
        return _error("gate", str(exc))
    problems = _check_selectors(entries, [], args.cases)  # before any server is started
    if problems:
        return _error("gate", "\n".join(problems))
    return _written_out("gate", args, Path("reports"),
                        lambda out_dir: _gate_into(out_dir, args, sides, cases, entries, source, emit, rebuilders))


def _gate_into(out_dir: Path, args: argparse.Namespace, sides: list[Any], cases: list[Any], entries: list[Any],
               source: dict[str, Any], emit: Callable[[str], None], rebuilders: dict[str, Any]) -> int:
    """Run both sides into `out_dir`, then write the gate of their recordings (of what they recorded, when
    interrupted)."""
    from conformance.clients.second_turn import import_libraries
    from conformance.compare.gate import build_gate
    from conformance.report.run.write import write_side_reports
    from conformance.run.gate_sides import DEFAULT_ORIGIN, GateSetupError, SideRefused, run_gate_sides, targets_for

    sides = _with_checkpoints(args, out_dir, sides)
    read_from = format_named(args.format).checkpoint
    print(f"gate: {sides[0].profile} -> {sides[1].profile} on the {sides[0].format} format"
          f"{f' (read from {read_from}: no shipped record has its chat template)' if read_from else ''}, "
          f"{len(cases)} cases; writing to {out_dir}", file=sys.stderr)
    print(f"expectations: {source['file'] or 'none'} ({source['note']})", file=sys.stderr)
    signal.signal(signal.SIGTERM, exit_codes.raise_terminated)  # unwind as on Ctrl-C: launched servers are stopped
    try:
        with targets_for(sides, out_dir, api_key="EMPTY", timeout=args.timeout,
                         forcing=forcing_fields(args.forcing),
                         meanwhile=lambda: (_import_reports(), import_libraries(rebuilders))) as (runs, release):
            import_libraries(rebuilders)  # before any request (done already if the servers booted meanwhile)
            recordings, cors = run_gate_sides(runs, cases, out_dir, concurrency=args.concurrency,
                                              origin=args.origin or DEFAULT_ORIGIN, granularities=args.granularities,
                                              rebuilders=rebuilders)
            release()  # the servers shut down while the reports are written
            write_side_reports(out_dir, recordings)
            gate = build_gate(*recordings, entries, strict=args.strict, cors=cors, expectations=source)
            return _finish(gate, out_dir, emit)
    except SideRefused as refused:
        return _refused(refused, out_dir, sides, source, emit)
    except GateSetupError as exc:
        return _error("gate", str(exc))
    except KeyboardInterrupt as stop:  # every server is stopped by now: the gate of what was recorded
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        recordings = [_recorded_so_far(out_dir, side) for side in sides]
        write_side_reports(out_dir, recordings)
        signal_name = exit_codes.signal_of(stop)
        print(f"gate: interrupted ({signal_name}): the gate of what was recorded follows", file=sys.stderr)
        return _finish(build_gate(*recordings, entries, strict=args.strict, expectations=source,
                                  interrupted=signal_name), out_dir, emit)


def _refused(refused: Any, out_dir: Path, sides: list[Any], source: dict[str, Any],
             emit: Callable[[str], None]) -> int:
    """A launched side's server refused to start: the candidate's refusal is the gate's verdict (gate.json and
    the reports, exit 1); the baseline's is an infrastructure error (exit 2): what runs today does not start."""
    from conformance.compare.gate import build_refused_gate

    log = os.path.relpath(refused.log_path, out_dir)
    if refused.side == "baseline":
        return _error("gate", f"the baseline {refused.profile} refuses to start this checkpoint, so there is nothing "
                              f"to compare the candidate against (fix the baseline's set-up first): {refused.refusal} "
                              f"(log: {refused.log_path})")
    print(visible(f"gate: the {refused.side} {refused.profile} refuses to start: {refused.refusal}"), file=sys.stderr)
    gate = build_refused_gate({"side": refused.side, "profile": refused.profile, "server": refused.server_name,
                               "message": refused.refusal, "log": log}, refused.stamps,
                              {side.name: side.profile for side in sides}, expectations=source)
    return _finish(gate, out_dir, emit)


def _recorded_so_far(out_dir: Path, side: Any) -> Any:
    """What an interrupted gate's side recorded (answers and results are written as they come), its stamp
    saying it was interrupted; an empty recording when it recorded nothing."""
    from conformance.record.run_dir import Recording, recorded_so_far
    from conformance.record.stamp import make_stamp, stamp_of_recording
    from conformance.record.transcript import TranscriptError

    try:
        transcripts, results = recorded_so_far(out_dir / side.name)
    except TranscriptError as exc:
        print(visible(f"gate: {exc}"), file=sys.stderr)
        transcripts, results = [], []
    completion = f"interrupted after {len(results)} results"
    stamp = (stamp_of_recording(transcripts, completion) if transcripts
             else make_stamp({"profile": side.profile}, completion="interrupted before any answer was recorded"))
    return Recording(side.profile, transcripts, results, stamp, side.name)


def _with_checkpoints(args: argparse.Namespace, out_dir: Path, sides: list[Any]) -> list[Any]:
    """The sides, each launched one with what it serves: --model, else the tiny checkpoint in the
    variant its profile record asks for (transformers-serve's closes content on the end token),
    built into the output directory once per variant."""
    from dataclasses import replace

    from conformance.commands.run import _directory_digest
    from conformance.formats.tiny_checkpoint import build_fixture
    from conformance.servers.profiles import served_variant

    built: dict[str, tuple[Path, str]] = {}
    with_checkpoints = []
    for side in sides:
        if side.base_url is None and args.model is not None:
            side = replace(side, checkpoint=args.model)
        elif side.base_url is None:
            variant = served_variant(side.profile, side.fixture_variant)
            if variant not in built:
                folder = build_fixture(out_dir / ("checkpoint" if variant == "full" else f"checkpoint-{variant}"), variant,
                                   format_named(side.format))
                built[variant] = (folder, _directory_digest(folder))
            side = replace(side, checkpoint=built[variant][0], checkpoint_revision=built[variant][1])
        with_checkpoints.append(_with_parsers(side) if side.base_url is None else side)
    return with_checkpoints


def _with_parsers(side: Any) -> Any:
    """A launched side with the parsers its checkpoint's template is predicted to start with, when its profile
    record lets the template choose (`Launch.parsers_by_template`); says so on stderr."""
    from dataclasses import replace

    from conformance.audit.launch_parsers import chosen_parsers
    from conformance.servers.profiles import served_profile

    choice = chosen_parsers(served_profile(side.profile, format_named(side.format)), side.checkpoint)
    if choice.message:
        print(visible(f"gate: {side.name} {side.profile}: {choice.message}"), file=sys.stderr)
    return replace(side, launch_flags=choice.flags, launch_note=choice.note)
