"""One module per CLI verb; each defines `register(subparsers)` (see `conformance.cli`)."""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from conformance.record.case_model import GRANULARITIES, WHOLE_OUTPUT
from conformance.util import exit_codes
from conformance.util.files import STDOUT, write_atomically


def add_verb(subparsers: argparse._SubParsersAction, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """A verb's (or sub-verb's) parser, with the shared exit-code epilog and the description kept as written."""
    return subparsers.add_parser(name, help=help, description=description, epilog=exit_codes.EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


def timeout_problem(seconds: float) -> str | None:
    """Why `seconds` cannot be a `--timeout` (None: it can). Every verb refuses 0, a negative number, `nan` and
    `inf` alike: with `inf`, a stream that never ends would hold the verb for ever."""
    return None if math.isfinite(seconds) and seconds > 0 else "--timeout must be a positive number of seconds"


def add_out_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    """`--out DIR` and `--replace`, as every verb that writes a run or a gate takes them."""
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help=f"output directory (default: {default}, a new one); one that already holds a run or a "
                             "gate is refused unless --replace, and one another process writes to is refused")
    parser.add_argument("--replace", action="store_true",
                        help="write over the run or gate already in --out (its files are replaced)")


def recorded_files() -> tuple[str, ...]:
    """The files whose presence makes a directory hold a run or a gate (paths inside it): a new run or gate
    written there would mix with them."""
    from conformance.compare.gate import GATE_FILE, SIDES
    from conformance.record.run_dir import RUN_RECORD_FILES

    return (GATE_FILE, *RUN_RECORD_FILES, *(f"{side}/{name}" for side in SIDES for name in RUN_RECORD_FILES))


def granularities(text: str) -> tuple[str, ...]:
    """`--granularities`: `all`, `none`, or a comma-separated list of tokens per delta (integers from 2, `whole`)."""
    if text == "all":
        return GRANULARITIES
    if text == "none":
        return ()
    chosen = tuple(part.strip() for part in text.split(","))
    for part in chosen:
        if part != WHOLE_OUTPUT and not (part.isdigit() and 2 <= int(part) <= 999_999):
            raise argparse.ArgumentTypeError(f"{part!r} is not a number of tokens per delta from 2 (nor {WHOLE_OUTPUT})")
    return tuple(dict.fromkeys(chosen))


def add_granularities_argument(parser: argparse.ArgumentParser, default: tuple[str, ...]) -> None:
    """`--granularities`, as `run` (default: none) and `gate` (default: `DEFAULT_GRANULARITIES`) take it."""
    parser.add_argument(
        "--granularities", type=granularities, default=default, metavar="LIST",
        help="each forced streaming case is also sent asking for several tokens per delta (vLLM's `stream_interval`), "
             "and must reassemble to its one-token stream: a comma-separated list of tokens per delta (from 2, or "
             f"`{WHOLE_OUTPUT}`: every token after the first in one delta), `all` ({','.join(GRANULARITIES)}) or `none` "
             f"(default: {','.join(default) or 'none'}). A server that cannot be asked per request skips them.")


def add_second_turn_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """`--second-turn`, as `run` (default: none) and `gate` (default: all) take it."""
    parser.add_argument(
        "--second-turn", default=default, metavar="LIST",
        help="a case with a second turn is also sent on: its non-streaming answer rebuilt by each named client into "
             "the tool loop's next request (the real client libraries openai-python, langchain-openai, litellm, "
             "ai-sdk, and hand-written clients sending reasoning back as reasoning, reasoning_content, "
             "both-reasoning-fields or no-reasoning), accepted, rendered as the model wrote turn 1 and answered: a "
             f"comma-separated list, `all` or `none` (default: {default})")


def second_turn_rebuilders(text: str) -> dict[str, Any]:
    """The rebuilders `--second-turn` names (by name); ValueError names an unknown one, or a client named that
    cannot run here (under `all`, such a client's second turns are a named, allowed skip)."""
    from conformance.clients.second_turn import CLIENT_REBUILDERS, unavailable
    from conformance.run.second_turn import REASONING_REBUILDERS

    known = {**CLIENT_REBUILDERS, **REASONING_REBUILDERS}
    if text in ("all", "none"):
        return known if text == "all" else {}
    chosen = [part.strip() for part in text.split(",")]
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise ValueError(f"--second-turn: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(known)}, "
                         "all or none")
    for name in chosen:
        if name in CLIENT_REBUILDERS and (why := unavailable(name)):
            raise ValueError(f"--second-turn: {name} cannot run here: {why}")
    return {name: known[name] for name in dict.fromkeys(chosen)}


def add_json_argument(parser: argparse.ArgumentParser, document: str) -> None:
    """`--json PATH`: the verb's JSON document (`document`: which one, for the help) written there too; `-` is
    standard output, which then carries that document alone."""
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help=f"write {document} here too (`-`: standard output, which then carries it alone; "
                             "everything else the verb prints goes to standard error)")


@contextlib.contextmanager
def json_output(path: Path | None) -> Iterator[Callable[[str], None]]:
    """A function writing the verb's JSON document to `path` (--json; None: nowhere). While `path` is `-`,
    what the verb prints goes to standard error, so standard output holds the document alone."""
    stdout = sys.stdout

    def emit(text: str) -> None:
        if path == STDOUT:
            stdout.write(text)
            stdout.flush()
        elif path is not None:
            write_atomically(path, text)

    if path != STDOUT:
        yield emit
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield emit
