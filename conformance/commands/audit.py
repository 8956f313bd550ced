"""`conformance audit`: check checkpoints' response_template metadata and predict vLLM 0.32 hf startup."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from conformance.audit.hub import DEFAULT_WORKERS
from conformance.commands import add_verb, timeout_problem
from conformance.formats.checkpoint_files import OK
from conformance.util import exit_codes

DEFAULT_LIST = Path("checkpoints.yaml")
EXPECTATIONS = ("starts", "fails")

DESCRIPTION = """\
Audit checkpoints for the Hugging Face `hf` response parser of vLLM 0.32: which metadata key they carry
(`response_template`, the legacy `response_schema`, both or none), whether the template is valid under the
format's load rules, a short description of its regions, and whether vLLM 0.32 starts with
`--enable-auto-tool-choice --tool-call-parser hf`, `--reasoning-parser hf` and both (with vLLM's own error
message when it does not). vLLM itself is not needed.

Checkpoints come from REPO[@REVISION] arguments, --checkpoints FILE (default: ./checkpoints.yaml when no
checkpoint is named) and --local DIR. Hub access uses huggingface_hub and honours HF_TOKEN, HF_ENDPOINT,
HF_HOME / HF_HUB_CACHE, HF_HUB_OFFLINE, HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT (see --timeout); a commit
already in the cache costs no request.

--expect starts|fails lets a checkpoint's CI gate on the audit without reading JSON: each --local DIR and
REPO named on the command line must then start (or fail) in every configuration on the predicted hf start-up of
vLLM 0.32 and 0.33 (their Python frontends), as `expect` on all three configurations in a checkpoint list
(whose entries keep their own).

Exit codes: 0 when every checkpoint was read and met its expectations (and, with --fail-on-findings, had no
finding). 1 when a checkpoint misses its `expect` or --expect, or its files are broken (invalid JSON, over 5 MB,
nested over 100 levels, a template too expensive to analyse); findings (template rules, round trip, implementations side by
side) do too with --fail-on-findings, and only then. Exit 2 when a checkpoint cannot be reached (not found,
unauthorized, gated, Hub error, timeout, network, not cached while offline) or its files cannot be read, on
bad input, or when a report cannot be written; exit 130 on Ctrl-C, after writing the reports of the checkpoints
done.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_verb(
        subparsers, "audit", "check response_template metadata and predict vLLM 0.32 hf parser startup", DESCRIPTION
    )
    parser.add_argument("checkpoints", nargs="*", metavar="REPO[@REVISION]",
                        help="Hub checkpoints to audit (revision defaults to main, which gets a warning)")
    parser.add_argument("--checkpoints", dest="list_file", type=Path, metavar="FILE",
                        help="checkpoint list (YAML, see conformance/schemas/checkpoints.schema.json)")
    parser.add_argument("--local", action="append", type=Path, default=[], metavar="DIR",
                        help="audit a checkpoint directory on disk (repeatable)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report here (`-`: standard output)")
    parser.add_argument("--markdown", type=Path, metavar="PATH",
                        help="write the Markdown report here (`-`: standard output)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N",
                        help=f"concurrent Hub fetches (default {DEFAULT_WORKERS})")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="seconds to wait for the Hub's answer (default: the larger of HF_HUB_ETAG_TIMEOUT and "
                             "HF_HUB_DOWNLOAD_TIMEOUT among those set, else 10); each file, retries included, must "
                             "arrive within 3 times this")
    from conformance.audit.offline import DEFAULT_EXAMPLES, DEFAULT_SEED

    parser.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES, metavar="N",
                        help="round trip: N hypothesis examples per checkpoint with both a chat template and a "
                             f"response_template (default {DEFAULT_EXAMPLES}; 0: off)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="N",
                        help=f"round trip seed (default {DEFAULT_SEED}); the same seed finds the same examples")
    parser.add_argument("--hypothesis-db", nargs="?", type=Path, const=Path("reports/hypothesis-db"), metavar="DIR",
                        help="keep hypothesis's example database in DIR (default reports/hypothesis-db); "
                             "without this option none is kept")
    parser.add_argument("--implementations", metavar="all|NAME,...",
                        help="parse the round trip's outputs and every shipped case's forced output with these "
                             "implementations (transformers-5.16.1 ... transformers-5.24.0, vllm-0.32, vllm-0.33, "
                             "sglang-0.5.23; `transformers` = every release) and report where they disagree")
    parser.add_argument("--expect", choices=EXPECTATIONS, metavar="starts|fails",
                        help="exit 1 unless vLLM 0.32's and 0.33's hf parsers are predicted to start (or to fail) in "
                             "every configuration (tool, reasoning, both) on each --local DIR and REPO named here, "
                             "saying on standard error which did not and why")
    parser.add_argument("--fail-on-findings", action="store_true",
                        help="exit 1 when any checkpoint has a finding, saying on standard error how many had one")
    parser.add_argument("--write-template", type=Path, metavar="FILE",
                        help="with one --local DIR whose chat template is a shipped format's and whose "
                             "response_template is missing or refused by vLLM 0.32: write DIR's tokenizer_config.json "
                             "with that format's response_template to FILE (a new file)")
    parser.set_defaults(func=run)


def _write_template(audit, target: Path) -> str:
    """Write the audited checkpoint's tokenizer_config.json with its known format's response_template to
    `target`; what was written, for the log. UsageError when there is nothing right to write."""
    from conformance.audit.known_formats import with_format_template
    from conformance.formats.registry import FORMATS
    from conformance.util.files import write_atomically

    if audit.known_format is None:
        raise UsageError(f"--write-template: {audit.id}: its chat template is none of the shipped formats' "
                         "(`conformance formats`), so no response_template can be chosen for it")
    if not audit.needs_template:
        raise UsageError(f"--write-template: {audit.id}: vLLM 0.32's hf parsers already start on its own "
                         "response_template; nothing to write")
    if target.exists():
        raise UsageError(f"--write-template: {target} exists; name a new file")
    form = FORMATS[audit.known_format]
    write_atomically(target, with_format_template(audit.tokenizer_config or {}, form))
    return (f"wrote {target}: {audit.id}'s tokenizer_config.json with the {form.name} format's response_template "
            f"({form.provenance}); put it in the checkpoint in place of its tokenizer_config.json to serve it "
            "with --tool-call-parser hf --reasoning-parser hf")


def _entries(args: argparse.Namespace) -> list:
    from conformance.audit.checkpoint_list import load_checkpoints, parse_spec

    entries = [replace(parse_spec(spec), expect=_expectation(args)) for spec in args.checkpoints]
    list_file = args.list_file
    if list_file is None and not entries and not args.local:
        if not DEFAULT_LIST.is_file():
            raise UsageError("nothing to audit: name checkpoints, --checkpoints FILE or --local DIR "
                             f"(no {DEFAULT_LIST} in the current directory)")
        list_file = DEFAULT_LIST
    if list_file is not None:
        entries += load_checkpoints(list_file)
    return entries


def _expectation(args: argparse.Namespace) -> dict[str, str]:
    """--expect as a checkpoint list's `expect`: the same outcome for every configuration (none without it)."""
    from conformance.audit.predictors.vllm_032 import CONFIGURATIONS

    return {name: args.expect for name in CONFIGURATIONS} if args.expect else {}


class UsageError(Exception):
    pass


def _is_directory(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # e.g. a name too long: not a directory we can audit
        return False


def _offline_options(args: argparse.Namespace):
    from conformance.audit.implementations.registry import select
    from conformance.audit.offline import OfflineOptions

    if args.examples < 0:
        raise UsageError("--examples must be 0 or more")
    implementations = select(args.implementations) if args.implementations is not None else None
    database = args.hypothesis_db.resolve() if args.hypothesis_db is not None else None
    return OfflineOptions(examples=args.examples, seed=args.seed, database=database,
                          implementations=implementations)


def run(args: argparse.Namespace) -> int:
    from conformance.audit.checkpoint_audit import CHECKPOINT_FAULTS, audit_checkpoints, audit_local
    from conformance.audit.checkpoint_list import CheckpointsError, revision_warning
    from conformance.audit.hub import HubSettings
    from conformance.audit.offline import check as check_offline
    from conformance.report.audit.report import STDOUT, AuditReportWriter, audit_to_json, predictors_json
    from conformance.report.audit.terminal import checkpoint_state, render_terminal
    from conformance.util.progress import Progress

    try:
        entries = _entries(args)
        missing = [str(directory) for directory in args.local if not _is_directory(directory)]
        if missing:
            raise UsageError(f"--local: not a directory: {', '.join(missing)}")
        if args.workers < 1:
            raise UsageError("--workers must be at least 1")
        if args.timeout is not None and (problem := timeout_problem(args.timeout)):
            raise UsageError(problem)
        if args.write_template is not None and (len(args.local) != 1 or entries):
            raise UsageError("--write-template takes exactly one --local DIR (and no Hub checkpoint)")
        if args.json == STDOUT and args.markdown == STDOUT:
            raise UsageError("--json - and --markdown - would both write to standard output; give one a file")
        settings = HubSettings.from_env(args.timeout)
        offline = _offline_options(args)
    except (CheckpointsError, UsageError, ValueError) as exc:  # ValueError: a bad HF_* environment variable
        print(f"error: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    for entry in entries:
        if warning := revision_warning(entry):
            print(f"warning: {warning}", file=sys.stderr)

    to_stdout = STDOUT in (args.json, args.markdown)  # then standard output carries the report alone
    log = sys.stderr if to_stdout else sys.stdout
    try:  # audits never raise OSError (an unreadable file is a checkpoint status): these are the report files
        writer = AuditReportWriter(args.json, args.markdown)
        predictors = predictors_json()
        with Progress(len(args.local) + len(entries), "audit") as progress:
            for directory in args.local:
                audit = audit_local(directory)
                audit.expect = _expectation(args)
                check_offline(audit, offline)
                audit.position = len(writer.audits)
                writer.add(audit)
                progress.advance(audit.id, f"{audit.id}: {checkpoint_state(predictors, audit_to_json(audit))}")
            offset = len(writer.audits)
            try:
                for audit in audit_checkpoints(entries, settings, workers=args.workers):
                    audit.position += offset
                    check_offline(audit, offline)
                    writer.add(audit)
                    progress.advance(audit.id, f"{audit.id}: {checkpoint_state(predictors, audit_to_json(audit))}")
            except KeyboardInterrupt:
                writer.interrupt()
                print(f"interrupted after {len(writer.audits)} of {len(args.local) + len(entries)} checkpoints; "
                      "the reports hold those", file=sys.stderr)
                return exit_codes.INTERRUPTED
        report = writer.finish()
    except OSError as exc:
        print(f"error: cannot write the report: {exc}", file=sys.stderr)
        return exit_codes.ERROR

    log.write(render_terminal(report))
    for checkpoint in report["checkpoints"]:  # whole, on one line each: what a CI log is searched for
        if checkpoint["error"]:
            print(f"error: {checkpoint['id']}: {checkpoint['error']}", file=sys.stderr)
    if offline.examples > 0:
        print(f"round trip: seed {offline.seed} (the same --seed reproduces it)", file=log)
    for path in (args.json, args.markdown):
        if path is not None and path != STDOUT:
            print(f"wrote {path}", file=sys.stderr)

    audits = writer.audits
    failing_findings = [a for a in audits if a.findings] if args.fail_on_findings else []
    if failing_findings:
        print(f"--fail-on-findings: {len(failing_findings)} of {len(audits)} checkpoints had findings", file=sys.stderr)
    named_here = len(args.local) + len(args.checkpoints)  # --local first, then REPO arguments, then the list's
    for audit in sorted(audits, key=lambda audit: audit.position):
        if args.expect and audit.position < named_here and (unmet := audit.unmet_expectations):
            more = f" (and {len(unmet) - 1} more)" if len(unmet) > 1 else ""
            print(f"--expect {args.expect}: {audit.id}: {unmet[0]}{more}", file=sys.stderr)
    if args.write_template is not None:
        try:
            print(_write_template(audits[0], args.write_template), file=sys.stderr)
        except (UsageError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exit_codes.ERROR
    if any(a.status != OK and a.status not in CHECKPOINT_FAULTS for a in audits):
        return exit_codes.ERROR
    if failing_findings or any(a.status in CHECKPOINT_FAULTS or a.unmet_expectations for a in audits):
        return exit_codes.FAILED
    return exit_codes.OK
