"""vLLM's Rust frontend (`vllm-rs serve`, 0.32 and 0.33): its command, flags (everything after `--`
goes to the managed Python engine), the finder of the telling line in its log, and `vllm_rs_profile`."""

from __future__ import annotations

import re
from dataclasses import replace

from conformance.servers.forcing_methods import ForcingMethod, RegexForcing, TokenGrammarForcing
from conformance.servers.profile import KnownRefusal, Launch, Profile, VersionProbe
from conformance.servers.runtimes import Runtime
from conformance.servers.runtimes.vllm_033 import VllmRustOverlay
from conformance.servers.runtimes.vllm_rs import VllmRustFrontend
from conformance.servers.vllm import VLLM_COMMON_FLAGS, VLLM_ENV, find_vllm_error, vllm_cors_advice

VLLM_RS_COMMAND = ("{binary}", "serve", "{model}", "--host", "{host}", "--port", "{port}")
# Everything after `--` goes to the managed Python engine.
VLLM_RS_COMMON_FLAGS = ("--", *VLLM_COMMON_FLAGS)
VLLM_RS_HF_FLAGS = ("--tool-call-parser", "hf", "--reasoning-parser", "hf")


def vllm_rs_profile(name: str, description: str, release: str, runtime: Runtime, forcing: ForcingMethod,
                    expected_version: str | None = None, known_refusals: tuple[KnownRefusal, ...] = ()) -> Profile:
    """A profile of vLLM's Rust frontend (`release`, its binary and engine from `runtime`) with the hf parser."""
    return Profile(
        name=name, server_name="vLLM's Rust frontend", description=description,
        launch=Launch(VLLM_RS_COMMAND, VLLM_RS_HF_FLAGS, find_vllm_rs_error, VLLM_RS_COMMON_FLAGS, VLLM_ENV,
                      runtime=runtime, log_prefix="vllm-rs"),
        forcing=forcing, version_probe=VersionProbe(), reasoning_field="reasoning",
        cors_advice=vllm_cors_advice(f"vLLM {release}'s Rust frontend"), expected_version=expected_version,
        stream_interval="honoured",  # measured: 24 tokens asked 8 at a time came in 4 deltas (0.32, 0.33)
        known_refusals=known_refusals,
        # measured (0.32): /tokenize with `messages` is HTTP 400 "data did not match any variant of untagged enum
        # TokenizeRequest": it tokenizes a prompt only
        tokenizes_conversations=False,
    )  # fmt: skip


# Measured on 0.32.0: an assistant message sent back with both `reasoning` and `reasoning_content` (a client
# copying both names, as the Python frontend reads either) is refused: its message type takes the two names as
# one field (an alias), and serde refuses the duplicate. The Python frontend renders it.
BOTH_REASONING_FIELDS_REFUSED = KnownRefusal(
    mode="turn2@both-reasoning-fields", fields=("reasoning", "reasoning_content"), status=400,
    message="duplicate field `reasoning`",
    reason="vLLM 0.32's Rust frontend refuses an assistant message holding both reasoning and reasoning_content "
           "(HTTP 400 \"messages[1]: duplicate field `reasoning`\"); the Python frontend accepts it",
    link="tests/test_gate_cross.py::test_the_gate_from_the_python_to_the_rust_frontend_finds_their_real_differences")


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


VLLM_RS_PROFILES = (
    vllm_rs_profile("hf-rust", "vLLM 0.32's Rust frontend (vllm-rs) with the checkpoint-driven hf parser",
                    "0.32", VllmRustFrontend("0.32.0", "0.32.0+cpu"),
                    # A regex over the markers' text fails inside llguidance on the added tokens (HTTP 500).
                    TokenGrammarForcing(), known_refusals=(BOTH_REASONING_FIELDS_REFUSED,)),
    # The vllm-rs of the vllm==0.33.0 wheel over the 0.33 overlay's engine (conformance.servers.runtimes.vllm_033).
    vllm_rs_profile("hf-rust-0.33",
                    "vLLM 0.33's Rust frontend (vllm-rs) with the checkpoint-driven hf parser (flags as hf-rust)",
                    "0.33", VllmRustOverlay("0.33.0"),
                    # 0.33's frontend forces a regex over the markers' text, token ids as the Python frontend's.
                    RegexForcing(), expected_version="0.33.0", known_refusals=(replace(
                        BOTH_REASONING_FIELDS_REFUSED,
                        reason="vLLM 0.33's Rust frontend, as 0.32's, refuses an assistant message holding both "
                               "reasoning and reasoning_content (HTTP 400 \"messages[1]: duplicate field `reasoning`\"); "
                               "the Python frontend accepts it",
                        link="tests/test_033_profiles.py::test_every_second_turn_is_answered_on_hf_rust_033_but_both_"
                             "reasoning_fields_its_record_declares"),)),
)
