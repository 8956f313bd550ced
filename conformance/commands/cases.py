"""`conformance cases check [DIR]`: lint a case suite the way JSON-Schema-Test-Suite lints itself."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.commands import add_verb
from conformance.util import exit_codes

CHECK_DESCRIPTION = """\
Validate every *.yaml file of a case directory (default: the shipped suite; DIR/tools.yaml holds
the tools that its files share) and report every problem with its file, line, case (index and id)
and field:
  - the JSON Schema conformance/schemas/case.schema.json (types, required fields, unknown keys);
  - feature tags that are not in the registry (DIR/features.txt, else the shipped one);
  - duplicate case ids and duplicate descriptions (across files);
  - descriptions that do not state a behaviour (too short, or just the id);
  - tool names that neither the file's `tools` block nor DIR/tools.yaml defines (and names both define);
  - finish_reason values that do not fit the endpoint;
  - the feature `stream` without a `stream` override in some expectation, or the reverse;
  - expectations for profiles that are not known (a warning; known: hf, legacy, i.e. conformance.servers.profiles.PROFILES);
  - references that do not resolve: `contract N.M` must be a section of docs/vllm-0.32-contract.md,
    anything else a web address.
Exit 0 when there is no error (warnings allowed), 1 when a case file has an error, 2 when DIR
is not a directory, cannot be listed or holds no case file (or the shipped cases are missing).

example:
  conformance cases check            # the shipped suite
  conformance cases check my-cases/  # your own cases, with the shipped feature registry
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_verb(
        subparsers, "cases", "work with case files (check)", "Case files: the data that `conformance run` sends."
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = add_verb(
        actions, "check", "validate case files (schema, features, ids, descriptions, tools, profiles)", CHECK_DESCRIPTION
    )
    check.add_argument("directory", metavar="DIR", nargs="?", type=Path,
                       help="case directory (default: the shipped cases/)")  # fmt: skip
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from conformance.suite.cases import check_suite

    result = check_suite(args.directory)
    for issue in result.issues:
        print(issue, file=sys.stderr if issue.severity == "error" else sys.stdout)
    if not result.files:  # not a directory, or no case file in it: a usage error, not a failing case
        return exit_codes.ERROR
    summary = (f"{len(result.cases)} cases in {len(result.files)} files checked in {result.directory}: "
               f"{len(result.errors)} errors, {len(result.warnings)} warnings")  # fmt: skip
    print(summary, file=sys.stderr if result.errors else sys.stdout)
    return exit_codes.FAILED if result.errors else exit_codes.OK
