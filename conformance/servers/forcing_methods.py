"""How a profile's server is made to emit an exact raw output, as strategies the engine asks
(`ForcingMethod`): vLLM's regex (`RegexForcing`) or token grammar (`TokenGrammarForcing`) structured
outputs, `transformers serve`'s sequence bias (`SequenceBiasForcing`), or none (`NoForcing`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from conformance.record.case_model import Case
from conformance.servers.forcing import (
    PROBE_MARKERS,
    PROBE_TEXT,
    ForcingUnsupported,
    ServerTokenizer,
    forced_text,
    forcing_extra_body,
    probe_forcing,
    server_tokens,
    token_grammar_body,
    token_grammar_text,
    verify_forcing,
)
from conformance.servers.sequence_bias import (
    CheckpointTokenizer,
    forced_text_of,
    generation_config_field,
    probe_sequence_bias,
    verify_transcript,
)
from conformance.util.side_requests import in_daemon_thread

FORCED_REQUEST_KEYS = ("structured_outputs", "return_token_ids")


class ForcingMethod(Protocol):
    """How the engine makes a profile's server emit a case's exact raw output and checks it did.

    `request_fields` are merged into the request body (`request` is the case's request, for a method
    that needs the prompt; `tokenizer()` gives the run's tokenizer, from `tokenizer`, for a method that
    names token ids); it raises ForcingUnsupported or ValueError for a text it cannot force, and
    `conformance.servers.forcing.TokensUnavailable` when the tokenizer cannot tell. `request_keys` are the
    body fields it sets (a recording is compared with today's case on the others, and on `forced_text`).
    `probe` sends one small forced request for `text` (a format's probe text; `markers`, its tokens
    that must come back as themselves; default: the default format's) (raises ForcingUnsupported when the server cannot force,
    `conformance.servers.forcing.ServerRefused`/OSError/ValueError when it cannot tell). `tokenizer` is the
    tokenizer of the run (vLLM: the server's own, `ServerTokenizer`) that `verify` checks a forced
    answer with: its problems (empty: exact), None when it cannot be verified.
    `forced_text` reads the raw text back out of a recorded request (for reports; None: not forced).
    The three that may wait (`request_fields`, `probe`, `verify`) are awaited on the run's event loop,
    within its timeout: a method whose work blocks (a file to load, a blocking request) does it in a
    daemon thread (`conformance.util.side_requests.in_daemon_thread`); requests it awaits need none.
    """

    request_keys: tuple[str, ...]

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]: ...

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None,
                    text: str = PROBE_TEXT, markers: Sequence[str] = PROBE_MARKERS) -> None: ...

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> Any: ...

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None: ...

    def forced_text(self, request: Mapping[str, Any]) -> str | None: ...


@dataclass(frozen=True)
class RegexForcing:
    """vLLM structured outputs: `structured_outputs.regex` matching exactly the text, token ids
    returned and verified through the server's /tokenize and /detokenize."""

    request_keys = FORCED_REQUEST_KEYS

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        return forcing_extra_body(raw_text)  # the text escaped: no tokenizer asked

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None,
                    text: str = PROBE_TEXT, markers: Sequence[str] = PROBE_MARKERS) -> None:
        await probe_forcing(root_url, model, timeout, api_key, text=text, markers=markers)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> ServerTokenizer:
        return ServerTokenizer(root_url, model, api_key, timeout)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        return await verify_forcing(tokenizer, case, transcript, markers)

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        regex = (request.get("structured_outputs") or {}).get("regex")
        return forced_text(regex) if isinstance(regex, str) else None


@dataclass(frozen=True)
class TokenGrammarForcing:
    """vLLM structured outputs with llguidance: `structured_outputs.grammar`, a lark grammar naming
    each token id the server's /tokenize gives for the text (so added tokens such as `<think>` are
    forced as themselves, where a regex over their text fails inside llguidance), the text kept in
    the grammar's first line, a comment; the returned ids are verified as for RegexForcing."""

    request_keys = FORCED_REQUEST_KEYS

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        return token_grammar_body(raw_text, await server_tokens(tokenizer(), raw_text))  # the server's /tokenize

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None,
                    text: str = PROBE_TEXT, markers: Sequence[str] = PROBE_MARKERS) -> None:
        async def grammar_fields(text: str, tokenizer: ServerTokenizer) -> dict:
            return token_grammar_body(text, await tokenizer.tokenize(text))

        await probe_forcing(root_url, model, timeout, api_key, fields=grammar_fields, text=text, markers=markers)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> ServerTokenizer:
        return ServerTokenizer(root_url, model, api_key, timeout)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        return await RegexForcing().verify(tokenizer, case, transcript, markers)

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        grammar = (request.get("structured_outputs") or {}).get("grammar")
        return token_grammar_text(grammar) if isinstance(grammar, str) else None


@dataclass(frozen=True)
class NoForcing:
    """A server with no known way to force outputs: its forced cases are skipped with `reason`."""

    reason: str
    request_keys = ()

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        raise ForcingUnsupported(self.reason)

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None,
                    text: str = PROBE_TEXT, markers: Sequence[str] = PROBE_MARKERS) -> None:
        raise ForcingUnsupported(self.reason)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> ServerTokenizer:
        raise ForcingUnsupported(self.reason)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        return None

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        return None


@dataclass(frozen=True)
class SequenceBiasForcing:
    """`transformers serve`: the request field `generation_config` whose `sequence_bias` forces the
    checkpoint tokenizer's ids step by step, the prompt's tail as the first context; verified from
    `usage` (prompt and completion token counts), as `conformance.servers.sequence_bias` explains."""

    request_keys = ("generation_config",)

    async def request_fields(self, raw_text: str, request: Mapping[str, Any],
                             tokenizer: Callable[[], Any]) -> dict[str, Any]:
        # the checkpoint's tokenizer, loaded at first use: in a thread (the engine bounds the wait)
        return await in_daemon_thread(None, lambda: generation_config_field(tokenizer(), raw_text, request))

    async def probe(self, root_url: str, model: str, timeout: float, api_key: str | None,
                    text: str = PROBE_TEXT, markers: Sequence[str] = PROBE_MARKERS) -> None:
        await in_daemon_thread(None, probe_sequence_bias, root_url, model, timeout, api_key, text)

    def tokenizer(self, root_url: str, model: str, api_key: str | None, timeout: float) -> Any:
        return CheckpointTokenizer(model)

    async def verify(self, tokenizer: Any, case: Case, transcript: Any, markers: Sequence[str]) -> list[str] | None:
        def verify() -> list[str] | None:
            try:
                return verify_transcript(tokenizer, case.force, transcript)
            except (ValueError, LookupError, TypeError, AttributeError, OSError):  # another shape; a template unread
                return None

        return await in_daemon_thread(None, verify)  # renders the prompt with the checkpoint's template

    def forced_text(self, request: Mapping[str, Any]) -> str | None:
        return forced_text_of(request)
