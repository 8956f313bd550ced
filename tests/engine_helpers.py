"""Helpers for the engine's tests: cases loaded from small YAML files (the real loader) and
hand-made transcripts."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.record.case_model import DEFAULT_GRANULARITIES, Case
from conformance.record.transcript import ServerStamp, SseLine, Transcript
from conformance.run.engine import case_modes
from conformance.servers.profiles import expectation_for, profile_record
from conformance.suite.cases import load_suite

WEATHER_TOOL = """\
tools:
  get_weather:
    type: function
    function:
      name: get_weather
      description: Weather forecast for a city.
      parameters:
        type: object
        properties:
          city: {type: string}
          days: {type: integer}
        required: [city]
"""


def case_directory(directory: Path, cases_yaml: str) -> Path:
    """`directory` holding one case file (as `load_cases` writes it) and the shipped feature registry."""
    load_cases(directory, cases_yaml)
    (directory / "features.txt").write_text((Path(__file__).parents[1] / "cases" / "features.txt").read_text())
    return directory


def load_cases(directory: Path, cases_yaml: str, name: str = "suite.yaml") -> dict[str, Case]:
    """Write one case file (the weather tool block plus `cases_yaml`) and load it with the real loader."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(WEATHER_TOOL + "cases:\n" + textwrap.indent(textwrap.dedent(cases_yaml), "  "))
    return {case.id: case for case in load_suite(directory)}


def stream_transcript(chunks: list[Any], *, done: bool = True, case_id: str = "c", profile: str = "hf",
                      request: dict | None = None, endpoint: str = "chat") -> Transcript:
    """A 200 streaming transcript whose SSE data lines are the given chunks (dicts become JSON)."""
    lines = [SseLine(c if isinstance(c, str) else json.dumps(c), 0.01 * i) for i, c in enumerate(chunks)]
    if done:
        lines.append(SseLine("[DONE]", 0.01 * len(chunks)))
    return Transcript(case_id, "stream", profile, endpoint, STAMP, request or {}, status=200, sse=lines)


def response_transcript(message: dict[str, Any], finish_reason: str, *, case_id: str = "c", profile: str = "hf",
                        request: dict | None = None) -> Transcript:
    response = {"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}]}
    return Transcript(case_id, "non-stream", profile, "chat", STAMP, request or {}, status=200, response=response)


def error_transcript(status: int, body: Any, mode: str = "non-stream", profile: str = "hf") -> Transcript:
    return Transcript("c", mode, profile, "chat", STAMP, {}, status=status, error_body=body)


STAMP = ServerStamp("http://127.0.0.1:1/v1", "tiny", "hf", "0.32.0")


def modes_needing_another_variant(served_variant: str,
                                  granularities: Sequence[str] = DEFAULT_GRANULARITIES) -> set[tuple[str, str]]:
    """(case id, mode) of the shipped cases a run serving `served_variant` does not send: they name another
    checkpoint variant (their results are `skip`, kind other_fixture_variant, always allowed)."""
    return {(case.id, mode) for case in load_suite()
            if case.fixture_variant not in (None, served_variant) for mode in case_modes(case, granularities)}


def modes_not_sent(profile: str, granularities: Sequence[str] = DEFAULT_GRANULARITIES) -> set[tuple[str, str]]:
    """(case id, mode) of the shipped cases a run of `profile` (on its record's variant, forced streams also
    at `granularities`: by default the gate's) does not send: those needing another variant, those whose
    expectation for it is a declared `skip`, and granular streams to a server that cannot be asked for them."""
    record = profile_record(profile)
    declared = {(case.id, mode) for case in load_suite() for mode in case_modes(case, granularities)
                if (expected := expectation_for(case, profile)) is not None and expected.skip}
    not_asked = set() if record.stream_interval_per_request else {
        (case.id, mode) for case in load_suite() for mode in case_modes(case, granularities) if "@" in mode}
    return modes_needing_another_variant(record.fixture_variant, granularities) | declared | not_asked
