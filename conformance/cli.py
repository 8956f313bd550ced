"""`conformance` command line: a thin layer that dispatches to one module per verb.

Every module in `conformance.commands` defines `register(subparsers)`, which adds its verb and sets
`func` (taking the parsed arguments, returning an exit code) as a parser default.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import pkgutil
import signal
import sys
import threading
import traceback
from typing import NoReturn

from conformance import __version__, commands
from conformance.util import exit_codes
from conformance.util.side_requests import side_jobs_running

EXTRA_HINT = ("pip install 'hf-parser-conformance[audit]' for `audit`, '[live]' for the verbs that run servers or "
              "read their recordings, '[clients]' for `clients`")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conformance",
        description="Conformance suite for Hugging Face response_template parsers "
        "(vLLM 0.32 `--tool-call-parser hf --reasoning-parser hf`).",
        epilog=exit_codes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{module_info.name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C stops every verb cleanly (reports written, servers stopped): take SIGINT even when the
    # process was started with it ignored, as a non-interactive shell starts a background job.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return exit_codes.ERROR
    try:
        return args.func(args)
    except ModuleNotFoundError as missing:  # an extra not installed (pyproject.toml: each verb's libraries)
        print(f"conformance {args.verb}: error: the Python package {missing.name!r} is not installed; "
              f"install the extra this verb needs: {EXTRA_HINT}", file=sys.stderr)
        return exit_codes.ERROR
    except KeyboardInterrupt as stop:
        print("interrupted", file=sys.stderr)
        return exit_codes.stopped_by(exit_codes.signal_of(stop))


def exit_process(code: int) -> NoReturn:
    """Leave the process with `code`. A job still running in a daemon thread (a client library rebuilding a
    second turn when Ctrl-C came) would be ended by the interpreter's shutdown inside native code
    (pydantic-core's callbacks), which aborts the process (SIGABRT, "FATAL: exception not rethrown") after
    every record was written: then the exit handlers run and the process leaves without that shutdown."""
    if side_jobs_running():
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def run() -> NoReturn:
    """The process entry (`conformance`, `python -m conformance`): `main`'s code, or for what escapes it, 130/143
    (a second Ctrl-C while stopping) or 1 (a crash, its traceback printed)."""
    try:
        code = main()
    except KeyboardInterrupt as stop:
        code = exit_codes.stopped_by(exit_codes.signal_of(stop))
    except Exception:
        traceback.print_exc()
        code = 1
    exit_process(code)


if __name__ == "__main__":
    run()
