"""The round trip of a checkpoint's two templates: what its chat template writes for an assistant
message, its response_template must parse back into that message.

Each hypothesis example (`conformance.audit.roundtrip.strategies`) is rendered with the chat template the
way `apply_chat_template` renders it (transformers' own renderer, the special tokens as variables,
the tools): the prompt is the conversation up to the generation prompt, the raw output is the rest
of the conversation with the assistant turn, up to the turn's final end-of-turn token (the eos
token, which the server does not hand to the parser). The raw output is parsed with the
response_template by transformers' parser (`parse_response(raw, template, prefix=prompt,
tools=...)`, what `tokenizer.parse_response` calls) and must give the message back, modulo what the
format documents: text fields are stripped (the `text` parser's default), empty fields are left
out, a tool call is compared by name and arguments as JSON values (types included: 3 is not 3.0).
Chunk invariance: the streaming `ResponseParser` fed the same raw text in chunks gives the same message
(or the same error) as a whole, for two kinds of cut of each example: at token boundaries of the
checkpoint's own tokenizer (whole, at its added tokens, one token, random groups: what a server streams;
`conformance.audit.roundtrip.cuts`), then at characters (one character, random sizes, cut inside
every delimiter: stricter than any server). A counterexample says which kind of cut found it.

Counterexamples are hypothesis's shrunk examples, one per kind of failure, each with the exact
prompt and raw text to reproduce it. Runs are deterministic for a seed (no database unless asked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from conformance.audit.roundtrip.cuts import CHARACTER_CUTS, NO_TOKENIZER, TOKEN_CUTS, CutKind, TokenSplitter
from conformance.formats.checkpoint_files import (
    GENERATION_CONFIG,
    MAX_FILE_BYTES,
    TOKENIZER,
    FetchError,
    read_added_tokens,
    read_json_file,
    read_stop_token_ids,
)
from conformance.formats.turn_text import RenderError, Subject, canonical, parse_chunked, parse_whole, render_turn
from conformance.util.files import read_bounded

FailureCode = Literal["roundtrip-render-error", "roundtrip-parse-error", "roundtrip-mismatch", "chunk-variance"]
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")
MAX_INPUTS = 400  # generated outputs kept for the implementations matrix


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]  # an AddedToken written as a dict
    return None


def chat_template_of(tokenizer_config: Mapping[str, Any], files: Mapping[str, Path]) -> str | None:
    """The chat template transformers would use with tools: chat_template.jinja, else chat_template.json's,
    else the tokenizer_config key (a named list: `tool_use`, else `default`)."""
    if "chat_template.jinja" in files:
        raw = read_bounded(Path(files["chat_template.jinja"]), MAX_FILE_BYTES, "a chat template")
        return raw.decode("utf-8", "replace")
    template: Any = tokenizer_config.get("chat_template")
    if "chat_template.json" in files:
        found = read_json_file(Path(files["chat_template.json"]), "chat_template.json")
        template = found.get("chat_template") if isinstance(found, dict) else None
    if isinstance(template, list):
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, Mapping)}
        template = named.get("tool_use") or named.get("default")
    return template if isinstance(template, str) else None


def subject_of(tokenizer_config: Mapping[str, Any], files: Mapping[str, Path]) -> Subject | str:
    """The round trip's subject, or why there is none (the reason a skip is reported with)."""
    response_template = tokenizer_config.get("response_template")
    if not isinstance(response_template, dict):
        return "no response_template"
    chat_template = chat_template_of(tokenizer_config, files)
    if chat_template is None:
        return "no chat template"
    special = {key: text for key in SPECIAL_TOKEN_KEYS if (text := _token_text(tokenizer_config.get(key))) is not None}
    ends = tuple(text for text in stop_texts(tokenizer_config, files) if text != special.get("eos_token"))
    return Subject(chat_template, response_template, special, ends)


def stop_texts(tokenizer_config: Mapping[str, Any], files: Mapping[str, Path]) -> list[str]:
    """The texts of the tokens generation stops on (generation_config.json's `eos_token_id`, e.g. Gemma 4's
    `<turn|>` beside its eos token `<eos>`), named by tokenizer_config.json's `added_tokens_decoder`, else by
    tokenizer.json's `added_tokens`. None when either cannot be read: the eos token alone then ends a turn."""
    if GENERATION_CONFIG not in files:
        return []
    try:
        ids = read_stop_token_ids(Path(files[GENERATION_CONFIG]))
    except FetchError:
        return []
    decoder = tokenizer_config.get("added_tokens_decoder")
    texts = {int(key): text for key, value in decoder.items() if key.isdigit() and (text := _token_text(value))
             } if isinstance(decoder, Mapping) else {}
    if any(token_id not in texts for token_id in ids) and TOKENIZER in files:
        try:
            texts = read_added_tokens(Path(files[TOKENIZER])) | texts
        except OSError:
            pass
    return list(dict.fromkeys(texts[token_id] for token_id in ids if token_id in texts))



def expected_message(subject: Subject, message: dict[str, Any]) -> dict[str, Any]:
    """What the parser must give back for `message`: stripped text, no empty fields, calls as name + arguments."""
    fields = subject.response_template["fields"]
    expected: dict[str, Any] = dict(subject.response_template.get("defaults", {}))
    for source, names in (("reasoning", ("thinking", "reasoning_content")), ("content", ("content",))):
        name = subject.field_named(*names)
        if name is None or source not in message:
            continue
        strip = (fields[name].get("content_args") or {}).get("strip", True)
        text = message[source].strip() if strip else message[source]
        if text:
            expected[name] = text
    calls = [call_of(call) for call in message.get("tool_calls", [])]
    if calls:
        expected["tool_calls"] = calls
    return expected


def call_of(call: Any) -> Any:
    """A tool call as name and arguments, whatever the transform wraps it in (`function` or not)."""
    function = call.get("function", call) if isinstance(call, dict) else call
    if not isinstance(function, dict):
        return function
    return {"name": function.get("name"), "arguments": function.get("arguments")}


def comparable(subject: Subject, parsed: dict[str, Any]) -> dict[str, Any]:
    shaped = dict(parsed)
    if isinstance(shaped.get("tool_calls"), list):
        shaped["tool_calls"] = [call_of(call) for call in shaped["tool_calls"]]
    return shaped


# --- the property and its search ------------------------------------------------------------------------


class RoundTripFailure(Exception):
    code: FailureCode

    def __init__(self, detail: dict[str, Any]) -> None:
        super().__init__(detail["summary"])
        self.detail = detail

    @property
    def kind(self) -> str:
        """The kind of failure: one counterexample is kept (and shrunk) per kind."""
        return self.code


class RenderFailure(RoundTripFailure):
    code = "roundtrip-render-error"


class ParseFailure(RoundTripFailure):
    code = "roundtrip-parse-error"


class Mismatch(RoundTripFailure):
    code = "roundtrip-mismatch"


class ChunkVariance(RoundTripFailure):
    code = "chunk-variance"
    cut: CutKind

    def __init__(self, detail: dict[str, Any]) -> None:
        super().__init__({**detail, "cut": self.cut})

    @property
    def kind(self) -> str:
        return f"{self.code} ({self.cut} cut)"


class CharacterChunkVariance(ChunkVariance):
    cut = "character"


class TokenChunkVariance(ChunkVariance):
    cut = "token"  # a type of its own: hypothesis keeps and shrinks one counterexample per type


CHUNK_VARIANCE: dict[CutKind, type[ChunkVariance]] = {"character": CharacterChunkVariance, "token": TokenChunkVariance}


@dataclass
class RoundTripResult:
    seed: int
    examples: int  # examples the search generated (hypothesis's replays while shrinking not counted)
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> the shrunk counterexample
    # examples streamed with each cut, e.g. {"token": {"one token": 24, ...}, "character": {...}}
    cuts: dict[str, dict[str, int]] = field(default_factory=dict)
    token_cuts_skipped: str | None = None  # why no example was cut at tokens (no tokenizer, one that does not load)
    inputs: list[dict[str, Any]] = field(default_factory=list)  # {prompt, raw, tools} for the matrix
    error: str | None = None  # the search itself failed (a tool problem)


def check_turn(subject: Subject, tools: list[dict], message: dict,
               cuts: Mapping[CutKind, Callable[[str], list[str]]]) -> dict[str, Any]:
    """Run the property on one example, streamed once per kind of cut (`cuts`, in its order: the raw text
    -> its chunks); raise the RoundTripFailure it hits. Returns the rendered input."""
    example = {"tools": tools, "message": message}
    try:
        prompt, raw = render_turn(subject, tools, message)
    except RenderError as error:
        raise RenderFailure({**example, "summary": str(error)}) from None
    rendered = {"prompt": prompt, "raw": raw, "tools": tools}
    whole = parse_whole(subject, prompt, raw, tools)
    for cut, chunks_of in cuts.items():
        chunks = chunks_of(raw)
        chunked = parse_chunked(subject, prompt, chunks, tools)
        if not whole.same(chunked):
            raise CHUNK_VARIANCE[cut]({**example, **rendered, "chunks": chunks, "whole": whole.__dict__,
                                       "chunked": chunked.__dict__,
                                       "summary": f"the parse streamed in {cut} cuts differs from the whole parse"})
    if whole.error is not None:
        raise ParseFailure({**example, **rendered, "actual": whole.error, "summary": whole.error.splitlines()[0]})
    expected = expected_message(subject, message)
    actual = comparable(subject, whole.message)
    if canonical(expected) != canonical(actual):
        raise Mismatch({**example, **rendered, "expected": expected, "actual": whole.message,
                        "summary": "the parsed message differs from the rendered one"})
    return rendered


GENERATING_PHASES = ("explicit-phase", "reuse-phase", "generate-phase", "target-phase")
COMPLETE_EXAMPLE = ("valid", "interesting")  # not `overrun` or `invalid`: a draw hypothesis abandoned


def generated_examples(statistics: Mapping[str, Any]) -> int:
    """How many complete examples the search tried before shrinking, from hypothesis's statistics of a run."""
    return sum(case.get("status") in COMPLETE_EXAMPLE for phase in GENERATING_PHASES
               for case in (statistics.get(phase) or {}).get("test-cases", []))


def cut_counts(statistics: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """How many of the generated examples were streamed with each cut (the strategies' `<kind> cut: <how>`
    events), every cut named (0 when none was drawn)."""
    counts = {"token": dict.fromkeys(TOKEN_CUTS, 0), "character": dict.fromkeys(CHARACTER_CUTS, 0)}
    for phase in GENERATING_PHASES:
        for case in (statistics.get(phase) or {}).get("test-cases", []):
            if case.get("status") not in COMPLETE_EXAMPLE:
                continue
            for name in case.get("events", []):
                kind, _, how = name.partition(" cut: ")
                if how in counts.get(kind, {}):
                    counts[kind][how] += 1
    return counts


def _without_local_constants() -> None:
    """Keep hypothesis from drawing the literals of "local" modules into examples: it mines every loaded module
    outside site-packages, this suite's own (an editable install) among them, so a seed's examples changed
    with any edit of the suite's code (measured: new literals in formats/markers.py turned seed 1's two
    counterexample kinds into one). Hypothesis' own internals: a version without them mines as before."""
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "is_local_module_file"):
        providers.is_local_module_file = lambda path: False


def run_roundtrip(subject: Subject, examples: int, seed: int, database: Path | None = None,
                  tokens: TokenSplitter | str = NO_TOKENIZER) -> RoundTripResult:
    """Search `examples` examples for counterexamples, deterministically for `seed` without a `database`;
    with one, hypothesis replays the counterexamples saved there first and saves new ones (unseeded).
    `tokens` cuts at the checkpoint's tokens; a string instead says why there are no token cuts."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.errors import HypothesisException
    from hypothesis.statistics import collector

    from conformance.audit.roundtrip.strategies import chunkings, token_chunkings, turns

    fields = subject.response_template.get("fields", {})
    strategy = turns(subject.delimiters, reserved=subject.reserved,
                     reasoning=subject.field_named("thinking", "reasoning_content") is not None,
                     content="content" in fields, tool_calls="tool_calls" in fields)
    result = RoundTripResult(seed=seed, examples=0, token_cuts_skipped=tokens if isinstance(tokens, str) else None)
    seen: set[str] = set()

    @settings(max_examples=examples, database=DirectoryBasedExampleDatabase(str(database)) if database else None,
              deadline=None, derandomize=False, report_multiple_bugs=True, print_blob=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
    @given(turn=strategy, data=st.data())
    def search(turn: Any, data: Any) -> None:
        cuts: dict[CutKind, Callable[[str], list[str]]] = {}
        if not isinstance(tokens, str):
            cuts["token"] = lambda raw: data.draw(token_chunkings(raw, tokens.spans(raw)))
        cuts["character"] = lambda raw: data.draw(chunkings(raw, subject.delimiters))
        try:
            rendered = check_turn(subject, turn.tools, turn.message, cuts)
        except RoundTripFailure as failure:
            result.failures[failure.kind] = {"code": failure.code, **failure.detail}
            raise
        if len(result.inputs) < MAX_INPUTS and rendered["raw"] not in seen:
            seen.add(rendered["raw"])
            result.inputs.append({**rendered, "origin": "round trip"})

    if database is None:  # hypothesis saves nothing under an explicit seed: with a database, it replays instead
        search = seeded(seed)(search)
    _without_local_constants()
    try:
        def count(statistics: Mapping[str, Any]) -> None:
            result.examples, result.cuts = generated_examples(statistics), cut_counts(statistics)

        with collector.with_value(count):
            search()
    except (RoundTripFailure, BaseExceptionGroup):
        pass
    except HypothesisException as error:
        result.error = f"{type(error).__name__}: {error}"
    for failure in result.failures.values():  # the shrunk example's own input feeds the matrix too
        if "raw" in failure and failure["raw"] not in seen:
            result.inputs.append({**{key: failure[key] for key in ("prompt", "raw", "tools")},
                                  "origin": f"round trip counterexample ({failure['code']})"})
    return result
