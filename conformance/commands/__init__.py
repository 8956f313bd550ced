"""One module per CLI verb; each defines `register(subparsers)` (see `conformance.cli`)."""

from __future__ import annotations

import argparse

from conformance.util import exit_codes


def add_verb(subparsers: argparse._SubParsersAction, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """A verb's (or sub-verb's) parser, with the shared exit-code epilog and the description kept as written."""
    return subparsers.add_parser(name, help=help, description=description, epilog=exit_codes.EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
