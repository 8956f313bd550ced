"""Make a server emit an exact raw output, and prove it did so with canonical tokens.

vLLM structured outputs force the text: `forcing_extra_body(raw_text)` is the request-body addition
(`structured_outputs.regex` matching exactly `raw_text`, plus `return_token_ids` so the server
returns the generated token ids). Merge it into a Chat Completions body, or pass it as the openai
client's `extra_body`, streaming or not. The server needs `--structured-outputs-config
'{"enable_in_reasoning": true}'` (our launcher sets it), otherwise the regex only applies after
reasoning ends.

Where a regex cannot force (vLLM's Rust frontend: llguidance refuses the added tokens a regex over
their text lets through), `token_grammar_body(raw_text, token_ids)` forces the tokenizer's own ids
of the text with a lark grammar naming each token; `token_grammar_text` reads the text back.

A regex fixes the text, not the tokens. `await verify_forced_output(tokenizer, raw_text, token_ids)`
checks, through the server's own `/tokenize` and `/detokenize` endpoints (`ServerTokenizer`), that
the returned ids decode to `raw_text` (a trailing stop token is allowed) and that every marker
occurring in the text (`<think>`, `</tool_call>`, ...) is a single token and was emitted as that
token each time. It returns the list of problems (empty: canonical) so callers can record them. `token_ids_of(response)`
and `token_ids_of_stream(chunks)` collect the ids from a response / from stream chunks (JSON dicts).

`ForcingUnsupported` says why a server cannot force (no `token_ids` returned, the forced request
refused with 400/422, text not honoured): the case is then skipped with that reason, never passed.
`await probe_forcing(root_url, model)` sends one small forced request to find that out up front. An HTTP
error that says nothing about forcing (401/403, 404 unknown model or path, 429, 5xx...) raises
`ServerRefused` with the server's own status and message, and an answer that is not JSON raises
`ValueError`: the probe cannot tell, which the engine reports as an `error`, never as a skip.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from conformance.formats.registry import DEFAULT_FORMAT
from conformance.record.case_model import Case, is_stream
from conformance.record.transcript import Transcript
from conformance.record.wire import read_stream, response_message
from conformance.util.json_codec import parse_json
from conformance.util.side_requests import KeptAliveJson, http_error_text, in_daemon_thread, post_json

VERIFIED_ENDPOINTS = frozenset({"chat"})  # token ids are read from Chat Completions answers only
PROBE_TEXT = DEFAULT_FORMAT.probe_text
PROBE_MARKERS = DEFAULT_FORMAT.marker_tokens
_REGEX_SPECIAL = set("\\.^$|?*+()[]{}-")
_REGEX_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\f": "\\f", "\v": "\\v"}


class ForcingUnsupported(Exception):
    """The server cannot be made to emit an exact raw output (the message says why)."""


class TokensUnavailable(Exception):
    """The server's tokenizer could not give the token ids a forced request needs (an HTTP error
    about the setup, no answer, an answer of the wrong shape): the request is an error, not a skip."""


class ServerRefused(Exception):
    """An HTTP error answer that is about the setup, not about forcing (auth, unknown model or path,
    rate limit, server error): the message is the server's own status and text."""


async def server_tokens(tokenizer: ServerTokenizer, text: str) -> list[int]:
    """The server tokenizer's ids of `text`, for a forcing method that names tokens: a server
    without /tokenize is ForcingUnsupported (this output cannot be forced so); any other failure is
    TokensUnavailable (the request is then an error, not a skip)."""
    try:
        return await tokenizer.tokenize(text)
    except ForcingUnsupported:
        raise
    except (ServerRefused, OSError, ValueError, LookupError, TypeError) as exc:
        raise TokensUnavailable(f"/tokenize: {exc}") from exc


# Statuses of a server that read the forced request and refused it: it cannot force (cases/README.md).
REFUSED_FORCING_STATUSES = frozenset({400, 422})


def exact_regex(raw_text: str) -> str:
    """A regex matching exactly `raw_text`, in the subset every structured-output backend reads."""
    if "\x00" in raw_text:
        raise ValueError("a forced output cannot contain a NUL character (vLLM refuses it in a regex)")
    return "".join(
        _REGEX_ESCAPES.get(char) or ("\\" + char if char in _REGEX_SPECIAL else char) for char in raw_text
    )


def forced_text(regex: str) -> str:
    """The raw text an `exact_regex` regex matches (its escaping undone), e.g. for a report."""
    unescape = {escaped[1]: char for char, escaped in _REGEX_ESCAPES.items()}
    text, escaped = [], False
    for char in regex:
        if escaped:
            text.append(unescape.get(char, char))
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            text.append(char)
    return "".join(text)


def forcing_extra_body(raw_text: str) -> dict:
    """Request-body fields that force `raw_text` and ask for the generated token ids."""
    return {"structured_outputs": {"regex": exact_regex(raw_text)}, "return_token_ids": True}


_GRAMMAR_TEXT_LINE = "// forced output: "


def token_grammar_body(raw_text: str, token_ids: Sequence[int]) -> dict:
    """Request-body fields that force exactly `token_ids` (the tokenizer's ids of `raw_text`) with an
    llguidance lark grammar naming each token (`<[id]>`), which also matches added tokens that a
    regex over their text cannot; the text rides along as the grammar's first line, a comment
    (`token_grammar_text` reads it back). The generated token ids are asked for too."""
    if not token_ids:
        raise ForcingUnsupported("an empty output cannot be forced with a token grammar")
    grammar = f"{_GRAMMAR_TEXT_LINE}{json.dumps(raw_text)}\nstart: " + " ".join(f"<[{int(i)}]>" for i in token_ids)
    return {"structured_outputs": {"grammar": grammar}, "return_token_ids": True}


def token_grammar_text(grammar: str) -> str | None:
    """The raw text a `token_grammar_body` grammar forces (None: not such a grammar)."""
    first_line = grammar.partition("\n")[0]
    if not first_line.startswith(_GRAMMAR_TEXT_LINE):
        return None
    try:
        text = parse_json(first_line.removeprefix(_GRAMMAR_TEXT_LINE))
    except json.JSONDecodeError:
        return None
    return text if isinstance(text, str) else None


def token_ids_of(response: dict, choice: int = 0) -> list[int] | None:
    """The generated token ids of a non-streaming response (None: the server returned none)."""
    choices = response.get("choices") or []
    if choice >= len(choices):
        return None
    ids = choices[choice].get("token_ids")
    return list(ids) if ids is not None else None


def token_ids_of_stream(chunks: Iterable[dict], choice: int = 0) -> list[int] | None:
    """The generated token ids of a stream, concatenated over its chunks (None: none returned)."""
    collected: list[int] | None = None
    for chunk in chunks:
        for entry in chunk.get("choices") or []:
            if entry.get("index", 0) == choice and entry.get("token_ids") is not None:
                if collected is None:
                    collected = []
                collected.extend(entry["token_ids"])  # in place: a copy per chunk was quadratic in the stream's length
    return collected


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class ServerTokenizer:
    """A server's own tokenizer through its `/tokenize` and `/detokenize` endpoints (vLLM's), asked on
    the run's event loop, every answer remembered: within a run each marker is asked for once, and
    answers that came back with the same token ids (the stream and non-stream of one case, usually)
    are decoded once, also when both ask at the same time (the second waits for the first one's
    answer or error). Requests go over kept-alive connections (`close()` ends them). For one event loop."""

    def __init__(self, root_url: str, model: str, api_key: str | None = None, timeout: float = 60) -> None:
        self.model = model
        self._answers: dict[tuple[str, Any], Any] = {}  # (path, text or ids) -> the answer's value
        self._asking: dict[tuple[str, Any], asyncio.Future] = {}  # asked, no answer yet
        self._connections = KeptAliveJson(root_url, timeout, api_key)

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens added)."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return list(await self._answer(("/tokenize", text), body, "tokens"))

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids`."""
        key = tuple(token_ids)
        return await self._answer(("/detokenize", key), {"model": self.model, "tokens": list(key)}, "prompt")

    async def render_chat(self, messages: Sequence[Any], tools: Sequence[Any] | None) -> str:
        """The prompt the server renders for a conversation (its chat template, generation prompt added):
        the ids of its /tokenize for `messages`, decoded by its /detokenize."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "add_generation_prompt": True}
        if tools:
            body["tools"] = list(tools)
        ids = await self._answer(("/tokenize", ("chat", json.dumps(body, sort_keys=True))), body, "tokens")
        return await self.detokenize(ids)

    async def _answer(self, key: tuple[str, Any], body: dict, field: str) -> Any:
        """The `field` of the server's answer to `body` at path key[0], asked at most once per key."""
        while (asking := self._asking.get(key)) is not None:  # another task asks: its answer or its error
            try:
                return await asyncio.shield(asking)
            except asyncio.CancelledError:
                if not asking.cancelled() or _being_cancelled():
                    raise  # this task was cancelled (perhaps together with the one that asked)
                # the one that asked gave up (its own timeout): ask again
        if key in self._answers:
            return self._answers[key]
        asking = self._asking[key] = asyncio.get_running_loop().create_future()
        try:
            value = (await self._endpoint(key[0], body))[field]
        except asyncio.CancelledError:
            asking.cancel()
            raise
        except BaseException as exc:  # handed to the waiters too, then raised
            asking.set_exception(exc)
            asking.exception()  # retrieved: nobody may be waiting
            raise
        else:
            self._answers[key] = value
            asking.set_result(value)
        finally:  # whatever happens, the question is settled and no longer under way
            del self._asking[key]
        return value

    def close(self) -> None:
        self._connections.close()

    def __enter__(self) -> ServerTokenizer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def _endpoint(self, path: str, body: dict) -> dict:
        try:
            return await self._connections.post_json(path, body)
        except urllib.error.HTTPError as error:
            if error.code in (404, 405):
                raise ForcingUnsupported(f"the server has no {path[1:]} endpoint to verify tokens") from error
            raise ServerRefused(f"{path}: {http_error_text(error)}") from error


async def verify_forced_output(
    tokenizer: ServerTokenizer,
    raw_text: str,
    token_ids: Sequence[int] | None,
    markers: Sequence[str] = PROBE_MARKERS,
    truncated: bool = False,
) -> list[str]:
    """Problems with a forced output (empty list: the text is exact and canonically tokenized).
    `truncated`: generation stopped early (finish_reason `length`), so a prefix of the text is right.

    Raises ForcingUnsupported when the server returned no token ids or has no tokenizer endpoints.
    """
    if token_ids is None:
        raise ForcingUnsupported("the server returned no token_ids (it does not support vLLM's return_token_ids)")
    problems: list[str] = []
    decoded = await tokenizer.detokenize(token_ids) if truncated else None
    if decoded is not None and raw_text.startswith(decoded):
        raw_text = decoded  # the markers to find are those of the part that was generated
    elif not await _decodes_to(tokenizer, token_ids, raw_text):
        expected = "a prefix of " if truncated else ""
        problems.append(f"the output is not {expected}the forced text: expected {raw_text!r}, "
                        f"got {await tokenizer.detokenize(token_ids)!r}")
    for marker in markers:
        occurrences = raw_text.count(marker)
        if not occurrences:
            continue
        ids = await tokenizer.tokenize(marker)
        if len(ids) != 1:
            problems.append(f"marker {marker!r} is not a single token in this tokenizer: {ids}")
            continue
        emitted = list(token_ids).count(ids[0])
        if emitted != occurrences:
            problems.append(
                f"marker {marker!r} occurs {occurrences} time(s) in the text but its token "
                f"{ids[0]} was emitted {emitted} time(s): the engine spelled it with other tokens"
            )
    return problems


async def _decodes_to(tokenizer: ServerTokenizer, token_ids: Sequence[int], text: str) -> bool:
    """Whether the ids, or all but the last (a stop token), decode to `text`. All but the last are
    asked first: forced outputs usually end in the stop token, so one question settles it."""
    return bool(token_ids) and await tokenizer.detokenize(token_ids[:-1]) == text \
        or await tokenizer.detokenize(token_ids) == text


def send_forced_probe(root_url: str, body: dict[str, Any], timeout: float, api_key: str | None) -> Any:
    """The parsed answer to a forcing probe's chat request (blocking): a 400/422 is ForcingUnsupported
    (the server read the forced request and refused it), any other HTTP error ServerRefused."""
    try:
        return post_json(root_url + "/v1/chat/completions", body, timeout, api_key)
    except urllib.error.HTTPError as error:
        if error.code in REFUSED_FORCING_STATUSES:
            raise ForcingUnsupported(f"the server refused a forced request: {http_error_text(error)}") from error
        raise ServerRefused(http_error_text(error)) from error


async def regex_fields(text: str, tokenizer: ServerTokenizer) -> dict:
    """The forcing fields of `text` for vLLM's regex forcing (the tokenizer is not asked)."""
    return forcing_extra_body(text)


async def probe_forcing(root_url: str, model: str, timeout: float = 120, api_key: str | None = None,
                        fields: Callable[[str, ServerTokenizer], Awaitable[dict]] = regex_fields,
                        text: str = PROBE_TEXT, markers: Sequence[str] = PROBE_MARKERS) -> None:
    """Send one small forced request (its forcing `fields` for the probe text, made with the server's
    tokenizer where needed; default: the regex); raise ForcingUnsupported with the reason if the
    server cannot force, ServerRefused (an HTTP error about the setup) or OSError/ValueError if it
    cannot tell."""
    with ServerTokenizer(root_url, model, api_key, timeout) as tokenizer:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "Say ok."}],
            "max_tokens": 64,
            "temperature": 0,
            **await fields(text, tokenizer),
        }
        response = await in_daemon_thread(timeout, send_forced_probe, root_url, body, timeout, api_key)
        problems = await verify_forced_output(tokenizer, text, token_ids_of(response), markers)
    if problems:
        raise ForcingUnsupported(
            "the server did not honour a forced output (a vLLM server with a reasoning parser needs "
            """--structured-outputs-config '{"enable_in_reasoning": true}'): """ + "; ".join(problems)
        )


async def verify_forcing(tokenizer: ServerTokenizer, case: Case, transcript: Transcript,
                         markers: Sequence[str]) -> list[str] | None:
    """Problems with a forced output that came back (see `conformance.servers.forcing.verify_forced_output`),
    checking through the server's `tokenizer` (a `ServerTokenizer`, one per run) that each of `markers`
    in the text was emitted as its single token; None when it cannot be verified (no token ids, no
    tokenizer endpoints, an unreachable server, answers of another shape)."""
    try:  # an answer of the wrong shape cannot be verified; judging reports it as a `response_shape` fail
        if is_stream(transcript.mode):
            reading = read_stream(transcript)
            token_ids, message = token_ids_of_stream(reading.chunks), reading.message
        else:
            token_ids, message = token_ids_of(transcript.response or {}), response_message(transcript)
        # Non-streaming answers report `tool_calls`, not `length`, for a call parsed from a cut output
        # (contract 3.5), so a cut is also told by the token count reaching the request's limit.
        limit = transcript.request.get("max_completion_tokens") or transcript.request.get("max_tokens")
        truncated = (message is not None and message.finish_reason == "length") or bool(
            limit and token_ids and len(token_ids) >= limit)
        return await verify_forced_output(tokenizer, case.force, token_ids, markers, truncated=truncated)
    except (ForcingUnsupported, ServerRefused, OSError, ValueError, LookupError, TypeError, AttributeError):
        return None
