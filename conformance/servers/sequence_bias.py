"""Forcing an exact output on `transformers serve` through `generation_config.sequence_bias`.

`transformers serve` refuses vLLM's `structured_outputs` (422) but takes a request field
`generation_config`, a JSON string that replaces the model's generation config. Its
`sequence_bias` adds a bias to a token whenever the tokens before it end with a given context, so
the forced token ids T (the checkpoint tokenizer's ids of the text, then the end-of-sequence token)
are forced one step at a time: for step i the key is the w tokens before T[i] (the prompt's tail
included, so even the first step has a context) plus T[i], biased by 1e6 (1e4 does not beat the tiny
checkpoint's longest-token logits). w starts at 8 and grows, per step, until that context precedes
no other step that wants another token (two equal tool calls need a context reaching back before
the first). Greedy decoding then emits exactly T and stops on its end token.

The keys need the prompt's token ids, and `transformers serve` has no tokenize route: the prompt is
rendered here with the checkpoint's own tokenizer and chat template, from the messages as the
server hands them to its template (`served_messages`, transformers 5.23's conversion for text
models). `CheckpointTokenizer` loads that tokenizer from the served model's directory (the model
name `transformers serve` is pinned to is the path it was given).

Verification (`verify_answer`): the server returns no token ids, so the check is exact in another
way: `usage.prompt_tokens` must equal the length of the prompt rendered here (else the contexts were
computed on another prompt), and `usage.completion_tokens` must equal the number of forced tokens
(the end token included; a cut output: the request's limit). Greedy decoding under these biases
leaves the forced path only if some step's bias failed, and off the path no key matches again, so
the end token does not come at that count; the text the server parsed is judged by the case itself.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conformance.formats.markers import CheckpointError, markers_for_checkpoint
from conformance.formats.registry import DEFAULT_FORMAT
from conformance.record.case_model import is_stream
from conformance.record.wire import read_stream
from conformance.servers.forcing import ForcingUnsupported, send_forced_probe
from conformance.util.json_codec import parse_json

FORCING_BIAS = 1e6
FIRST_CONTEXT_WIDTH = 8
EXTRA_NEW_TOKENS = 4  # max_new_tokens = forced tokens + this: a stray step shows as a longer output
PROBE_REQUEST = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 64}
PROBE_TEXT = DEFAULT_FORMAT.probe_text


def served_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as transformers serve 5.23 renders them for a text model: role, the text parts
    of the content (none when the message has tool calls), tool calls with their arguments parsed
    from JSON, tool_call_id; nothing else (a message's `reasoning` is dropped)."""
    served = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": []}
        if "tool_calls" in message:
            calls = []
            for call in copy.deepcopy(list(message["tool_calls"])):
                function = call.get("function") or call
                if isinstance(function.get("arguments"), str):
                    function["arguments"] = parse_json(function["arguments"])
                calls.append(call)
            item["tool_calls"] = calls
        if "tool_call_id" in message:
            item["tool_call_id"] = message["tool_call_id"]
        content = [] if "tool_calls" in message else (message.get("content") or [])
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        item["content"] = [{"type": "text", "text": part["text"]} for part in content
                           if part.get("type") in ("text", "input_text", "output_text")]  # fmt: skip
        served.append(item)
    return served


class CheckpointTokenizer:
    """The served checkpoint's tokenizer and chat template, loaded from its directory."""

    def __init__(self, model: str) -> None:
        from transformers import AutoTokenizer

        if not Path(model).is_dir():
            raise ForcingUnsupported(f"sequence-bias forcing needs the served checkpoint's tokenizer, and the "
                                     f"model {model!r} is not a local directory")

        self.model = model
        self._tokenizer = AutoTokenizer.from_pretrained(model)
        try:  # the checkpoint's own delimiters, each of which must be forced as its single token
            self.markers = markers_for_checkpoint(Path(model))
        except CheckpointError as exc:
            raise OSError(str(exc)) from exc

    @property
    def end_token_id(self) -> int:
        return int(self._tokenizer.eos_token_id)

    def tokenize(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(token_ids))

    def prompt_ids(self, request: Mapping[str, Any]) -> list[int]:
        """The token ids of the prompt transformers serve renders for a Chat Completions `request`."""
        rendered = self._tokenizer.apply_chat_template(
            served_messages(request.get("messages") or []), tools=request.get("tools"), add_generation_prompt=True,
            tokenize=False, **(request.get("chat_template_kwargs") or {}))  # fmt: skip
        return self.tokenize(rendered)

    def close(self) -> None:
        """Nothing to release (the protocol's tokenizers are closed at the end of a run)."""


@functools.lru_cache(maxsize=4)
def _cached_tokenizer(model: str) -> CheckpointTokenizer:
    """One tokenizer per checkpoint for reading recorded requests back (a report reads many)."""
    return CheckpointTokenizer(model)


def forced_ids(tokenizer: CheckpointTokenizer, raw_text: str) -> list[int]:
    """The ids forced for `raw_text`: the tokenizer's own, each marker one token, then the end token."""
    ids = tokenizer.tokenize(raw_text)
    if tokenizer.detokenize(ids) != raw_text:
        raise ValueError(f"the checkpoint's tokenizer does not give back {raw_text!r} from its own ids")
    for marker in tokenizer.markers:
        marker_ids = tokenizer.tokenize(marker)
        if raw_text.count(marker) and (len(marker_ids) != 1 or ids.count(marker_ids[0]) != raw_text.count(marker)):
            raise ValueError(f"marker {marker!r} is not spelled as its single token in the forced ids")
    return [*ids, tokenizer.end_token_id]


def bias_keys(prompt: Sequence[int], target: Sequence[int]) -> tuple[int, list[list[Any]]]:
    """(the widest context used, the `sequence_bias` entries [[context, T[i]], bias], one per step in
    order) forcing `target` after `prompt`. Each step's context is the shortest run of tokens before
    it, from FIRST_CONTEXT_WIDTH up, that precedes no other step with another next token (so no key
    fires where it must not); ValueError when even the whole sequence before a step does."""
    sequence = [*prompt, *target]
    steps = range(len(prompt), len(sequence))
    keys, widest = [], 0
    for i in steps:
        rivals = [j for j in steps if sequence[j] != sequence[i]]
        width = next((w for w in range(FIRST_CONTEXT_WIDTH, i + 1)
                      if all(j < w or sequence[j - w:j] != sequence[i - w:i] for j in rivals)), None)
        if width is None:
            raise ValueError(f"no run of tokens before forced step {i - len(prompt)} tells it apart from another")
        keys.append([[*sequence[i - width:i], sequence[i]], FORCING_BIAS])
        widest = max(widest, width)
    return widest, keys


def generation_config_field(tokenizer: CheckpointTokenizer, raw_text: str, request: Mapping[str, Any]) -> dict:
    """The request field that forces `raw_text` for `request`: {"generation_config": JSON string}."""
    target = forced_ids(tokenizer, raw_text)
    _, keys = bias_keys(tokenizer.prompt_ids(request), target)
    config = {"do_sample": False, "max_new_tokens": len(target) + EXTRA_NEW_TOKENS, "sequence_bias": keys,
              "eos_token_id": [tokenizer.end_token_id]}  # fmt: skip
    return {"generation_config": json.dumps(config)}


def forced_text_of(request: Mapping[str, Any], tokenizer: CheckpointTokenizer | None = None) -> str | None:
    """The raw text a recorded request forced (its bias keys' last tokens, the end token left out),
    decoded with `tokenizer` (default: the one of the request's model); None: not forced so."""
    try:
        config = parse_json(request.get("generation_config") or "null")
        keys = config["sequence_bias"] if isinstance(config, dict) else None
        if not isinstance(keys, list):
            return None
        tokenizer = tokenizer or _cached_tokenizer(str(request.get("model")))
        steps = [key[0][-1] for key in keys]  # one key per step, in order
        end = config.get("eos_token_id") or []
        return tokenizer.detokenize([token for token in steps if token not in end])
    except (ValueError, TypeError, KeyError, IndexError, OSError, ForcingUnsupported):
        return None


def verify_answer(tokenizer: CheckpointTokenizer, raw_text: str, request: Mapping[str, Any],
                  usage: Mapping[str, Any] | None) -> list[str]:
    """Problems with a forced answer, from its `usage` (empty: the forced tokens and only they were
    generated, see the module docstring). `request` is the body sent."""
    if not isinstance(usage, Mapping):
        return ["the answer has no usage to count its tokens"]
    problems = []
    prompt = tokenizer.prompt_ids(request)
    if usage.get("prompt_tokens") != len(prompt):
        problems.append(f"the server's prompt has {usage.get('prompt_tokens')} tokens, the one the forcing keys "
                        f"were computed on {len(prompt)}")
    wanted = len(forced_ids(tokenizer, raw_text))
    limit = request.get("max_completion_tokens") or request.get("max_tokens")
    if limit:
        wanted = min(wanted, int(limit))
    if usage.get("completion_tokens") != wanted:
        problems.append(f"{usage.get('completion_tokens')} tokens were generated, {wanted} forced "
                        f"(the text and its end token)")
    return problems


def verify_transcript(tokenizer: CheckpointTokenizer, raw_text: str, transcript: Any) -> list[str]:
    """`verify_answer` on a recorded answer: the usage of a non-streaming body, or of the stream's
    last chunk that carries one."""
    if is_stream(transcript.mode):
        usages = [chunk.get("usage") for chunk in read_stream(transcript).chunks if chunk.get("usage")]
        usage = usages[-1] if usages else None
    else:
        usage = (transcript.response or {}).get("usage")
    return verify_answer(tokenizer, raw_text, transcript.request, usage)


def probe_sequence_bias(root_url: str, model: str, timeout: float = 120, api_key: str | None = None,
                        text: str = PROBE_TEXT) -> None:
    """One small forced request: ForcingUnsupported when the server refuses it (400/422) or does not
    generate the forced tokens, ServerRefused (an HTTP error about the setup) or OSError/ValueError
    when it cannot tell."""
    tokenizer = CheckpointTokenizer(model)
    body = {"model": model, **PROBE_REQUEST, **generation_config_field(tokenizer, text, PROBE_REQUEST)}
    response = send_forced_probe(root_url, body, timeout, api_key)
    if problems := verify_answer(tokenizer, text, body, response.get("usage")):
        raise ForcingUnsupported("the server did not generate the forced tokens: " + "; ".join(problems))
