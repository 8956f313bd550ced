"""What a run does not spend CPU on (benchmarks/run_benchmark.py measures what it does spend)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance import engine
from conformance.driver import Target
from tests.engine_helpers import load_cases
from tests.fake_server import fake_server

CASES_YAML = r"""
- id: ok
  description: One tool call arrives whole after the reasoning.
  features: [tool_call]
  request:
    messages: [{role: user, content: ok}]
    tools: [get_weather]
  expect:
    hf: {message: {reasoning: "\nplan\n", tool_calls: [{name: get_weather, arguments: {city: Paris}}]}, finish_reason: tool_calls}
"""


def test_a_run_never_formats_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio.run (CPython 3.11, main thread) formats the repr of its main task, result included,
    when it puts back the SIGINT handler: for a whole run's output that is tens of milliseconds."""
    formatted = []
    monkeypatch.setattr(engine.RunOutput, "__repr__", lambda self: formatted.append(self) or "RunOutput(...)")
    with fake_server() as server:
        cases = list(load_cases(tmp_path / "cases", CASES_YAML).values())
        output = engine.run(cases, Target(server.base_url, "fake", "hf"), tmp_path / "out")
    assert len(output.results) == 2 and formatted == []
