"""JSON text read and written as the standard library's `json` reads and writes it, with less CPU.

`parse_json(text)` returns what `json.loads(text)` returns and raises what it raises. It asks
msgspec's decoder first (about three times faster on a stream's chunks, the bulk of what a run
reads): for every text msgspec reads, it gives the value json gives (integers of any size, floats
correctly rounded, the last of duplicate keys in the first one's place). Where msgspec refuses a text
json reads (NaN and Infinity, numbers past a float's range, escaped lone surrogates) or refuses it in
its own words, json is asked again, so the value and every error message are json's.
tests/test_json_codec.py holds the two equal over generated texts.

`json_text(value)` is `json.dumps(value, ensure_ascii=False)` without its per-call set-up.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_DECODER = msgspec.json.Decoder()
# What msgspec raises where json may read the text or say why not in its own words. (RecursionError:
# json's depth limit is its own; UnicodeEncodeError: a str holding a lone surrogate, which json reads.)
_ASK_JSON = (msgspec.DecodeError, RecursionError, UnicodeEncodeError)


def parse_json(text: str) -> Any:
    """`json.loads(text)`, faster (module docstring)."""
    try:
        return _DECODER.decode(text)
    except _ASK_JSON:
        return json.loads(text)


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
