"""Exit codes shared by every verb (documented in README.md and in `conformance --help`)."""

OK = 0  # everything as expected
FAILED = 1  # a conformance failure, an unmet expectation or an unacknowledged difference
ERROR = 2  # usage, input or infrastructure error

EPILOG = (
    "exit codes: 0 = everything as expected; 1 = a conformance failure, unmet expectation "
    "or unacknowledged difference; 2 = usage, input or infrastructure error"
)
