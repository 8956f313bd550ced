"""Which line of a server's log says why it did not start: one finder per kind of server, named by
its profile's `Launch.find_error`."""

from __future__ import annotations

import re

# "(APIServer pid=123) " / "(EngineCore_DP0 pid=456) " prefixes vLLM puts on its processes' lines.
_PROCESS_PREFIX = re.compile(r"^\([\w.-]+ pid=\d+\)\s?")
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b:\s*.+$"  # SomeError: message
    r"|^[\w.-]+(?: [\w-]+)?: error: .+$"  # argparse: "api_server.py: error: argument --dtype: ..." ("main.py serve: ...")
)
_PYDANTIC_VALUE_ERROR = re.compile(r"^\s*(?:Value|Type|Assertion) error, (?P<message>.+?)(?:\s+\[type=.*)?$")
_GENERIC_ERRORS = ("Engine core initialization failed", "See root cause above", "validation error for ")


def find_vllm_error(log_text: str) -> str | None:
    """The most telling error line in a vLLM log, without vLLM's process prefix.

    A pydantic "Value error, <message>" wins (vLLM's config validation wraps its ValueErrors that
    way); otherwise the last `SomeError: message` line that is not a generic wrapper such as
    "Engine core initialization failed"; otherwise the last exception line of any kind.
    """
    exception_lines: list[str] = []
    for raw_line in log_text.splitlines():
        line = _PROCESS_PREFIX.sub("", raw_line.rstrip())
        if match := _PYDANTIC_VALUE_ERROR.match(line):
            return match.group("message").strip()
        if _EXCEPTION_LINE.match(line):
            exception_lines.append(line)
    specific = [line for line in exception_lines if not any(generic in line for generic in _GENERIC_ERRORS)]
    chosen = specific or exception_lines
    return chosen[-1] if chosen else None


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_RUST_ERROR = re.compile(r"^\(RustFrontend pid=\d+\)\s+ERROR\s+.*?\[[^\]]+\]\s+(?P<message>.+)$")
_RUST_CAUSE = re.compile(r"^\s+\d+: (?P<cause>.+)$")  # "Caused by these errors (recent errors listed first):"


def find_vllm_rs_error(log_text: str) -> str | None:
    """The most telling error line in a vllm-rs log (its colours removed): where the frontend failed
    by itself, the root of its "Caused by" list (else its last ERROR message); where it only reports
    that its managed Python engine exited, the engine's own line as `find_vllm_error` reads it."""
    plain = _ANSI_ESCAPE.sub("", log_text).splitlines()
    frontend_errors = [match.group("message") for line in plain if (match := _RUST_ERROR.match(line))]
    engine_lines = [line for line in plain if not line.startswith("(RustFrontend ")]
    causes = [match.group("cause") for line in engine_lines if (match := _RUST_CAUSE.match(line))]
    last_error = frontend_errors[-1] if frontend_errors else None
    if last_error and "engine exited" not in last_error:
        return causes[-1] if causes else last_error
    return find_vllm_error("\n".join(engine_lines)) or last_error


_CLICK_ERROR = re.compile(r"^(?:│\s*)?(?:Error|Invalid value|Missing argument|No such option)\b.*?(?:\s*│)?$")


def find_transformers_serve_error(log_text: str) -> str | None:
    """The telling line in a `transformers serve` log: the last `SomeError: message` of a traceback
    (as in vLLM's logs), else the command line's own usage error (typer's "Error"/"Invalid value")."""
    if found := find_vllm_error(log_text):
        return found
    usage = [line.strip(" │") for line in log_text.splitlines() if _CLICK_ERROR.match(line.strip())]
    return usage[-1] if usage else None
