"""The shape check: where an answer's JSON departs from the shape the API defines for the parts the
checks read (schemas/response-shape.schema.json), and the `response_shape` fail that names it."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from conformance.record.case_model import is_stream
from conformance.record.outcomes import FAIL, Check
from conformance.record.transcript import Transcript
from conformance.record.wire import brief_json
from conformance.util.json_codec import JsonTooDeep, parse_json
from conformance.util.locations import format_path
from conformance.util.package_paths import load_schema


def shape_problems(transcript: Transcript) -> list[str]:
    """Where an answer's JSON departs from the shape the API defines for the parts the checks read
    (schemas/response-shape.schema.json): the clear reason for an answer the checks could not read.
    Empty when the shape is right. A stream's data line nested deeper than the JSON reader's bound is one."""
    responses = transcript.endpoint == "responses"
    problems = []
    if is_stream(transcript.mode):
        validator = _shape_validator("responsesEvent" if responses else "chatChunk")
        payloads = []
        for number, line in enumerate(transcript.sse, start=1):
            try:
                payloads.append((f"data line {number}", parse_json(line.data)))
            except JsonTooDeep as exc:
                problems.append(f"data line {number}: {exc.msg}")
            except json.JSONDecodeError:
                continue  # read_stream reports those
    else:
        validator = _shape_validator("response" if responses else "chatCompletion")
        payloads = [("the response", transcript.response)] if transcript.response is not None else []
    for where, payload in payloads:
        for error in _innermost(validator.iter_errors(payload)):
            at = format_path(list(error.absolute_path))
            if error.validator == "type":
                what = f"{brief_json(error.instance, 60)} is not of type {' or '.join(_list_of(error.validator_value))}"
            else:
                what = f"{brief_json(error.instance, 60)} is not an output item object or null"  # the one anyOf
            problems.append(f"{where}: {at or 'the object'}: {what}")
    return problems


def shape_failure(problems: Sequence[str]) -> Check:
    """The `response_shape` fail for an answer with these `shape_problems` (the first three named)."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return Check("response_shape", FAIL, reason="the answer does not have the API's shape: "
                 + "; ".join(problems[:3]) + more)


def _innermost(errors: Iterable[Any]) -> Iterator[Any]:
    """Schema errors, an `anyOf` replaced by the errors deeper inside its object branch."""
    for error in errors:
        deeper = [sub for sub in error.context or () if len(sub.absolute_path) > len(error.absolute_path)]
        if deeper:
            yield from _innermost(deeper)
        else:
            yield error


@functools.cache
def _shape_validator(definition: str) -> Any:
    import jsonschema


    return jsonschema.Draft202012Validator({**load_schema("response-shape.schema.json"), "$ref": f"#/$defs/{definition}"})


def _list_of(value: Any) -> list[str]:
    return value if isinstance(value, list) else [str(value)]
