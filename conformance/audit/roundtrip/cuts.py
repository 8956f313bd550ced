"""How the round trip cuts a raw text into stream chunks. Two kinds of cut: at characters (anywhere, inside a
delimiter too: stricter than any server) and at the checkpoint's own tokens (a server streams whole tokens
and never splits one, so a parser that breaks only when a delimiter is cut mid-token cannot break on a
server, while one that breaks on how whole tokens are grouped can). The strategies draw them.

The tokenizer is the checkpoint's `tokenizer.json`, loaded with the `tokenizers` library from at most
MAX_TOKENIZER_BYTES bytes; it is untrusted (its regexes, its size), so load and use it in the round
trip's bounded worker only. A text is cut at its tokens' character offsets, which are exact: the pieces
always concatenate to the text, and a character that byte-level tokens split (every such token has the
same offsets) is never cut, as a server's detokenizer holds back an incomplete character.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from conformance.util.files import read_bounded

CutKind = Literal["character", "token"]
CHARACTER_CUTS = ("one character", "random sizes", "inside delimiters")
TOKEN_CUTS = ("whole", "at added tokens", "one token", "random groups of 1-8 tokens")
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
NO_TOKENIZER = "no tokenizer.json"


@dataclass(frozen=True)
class TokenSpan:
    """One token of a text: its characters `text[start:end]`, and whether it is one of the tokenizer's added
    tokens (special tokens and the delimiters a checkpoint adds whole, e.g. `<tool_call>`)."""

    start: int
    end: int
    added: bool


class TokenizerUnavailable(Exception):
    """The checkpoint's tokenizer.json cannot be used; the message is the reason token cuts are skipped."""


class TokenSplitter:
    """A text's tokens as spans, with a checkpoint's tokenizer (`tokenizers.Tokenizer`)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._added_ids = frozenset(tokenizer.get_added_tokens_decoder())

    def spans(self, text: str) -> tuple[TokenSpan, ...]:
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return tuple(TokenSpan(start, end, token_id in self._added_ids)
                     for token_id, (start, end) in zip(encoding.ids, encoding.offsets))


def load_token_splitter(path: Path) -> TokenSplitter:
    """The splitter of the tokenizer.json at `path`, or TokenizerUnavailable saying why not."""
    from tokenizers import Tokenizer

    try:
        text = read_bounded(path, MAX_TOKENIZER_BYTES, "a tokenizer").decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TokenizerUnavailable(f"tokenizer.json cannot be read: {error}") from None
    try:
        return TokenSplitter(Tokenizer.from_str(text))
    except Exception as error:  # the library refuses what it cannot load with any of its own errors
        raise TokenizerUnavailable(f"tokenizer.json does not load: {type(error).__name__}: {error}") from None


def cut_before(text: str, spans: Sequence[TokenSpan], group_starts: Iterable[int]) -> list[str]:
    """`text` cut before each token whose index is in `group_starts` (at its start offset): the pieces are
    whole tokens, non-empty, and concatenate to `text` (characters no token covers go with the token before)."""
    cuts = sorted({spans[index].start for index in group_starts if 0 <= index < len(spans)} - {0})
    bounds = [0, *[cut for cut in cuts if cut < len(text)], len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:]) if end > start]
