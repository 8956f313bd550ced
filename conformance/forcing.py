"""Make a server emit an exact raw output, and prove it did so with canonical tokens.

vLLM structured outputs force the text: `forcing_extra_body(raw_text)` is the request-body addition
(`structured_outputs.regex` matching exactly `raw_text`, plus `return_token_ids` so the server
returns the generated token ids). Merge it into a Chat Completions body, or pass it as the openai
client's `extra_body`, streaming or not. The server needs `--structured-outputs-config
'{"enable_in_reasoning": true}'` (our launcher sets it), otherwise the regex only applies after
reasoning ends.

A regex fixes the text, not the tokens. `verify_forced_output(root_url, model, raw_text, token_ids)`
checks, through the server's own `/tokenize` and `/detokenize` endpoints, that the returned ids
decode to `raw_text` (a trailing stop token is allowed) and that every marker occurring in the text
(`<think>`, `</tool_call>`, ...) is a single token and was emitted as that token each time. It
returns the list of problems (empty: canonical) so callers can record them. `token_ids_of(response)`
and `token_ids_of_stream(chunks)` collect the ids from a response / from stream chunks (JSON dicts);
`tokenize` / `detokenize` call the server's tokenizer endpoints.

`ForcingUnsupported` says why a server cannot force (no `token_ids` returned, request refused,
text not honoured): the case is then skipped with that reason, never passed.
`probe_forcing(root_url, model)` sends one small forced request to find that out up front.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable, MutableMapping, Sequence

from conformance.fixture import MARKER_TOKENS

DEFAULT_MARKERS = MARKER_TOKENS  # the Qwen3/Hermes delimiters the tiny checkpoint uses too
PROBE_TEXT = "<think>\nok\n</think>\n\nok"

_REGEX_SPECIAL = set("\\.^$|?*+()[]{}-")
_REGEX_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\f": "\\f", "\v": "\\v"}


class ForcingUnsupported(Exception):
    """The server cannot be made to emit an exact raw output (the message says why)."""


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
                collected = (collected or []) + list(entry["token_ids"])
    return collected


def verify_forced_output(
    root_url: str,
    model: str,
    raw_text: str,
    token_ids: Sequence[int] | None,
    markers: Sequence[str] = DEFAULT_MARKERS,
    api_key: str | None = None,
    truncated: bool = False,
    marker_ids: MutableMapping[str, list[int]] | None = None,
) -> list[str]:
    """Problems with a forced output (empty list: the text is exact and canonically tokenized).
    `truncated`: generation stopped early (finish_reason `length`), so a prefix of the text is right.
    `marker_ids`: a cache of the markers' token ids for one server (filled as they are asked for).

    Raises ForcingUnsupported when the server returned no token ids or has no tokenizer endpoints.
    """
    if token_ids is None:
        raise ForcingUnsupported("the server returned no token_ids (it does not support vLLM's return_token_ids)")
    problems: list[str] = []
    decoded = detokenize(root_url, model, token_ids, api_key)
    if truncated and raw_text.startswith(decoded):
        raw_text = decoded  # the markers to find are those of the part that was generated
    elif decoded != raw_text and not (token_ids and detokenize(root_url, model, token_ids[:-1], api_key) == raw_text):
        expected = "a prefix of " if truncated else ""
        problems.append(f"the output is not {expected}the forced text: expected {raw_text!r}, got {decoded!r}")
    known = marker_ids if marker_ids is not None else {}
    for marker in markers:
        occurrences = raw_text.count(marker)
        if not occurrences:
            continue
        ids = known.get(marker)
        if ids is None:
            ids = known[marker] = tokenize(root_url, model, marker, api_key)
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


def probe_forcing(root_url: str, model: str, timeout: float = 120, api_key: str | None = None) -> None:
    """Send one small forced request; raise ForcingUnsupported with the reason if it fails."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say ok."}],
        "max_tokens": 64,
        "temperature": 0,
        **forcing_extra_body(PROBE_TEXT),
    }
    try:
        response = _post_json(root_url + "/v1/chat/completions", body, timeout, api_key)
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", errors="replace")[:500]
        raise ForcingUnsupported(f"the server refused a forced request: HTTP {error.code} {detail}") from error
    problems = verify_forced_output(root_url, model, PROBE_TEXT, token_ids_of(response), api_key=api_key)
    if problems:
        raise ForcingUnsupported(
            "the server did not honour a forced output (a vLLM server with a reasoning parser needs "
            """--structured-outputs-config '{"enable_in_reasoning": true}'): """ + "; ".join(problems)
        )


def tokenize(root_url: str, model: str, text: str, api_key: str | None = None) -> list[int]:
    """Token ids of `text` from the server's own tokenizer (no special tokens added)."""
    body = {"model": model, "prompt": text, "add_special_tokens": False}
    return list(_tokenizer_endpoint(root_url + "/tokenize", body, api_key)["tokens"])


def detokenize(root_url: str, model: str, token_ids: Sequence[int], api_key: str | None = None) -> str:
    """Text of `token_ids` from the server's own tokenizer."""
    body = {"model": model, "tokens": list(token_ids)}
    return _tokenizer_endpoint(root_url + "/detokenize", body, api_key)["prompt"]


def _tokenizer_endpoint(url: str, body: dict, api_key: str | None) -> dict:
    try:
        return _post_json(url, body, 60, api_key)
    except urllib.error.HTTPError as error:
        if error.code in (404, 405):
            raise ForcingUnsupported(f"the server has no {url.rsplit('/', 1)[1]} endpoint to verify tokens") from error
        raise


def _post_json(url: str, body: dict, timeout: float, api_key: str | None) -> dict:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)
