"""A tiny servable clone of any checkpoint (`conformance fixture build DIR --from CHECKPOINT`).

From the source's files (read as untrusted input, bounded: `checkpoint_files`) the clone keeps what its
servers' parsers see: the chat template (`chat_template.jinja`, else `chat_template.json`, else
tokenizer_config.json's `chat_template`) and the `response_template`, byte for byte; every token of
`added_tokens_decoder` (special or not, as there); every literal delimiter of both templates as one token
(`markers.template_delimiters`); its end tokens (tokenizer_config.json's `eos_token`, generation_config.json's
`eos_token_id` where the source's own files name their texts) and its `model_type` where a server decides by
it and the tiny body still loads. The body, the vocabulary and the token ids are the tiny checkpoint's
(`tiny_checkpoint`): tokenizer.json and weights are optional in the source, and only its added tokens are
read. A source that cannot be read raises `CloneInputError` naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from conformance.formats.checkpoint_files import (
    GENERATION_CONFIG,
    MAX_FILE_BYTES,
    MODEL_CONFIG,
    TOKENIZER,
    TOKENIZER_CONFIG,
    FetchError,
    read_added_token_entries,
    read_json_file,
    read_tokenizer_config,
)
from conformance.formats.format import Format
from conformance.formats.markers import template_delimiters
from conformance.formats.response_template import TEMPLATE_KEY, check_serving, load_template
from conformance.formats.tiny_checkpoint import build_checkpoint, model_type_refused
from conformance.util.files import write_atomically
from conformance.util.safe_yaml import UnreadableFile, read_text

CHAT_TEMPLATE_FILE, CHAT_TEMPLATE_JSON = "chat_template.jinja", "chat_template.json"
SOURCE_FILES = (TOKENIZER_CONFIG, CHAT_TEMPLATE_FILE, CHAT_TEMPLATE_JSON, MODEL_CONFIG, GENERATION_CONFIG, TOKENIZER)
MAX_ADDED_TOKENS = 20_000  # each is an embedding row of the clone
MAX_TOKEN_CHARS = 256


class CloneInputError(ValueError):
    """A source file the clone cannot be built from; the message names the file and the field."""


@dataclass
class Clone:
    """What a clone kept of its source (`notes`: what it could not keep, and why)."""

    directory: Path
    special_tokens: tuple[str, ...]
    delimiter_tokens: tuple[str, ...]
    stop_tokens: tuple[str, ...]
    model_type: str
    notes: list[str] = field(default_factory=list)


def source_files(directory: Path) -> dict[str, Path]:
    """The source files a local checkpoint directory holds (a name present but not a regular file is kept, so
    reading it says why it cannot be read)."""
    return {name: directory / name for name in SOURCE_FILES if (directory / name).exists()
            or (directory / name).is_symlink()}


@dataclass
class Source:
    """What a checkpoint's files say of its format: the record (`form`, named "clone"), its response_template
    as written, the tokenizer settings a clone keeps and what it could not keep (`notes`)."""

    form: Format
    response_template: dict[str, Any] | None
    settings: dict[str, Any]
    notes: list[str]


def read_source(files: Mapping[str, Path], source: str) -> Source:
    """The format of the checkpoint whose files (name -> path) are `files`; `source` names the checkpoint in
    messages. CloneInputError for a source that cannot be read."""
    if TOKENIZER_CONFIG not in files:
        raise CloneInputError(f"{source}: no {TOKENIZER_CONFIG}")
    config = _read(lambda: read_tokenizer_config(files[TOKENIZER_CONFIG]), source)
    notes: list[str] = []
    response_template = config.get(TEMPLATE_KEY)
    if response_template is not None and not isinstance(response_template, dict):
        _refuse(source, TOKENIZER_CONFIG, TEMPLATE_KEY, f"a JSON {type(response_template).__name__}, not an object")
    if response_template is None:
        notes.append(f"the source has no {TEMPLATE_KEY}: neither has the clone (vLLM's hf parsers refuse it)")
    else:
        try:
            check_serving(load_template(response_template))
        except (ValueError, TypeError) as exc:
            notes.append(f"vLLM 0.32's hf parsers will refuse this {TEMPLATE_KEY}: {exc}")
    chat_templates = _chat_templates(files, config, source)
    added = _added_tokens(files, config, source)
    special = [content for content, is_special in added.values() if is_special]
    plain = [content for content, is_special in added.values() if not is_special]
    named = {key: _token_text(config, key, source) for key in ("eos_token", "pad_token", "bos_token")}
    stops = _stop_tokens(files, source, {token_id: content for token_id, (content, _) in added.items()}, notes)
    eos = named["eos_token"] or (stops[0] if stops else None)
    if eos is None:
        _refuse(source, TOKENIZER_CONFIG, "eos_token", "missing, and no end token named by "
                f"{GENERATION_CONFIG}'s eos_token_id: the clone needs one")
    pad = named["pad_token"] or eos
    special += [token for token in (eos, pad, named["bos_token"], *stops) if token and token not in special + plain]
    default_template = chat_templates.get("default") if chat_templates else None
    delimiters = template_delimiters(response_template, "\n".join((chat_templates or {}).values()), special + plain)
    model_type = _model_type(files, source, notes)
    form = Format(
        name="clone", description=f"a tiny clone of {source}", provenance=source, chat_template=default_template,
        response_template=response_template or {}, delimiter_tokens=tuple(dict.fromkeys([*plain, *delimiters])),
        special_tokens=tuple(dict.fromkeys(special)), eos_token=eos, pad_token=pad, probe_text="", legacy_flags=(),
        variants=(), model_type=model_type, stop_tokens=tuple(dict.fromkeys(stops or [eos])))
    settings: dict[str, Any] = {"bos_token": named["bos_token"]} if named["bos_token"] else {}
    if chat_templates and set(chat_templates) != {"default"}:
        settings["chat_template"] = chat_templates
    if chat_templates is None:
        notes.append("the source has no chat template: neither has the clone (chat requests need one)")
    return Source(form, response_template, settings, notes)


def clone_checkpoint(files: Mapping[str, Path], directory: Path, source: str) -> Clone:
    """Write the tiny clone of the checkpoint whose files (name -> path) are `files` into `directory`;
    `source` names the checkpoint in messages. CloneInputError for a source that cannot be read."""
    read = read_source(files, source)
    form = read.form
    build_checkpoint(directory, form, read.response_template, read.settings)
    if read.response_template is not None:
        _keep_key_order(Path(directory) / TOKENIZER_CONFIG, read.response_template)
    return Clone(Path(directory), form.special_tokens, form.delimiter_tokens, form.stop_tokens, form.model_type,
                 read.notes)


def _keep_key_order(path: Path, response_template: dict) -> None:
    """Put the source's response_template back as written (transformers saves every key sorted; a template's
    order of fields is the source's to keep)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config[TEMPLATE_KEY] = response_template
    write_atomically(path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _refuse(source: str, filename: str, where: str, problem: str) -> NoReturn:
    raise CloneInputError(f"{source}/{filename}: {where}: {problem}")


def _read(reader: Callable[[], Any], source: str) -> Any:
    try:
        return reader()
    except FetchError as exc:  # it names the file (and the position)
        raise CloneInputError(f"{source}/{exc}") from exc


def _chat_templates(files: Mapping[str, Path], config: dict, source: str) -> dict[str, str] | None:
    """The source's chat templates by name ("default" first), as transformers picks them (None: it has none)."""
    if CHAT_TEMPLATE_FILE in files:
        try:
            return {"default": read_text(files[CHAT_TEMPLATE_FILE], MAX_FILE_BYTES, "a chat template")}
        except UnreadableFile as exc:
            raise CloneInputError(f"{source}/{CHAT_TEMPLATE_FILE}: {exc}") from exc
    if CHAT_TEMPLATE_JSON in files:
        data = _read(lambda: read_json_file(files[CHAT_TEMPLATE_JSON], CHAT_TEMPLATE_JSON), source)
        value = data.get("chat_template") if isinstance(data, dict) else None
        return _named_templates(value, source, CHAT_TEMPLATE_JSON) if value is not None else _refuse(
            source, CHAT_TEMPLATE_JSON, "chat_template", "missing (the file holds an object with this key)")
    value = config.get("chat_template")
    return None if value is None else _named_templates(value, source, TOKENIZER_CONFIG)


def _named_templates(value: Any, source: str, filename: str) -> dict[str, str]:
    """A chat template, or a list of `{"name", "template"}` entries, as templates by name."""
    if isinstance(value, str):
        return {"default": value}
    if not isinstance(value, list) or not value:
        _refuse(source, filename, "chat_template", "neither a string nor a list of {name, template} objects")
    named: dict[str, str] = {}
    for index, entry in enumerate(value):
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("template"), str)):
            _refuse(source, filename, f"chat_template[{index}]", "not an object with a string name and template")
        named[entry["name"]] = entry["template"]
    return dict(sorted(named.items(), key=lambda item: item[0] != "default"))


def _added_tokens(files: Mapping[str, Path], config: dict, source: str) -> dict[int, tuple[str, bool]]:
    """The source's added tokens by id, (content, special): tokenizer_config.json's added_tokens_decoder, and
    tokenizer.json's added tokens (transformers 5 writes them there only)."""
    decoder = config.get("added_tokens_decoder", {})
    if not isinstance(decoder, dict):
        _refuse(source, TOKENIZER_CONFIG, "added_tokens_decoder", "not an object of token id -> token")
    tokens: dict[int, tuple[str, bool]] = {}
    for key, entry in decoder.items():
        where = f"added_tokens_decoder.{key}"
        if not key.isdigit() or len(key) > 12:
            _refuse(source, TOKENIZER_CONFIG, where, "the key is not a token id")
        content = entry.get("content") if isinstance(entry, dict) else None
        if not isinstance(content, str) or not 0 < len(content) <= MAX_TOKEN_CHARS:
            _refuse(source, TOKENIZER_CONFIG, f"{where}.content", f"not a string of 1 to {MAX_TOKEN_CHARS} characters")
        if not isinstance(entry.get("special", False), bool):
            _refuse(source, TOKENIZER_CONFIG, f"{where}.special", "not true or false")
        tokens[int(key)] = (content, entry.get("special", False))
    if TOKENIZER in files:
        try:
            listed = read_added_token_entries(files[TOKENIZER])
        except OSError as exc:
            raise CloneInputError(f"{source}/{TOKENIZER}: cannot read: {exc.strerror or exc}") from exc
        for token_id, (content, special) in listed.items():
            if not 0 < len(content) <= MAX_TOKEN_CHARS:
                _refuse(source, TOKENIZER, f"added_tokens (id {token_id}).content",
                        f"not a string of 1 to {MAX_TOKEN_CHARS} characters")
            tokens.setdefault(token_id, (content, special))
    if len(tokens) > MAX_ADDED_TOKENS:
        _refuse(source, TOKENIZER_CONFIG, "added_tokens_decoder", f"{len(tokens)} added tokens (with tokenizer.json's), "
                f"over the {MAX_ADDED_TOKENS}-token limit")
    return dict(sorted(tokens.items()))


def _token_text(config: dict, key: str, source: str) -> str | None:
    """A named token of tokenizer_config.json (a string, or an object with its `content`), None when absent."""
    value = config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
        key = f"{key}.content"
    if value is not None and not (isinstance(value, str) and 0 < len(value) <= MAX_TOKEN_CHARS):
        _refuse(source, TOKENIZER_CONFIG, key, f"not a token (a string of 1 to {MAX_TOKEN_CHARS} characters)")
    return value


def _stop_tokens(files: Mapping[str, Path], source: str, texts: Mapping[int, str], notes: list[str]) -> list[str]:
    """The texts of generation_config.json's `eos_token_id`, as the source's added tokens (`texts`) name those ids."""
    if GENERATION_CONFIG not in files:
        return []
    data = _read(lambda: read_json_file(files[GENERATION_CONFIG], GENERATION_CONFIG), source)
    ids = data.get("eos_token_id") if isinstance(data, dict) else None
    ids = [] if ids is None else [ids] if isinstance(ids, int) else ids
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        _refuse(source, GENERATION_CONFIG, "eos_token_id", "neither a token id nor a list of token ids")
    if unknown := [i for i in ids if i not in texts]:
        notes.append(f"{GENERATION_CONFIG}: eos_token_id {', '.join(map(str, unknown))} not kept: no added token of "
                     f"the source has that id")
    return list(dict.fromkeys(texts[i] for i in ids if i in texts))


def _model_type(files: Mapping[str, Path], source: str, notes: list[str]) -> str:
    """The source's model_type where the clone can keep it, else qwen3 (with a note saying why)."""
    if MODEL_CONFIG not in files:
        return "qwen3"
    data = _read(lambda: read_json_file(files[MODEL_CONFIG], MODEL_CONFIG), source)
    if not isinstance(data, dict):
        _refuse(source, MODEL_CONFIG, "the top level", f"a JSON {type(data).__name__}, not an object")
    model_type = data.get("model_type")
    if model_type is None:
        return "qwen3"
    if not isinstance(model_type, str) or not 0 < len(model_type) <= MAX_TOKEN_CHARS:
        _refuse(source, MODEL_CONFIG, "model_type", "not a name")
    if reason := model_type_refused(model_type):
        notes.append(f"{MODEL_CONFIG}: model_type {model_type!r} not kept ({reason}): the clone's is 'qwen3'")
        return "qwen3"
    return model_type
