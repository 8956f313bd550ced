"""Split invariance: a stream asked to deliver several tokens per delta (a granular mode, `stream@N`)
must reassemble to the message of the same server's one-token stream. Speculative decoding, a server's
`--stream-interval` and busy batches hand a streaming parser several tokens at once; a parser that
only works token by token loses or leaks text there. A pure function over two recorded streams."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from conformance.formats.format import StreamBug
from conformance.record.outcomes import BLOCKING_KINDS, CONTRACT, FAIL, FINDING, PASS, SKIP, Check
from conformance.record.transcript import Transcript
from conformance.record.wire import Message, StreamReading, brief_json, chat_message_after, message_view, read_stream
from conformance.util.json_codec import parse_json
from conformance.util.json_values import json_equal

CHECK_NAME = "split_invariance"


def check_split_invariance(mode: str, reading: StreamReading, one_token: Transcript | None) -> Check:
    """The stream read in `reading` (sent in granular `mode`) against `one_token`, the same case's
    one-token stream on the same server: the same message, field by field. A difference names the
    first chunk of the granular stream after which its text stops being a prefix of the one-token
    stream's (the chunk where the parser went wrong)."""
    if one_token is None or not one_token.answered or one_token.status != 200:
        return Check(CHECK_NAME, SKIP, CONTRACT, reason="no answered one-token stream of the case to compare with")
    if (merged := most_tokens_in_a_delta(one_token)) > 1:
        return Check(CHECK_NAME, SKIP, CONTRACT, reason=f"the one-token stream of the case came merged all the same "
                                                         f"(up to {merged} tokens in a delta, a busy server's "
                                                         f"grouping): no one-token reference to compare with")
    reference = read_stream(one_token)
    if reference.invalid_lines or reference.stream_error is not None:
        return Check(CHECK_NAME, SKIP, CONTRACT, reason="the one-token stream of the case cannot be read")
    expected, actual = message_view(reference.message), message_view(reading.message)
    differing = [key for key in expected if not json_equal(actual.get(key), expected[key])]
    if not differing:
        return Check(CHECK_NAME, PASS, CONTRACT, reason=f"{mode}: the one-token stream's message, "
                                                          f"in {len(reading.chunks)} chunks")
    chunk = first_divergent_chunk(reading.chunks, reference.message)
    where = (f"first divergent chunk: {chunk} of {len(reading.chunks)} "
             f"({brief_json(_delta_of(reading.chunks[chunk - 1]), 120)})" if chunk else "no chunk")
    return Check(CHECK_NAME, FAIL, CONTRACT,
                 reason=f"{mode}: the reassembled message differs from the one-token stream's in "
                        f"{', '.join(differing)}; {where}",
                 expected={key: expected[key] for key in differing},
                 actual={key: actual.get(key) for key in differing})


def first_divergent_chunk(chunks: Sequence[Mapping[str, Any]], reference: Message) -> int | None:
    """The number (from 1) of the first chunk after which the reassembled texts (reasoning, content,
    each call's name and arguments) are no longer a prefix of `reference`'s; the last chunk when
    every prefix holds but the end differs (something never arrived); None for no chunks."""
    wanted = _texts(reference)
    for number in range(1, len(chunks) + 1):
        so_far = _texts(chat_message_after(chunks[:number]))
        if any(not wanted.get(key, "").startswith(text) for key, text in so_far.items()):
            return number
    return len(chunks) or None


def _texts(message: Message) -> dict[str, str]:
    texts = {"reasoning": message.reasoning or "", "content": message.content or ""}
    for index, call in enumerate(message.tool_calls):
        texts[f"tool_calls[{index}].name"] = call.name or ""
        texts[f"tool_calls[{index}].arguments"] = call.arguments or ""
    return texts


def _delta_of(chunk: Mapping[str, Any]) -> Any:
    choices = chunk.get("choices") or [{}]
    return choices[0].get("delta", choices[0]) if isinstance(choices[0], Mapping) else choices[0]


def judged_with_stream_bug(checks: Sequence[Check], bug: StreamBug) -> list[Check]:
    """`checks` of a granular stream whose split is a declared bug: while the split stays broken, its blocking
    failures are findings under one `known_stream_bug` finding; once it reassembles, the declaration is stale (fail)."""
    split = next((check for check in checks if check.name == CHECK_NAME), None)
    cited = f"{bug.reason} ({bug.link})"
    if split is None:
        return list(checks)
    if split.outcome == SKIP:  # nothing to tell a stale declaration by; what fails is what it declares
        return _as_declared(checks, f"a declared bug of the server (the split itself not judged: {split.reason}): "
                                    f"{cited}")
    if split.outcome == PASS:
        return [*checks, Check("known_stream_bug", FAIL, CONTRACT,
                               reason=f"declared as a known bug, but the stream now reassembles: the declaration is "
                                      f"stale: {cited}")]
    return _as_declared(checks, f"a declared bug of the server: {cited}")


def _as_declared(checks: Sequence[Check], reason: str) -> list[Check]:
    """`checks` with their blocking failures as findings under one `known_stream_bug` finding (`reason`); as they
    were when nothing fails."""
    if not any(check.outcome == FAIL and check.kind in BLOCKING_KINDS for check in checks):
        return list(checks)
    return [replace(check, kind=FINDING) if check.outcome == FAIL and check.kind in BLOCKING_KINDS else check
            for check in checks] + [Check("known_stream_bug", FAIL, FINDING, reason=reason)]


def most_tokens_in_a_delta(transcript: Transcript) -> int:
    """The most generated tokens one chunk of a stream carried (the `token_ids` of its choice, which the
    requests ask for with `return_token_ids`); 0 where no chunk names them."""
    chunks = []
    for line in transcript.sse:  # a server's answer, any shape: what is not a chunk names no tokens
        try:
            chunks.append(parse_json(line.data))
        except ValueError:  # not JSON (JSONDecodeError), too deep, `[DONE]`
            continue
    choices = [choice for chunk in chunks if isinstance(chunk, Mapping) and isinstance(chunk.get("choices"), list)
               for choice in chunk["choices"]]
    counts = [len(choice["token_ids"]) for choice in choices
              if isinstance(choice, Mapping) and isinstance(choice.get("token_ids"), list)]
    return max(counts, default=0)


def judged_merged_stream(checks: Sequence[Check], bug: StreamBug, most_tokens: int) -> list[Check]:
    """`checks` of a one-token stream that came merged all the same (up to `most_tokens` tokens in a delta, as a
    busy server groups them) on a case whose split is a declared bug of the server: its blocking failures are
    what the declaration says (findings under one `known_stream_bug` finding). Passing says nothing stale: a
    merged delta need not cut where the bug bites; staleness is judged on the granular streams."""
    return _as_declared(checks, f"the one-token stream came with up to {most_tokens} tokens in a delta (the server "
                                f"grouped them under load), where a declared bug of the server bites: {bug.reason} "
                                f"({bug.link})")
