"""`transformers serve` (5.23), transformers' own OpenAI-compatible server: its command, environment,
the finder of the telling line in its log, and its record."""

from __future__ import annotations

import re
from types import MappingProxyType

from conformance.record.server_rules import STREAM_KEEPS_REGION_WHITESPACE
from conformance.servers.forcing_methods import SequenceBiasForcing
from conformance.servers.profile import CommandVersionProbe, Launch, Profile
from conformance.servers.runtimes.transformers_serve import TRANSFORMERS_SERVE
from conformance.servers.vllm import find_vllm_error

TRANSFORMERS_SERVE_COMMAND = ("{bin}/transformers", "serve", "{model}", "--host", "{host}", "--port", "{port}")
# No update check against PyPI at start-up (its hint would be the last line of a failed start's log).
TRANSFORMERS_SERVE_ENV = MappingProxyType({"HF_HUB_DISABLE_UPDATE_CHECK": "1"})
_CLICK_ERROR = re.compile(r"^(?:│\s*)?(?:Error|Invalid value|Missing argument|No such option)\b.*?(?:\s*│)?$")


def find_transformers_serve_error(log_text: str) -> str | None:
    """The telling line in a `transformers serve` log: the last `SomeError: message` of a traceback
    (as in vLLM's logs), else the command line's own usage error (typer's "Error"/"Invalid value")."""
    if found := find_vllm_error(log_text):
        return found
    usage = [line.strip(" │") for line in log_text.splitlines() if _CLICK_ERROR.match(line.strip())]
    return usage[-1] if usage else None


TRANSFORMERS_SERVE_PROFILE = Profile(
    name="transformers-serve", server_name="transformers serve",
    description="transformers 5.23's own OpenAI-compatible server, parsing with the response_template",
    launch=Launch(TRANSFORMERS_SERVE_COMMAND, ("--device", "cpu"), find_transformers_serve_error,
                  ("--log-level", "info"), TRANSFORMERS_SERVE_ENV, runtime=TRANSFORMERS_SERVE,
                  log_prefix="transformers-serve"),
    forcing=SequenceBiasForcing(),
    version_probe=CommandVersionProbe(("{python}", "-c", "import transformers; print(transformers.__version__)")),
    reasoning_field="reasoning_content", expectation_fallback=(), ends_stream_with_done=False,
    tokenizes_conversations=False,  # it has no /tokenize at all (HTTP 404)
    fixture_variant="eos-closes-content", rules=(STREAM_KEEPS_REGION_WHITESPACE,),
    stream_interval="refused",  # measured on 5.23: HTTP 422 "Unexpected fields in the request: {'stream_interval'}"
    cors_advice="start `transformers serve` with `--enable-cors` (permissive: it then allows every origin, "
                "`{origin}` among them)",
)  # fmt: skip
