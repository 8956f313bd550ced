"""JSON text read and written as the standard library's `json` reads and writes it, with less CPU.

`parse_json(text)` returns what `json.loads(text)` returns and raises what it raises, for a text
nested at most MAX_JSON_DEPTH deep (below). It asks msgspec's decoder first (about three times faster
on a stream's chunks, the bulk of what a run reads): for every text msgspec reads, it gives the value
json gives (integers of any size, floats correctly rounded, the last of duplicate keys in the first
one's place). Where msgspec refuses a text json reads (NaN and Infinity, numbers past a float's range,
escaped lone surrogates) or refuses it in its own words, json is asked again, so the value and every
error message are json's. tests/test_json_codec.py holds the two equal over generated texts.

Arrays and objects nested deeper than MAX_JSON_DEPTH (a hostile server's `[[[[...]]]]`, or tool-call
arguments a model wrote so) raise JsonTooDeep, a json.JSONDecodeError naming the bound, where
json.loads would raise RecursionError: every reader of a server's bytes takes such a text for one that
is not JSON, and a value read stays well inside the interpreter's recursion limit for whatever reads
it next. A recording's line holds such a value a few levels down (a result's check, its `actual`, a
tool call, its arguments), so recordings are read with the bound MAX_RECORD_DEPTH: whatever was
recorded reads back.

`json_text(value)` is `json.dumps(value, ensure_ascii=False)` without its per-call set-up.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

_DECODER = msgspec.json.Decoder()
# What msgspec raises where json may read the text or say why not in its own words. (RecursionError:
# json's depth limit is its own; UnicodeEncodeError: a str holding a lone surrogate, which json reads.)
_ASK_JSON = (msgspec.DecodeError, RecursionError, UnicodeEncodeError)


# Arrays and objects inside each other: a fifth of the interpreter's recursion limit (1,000), as code that
# walks a value (a report's view of it, a client library) may take two or three frames a level.
MAX_JSON_DEPTH = 200
MAX_RECORD_DEPTH = MAX_JSON_DEPTH + 50  # a recorded line: an answer's value and the record around it
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[][{}]', re.DOTALL)


class JsonTooDeep(json.JSONDecodeError):
    """A JSON text nested deeper than `limit` (`pos`: the opening bracket past it)."""

    def __init__(self, text: str, position: int, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels", text, position)


def parse_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(text)`, faster and nested at most `max_depth` deep (module docstring)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")  # as json.loads reads bytes
    if isinstance(text, str) and len(text) > max_depth and text.count("[") + text.count("{") > max_depth:
        _refuse_deeper_than(max_depth, text)
    try:
        return _DECODER.decode(text)
    except _ASK_JSON:
        return json.loads(text)


def _refuse_deeper_than(limit: int, text: str) -> None:
    """Raise JsonTooDeep where `text` opens its first array or object past `limit` (brackets inside
    strings are text)."""
    depth = 0
    for found in _STRING_OR_BRACKET.finditer(text):
        bracket = text[found.start()]
        if bracket in "[{":
            depth += 1
            if depth > limit:
                raise JsonTooDeep(text, found.start(), limit)
        elif bracket in "]}":
            depth -= 1


if json.encoder.c_make_encoder is not None:
    # json.dumps(value, ensure_ascii=False) without its per-call set-up: the C encoder made once, and no
    # check for circular references (the values are parsed JSON, which cannot hold one; one would be a
    # RecursionError). A fifth less CPU for a run's transcripts.
    _JSON_PIECES = json.encoder.c_make_encoder(None, json.JSONEncoder().default, json.encoder.encode_basestring,
                                               None, ": ", ", ", False, False, True)

    def json_text(value: Any) -> str:
        """`value` as json.dumps(value, ensure_ascii=False) writes it."""
        return "".join(_JSON_PIECES(value, 0))
else:  # an interpreter without the C encoder
    json_text = json.JSONEncoder(ensure_ascii=False).encode
