"""A checkpoint's JSON files read as untrusted input: bounded in size and depth, every failure a
`FetchError` of one kind naming the file (and the position), with what vLLM itself stops with where it
cannot even read the file. The same reader serves a checkpoint on disk, a cached Hub download and a
served checkpoint's markers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.util.files import FileTooLarge, open_regular
from conformance.util.safe_yaml import UnreadableFile, read_text

TOKENIZER_CONFIG = "tokenizer_config.json"
MODEL_CONFIG = "config.json"  # its `model_type` changes what a server does (vLLM 0.32: gpt_oss means harmony)
GENERATION_CONFIG = "generation_config.json"  # its `eos_token_id`: the tokens generation stops on
TOKENIZER = "tokenizer.json"  # its `added_tokens` give the texts of special token ids
MAX_FILE_BYTES = 5 * 1024 * 1024
OK = "ok"  # a checkpoint fetched and read; otherwise it ends in one of these failure kinds:
NOT_FOUND, UNAUTHORIZED, GATED = "not_found", "unauthorized", "gated"
SERVER_ERROR, TIMEOUT, NETWORK_ERROR = "server_error", "timeout", "network_error"
TOO_LARGE, INVALID_JSON, NOT_CACHED, UNREADABLE = "too_large", "invalid_json", "not_cached", "unreadable"
TOO_DEEP = "too_deep"  # JSON nested past MAX_JSON_DEPTH levels


class FetchError(Exception):
    """`startup_error`: what vLLM itself stops with on such a file, when it cannot even read it."""

    def __init__(self, kind: str, message: str, startup_error: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.startup_error = kind, startup_error


MAX_JSON_DEPTH = 100  # deeper values cannot be handed to the analysis worker (pickle recurses per level)


def read_json_file(path: Path, name: str) -> Any:
    """Parse a checkpoint JSON file; an unreadable file, oversize or invalid JSON become FetchErrors naming the
    file (and the position). JSON that transformers itself cannot read (not UTF-8, an integer past Python's
    digit limit) carries transformers' error as the `startup_error`."""
    try:
        text = read_text(path, MAX_FILE_BYTES, "a checkpoint file")
    except UnreadableFile as exc:
        if isinstance(exc.__cause__, FileTooLarge) and (failure := too_large(name, exc.__cause__.size)):
            raise failure from exc
        if isinstance(exc.__cause__, OSError):  # missing, a directory, a FIFO or a device, no permission
            raise FetchError(UNREADABLE, f"{name}: {exc}") from exc
        raise FetchError(INVALID_JSON, f"{name}: {exc}", startup_error=_transformers_read_error(path)) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FetchError(INVALID_JSON, f"{name}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except RecursionError as exc:  # untrusted input: arrays/objects nested thousands deep
        raise FetchError(INVALID_JSON, f"{name}: JSON nested too deeply to read") from exc
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise FetchError(INVALID_JSON, f"{name}: unreadable JSON value: {exc}",
                         startup_error=_transformers_read_error(path)) from exc
    if (depth := _depth(data)) > MAX_JSON_DEPTH:
        raise FetchError(TOO_DEEP, f"{name}: JSON nested {depth} levels deep, over the {MAX_JSON_DEPTH}-level limit")
    return data


def _transformers_read_error(path: Path) -> str | None:
    """The error of reading `path` as transformers 5.19 does (`json.load(open(path, encoding="utf-8"))`)."""
    try:
        with open(path, encoding="utf-8") as reader:
            json.load(reader)
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _depth(value: Any) -> int:
    """How many arrays/objects deep `value` nests (iterative: the value may be deeper than the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def read_tokenizer_config(path: Path) -> dict:
    data = read_json_file(path, TOKENIZER_CONFIG)
    if not isinstance(data, dict):
        raise FetchError(INVALID_JSON, f"{TOKENIZER_CONFIG}: top level is a JSON {type(data).__name__}, expected an object")
    return data


def too_large(filename: str, size: int | None) -> FetchError | None:
    if size is not None and size > MAX_FILE_BYTES:
        return FetchError(TOO_LARGE, f"{filename} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit")
    return None


def read_model_type(path: Path) -> str | None:
    """The `model_type` of a checkpoint's config.json (None: it has none); FetchError as `read_json_file`."""
    data = read_json_file(path, MODEL_CONFIG)
    value = data.get("model_type") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def read_stop_token_ids(path: Path) -> tuple[int, ...]:
    """The token ids generation stops on, as generation_config.json's `eos_token_id` gives them (one id or a
    list); FetchError as `read_json_file`."""
    data = read_json_file(path, GENERATION_CONFIG)
    ids = data.get("eos_token_id") if isinstance(data, dict) else None
    ids = [ids] if isinstance(ids, int) else ids if isinstance(ids, list) else []
    return tuple(value for value in ids if isinstance(value, int) and not isinstance(value, bool))


def read_added_tokens(path: Path) -> dict[int, str]:
    """tokenizer.json's added tokens, id -> text (see `read_added_token_entries`)."""
    return {token_id: content for token_id, (content, _) in read_added_token_entries(path).items()}


def read_added_token_entries(path: Path) -> dict[int, tuple[str, bool]]:
    """tokenizer.json's added tokens, id -> (text, whether special), read from its first MAX_FILE_BYTES bytes only:
    the list comes before the vocabulary, which makes the file itself far larger (Gemma's: tens of MB). A list
    that does not end within those bytes, or cannot be read, gives none; an unreadable file is an OSError."""
    with open_regular(path, 2**63 - 1, "a tokenizer") as handle:
        head = handle.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    key = head.find('"added_tokens"')
    start = head.find("[", key) if key != -1 else -1
    if start == -1 or head[head.find(":", key) + 1:start].strip():
        return {}
    try:
        tokens, _ = json.JSONDecoder().raw_decode(head, start)
    except (ValueError, RecursionError):
        return {}
    return {token["id"]: (token["content"], token.get("special") is True) for token in tokens
            if isinstance(token, dict) and isinstance(token.get("id"), int) and isinstance(token.get("content"), str)
            } if isinstance(tokens, list) else {}
