"""Exit codes shared by every verb (documented in README.md and in `conformance --help`). A verb stopped by a
signal exits as the shell reports a process killed by it, 128 + its number, after writing what it has."""

OK = 0  # everything as expected
FAILED = 1  # a conformance failure, an unmet expectation, an unacknowledged difference, a gate's candidate refusing to start
ERROR = 2  # usage, input or infrastructure error
INTERRUPTED = 130  # stopped by Ctrl-C (SIGINT, 128 + 2)
TERMINATED = 143  # stopped by SIGTERM (128 + 15): run and gate report first; other verbs die of it

EPILOG = (
    "exit codes: 0 = everything as expected; 1 = a conformance failure, unmet expectation, "
    "unacknowledged difference or a gate's candidate refusing to start the checkpoint; 2 = usage, input or "
    "infrastructure error (a gate's baseline that does not start); 130 = interrupted by Ctrl-C, "
    "143 = by SIGTERM, after reporting what was done (`serve` exits 0: stopping is how it ends)"
)


class Terminated(KeyboardInterrupt):
    """SIGTERM raised where Ctrl-C raises KeyboardInterrupt, so that the same code unwinds (servers stopped,
    partial reports written) and still knows which signal it was."""


def raise_terminated(signum: int, frame: object) -> None:
    """A SIGTERM handler: `signal.signal(signal.SIGTERM, raise_terminated)`."""
    raise Terminated


def signal_of(stop: KeyboardInterrupt) -> str:
    """The signal that stopped a verb: "SIGTERM" for `Terminated`, else "SIGINT" (Ctrl-C)."""
    return "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"


def stopped_by(signal_name: str) -> int:
    """The exit code of a verb stopped by `signal_name` ("SIGINT" or "SIGTERM")."""
    return TERMINATED if signal_name == "SIGTERM" else INTERRUPTED
