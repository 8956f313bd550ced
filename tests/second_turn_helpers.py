"""The shipped second turns sent to one real server by every rebuilder (the real client libraries and the
hand-written ways of sending reasoning back), for the live tests of each profile."""

from __future__ import annotations

from pathlib import Path

from conformance.clients.second_turn import CLIENT_REBUILDERS, import_libraries
from conformance.record.case_model import rebuilder_of
from conformance.record.results import CaseResult
from conformance.run.driver import Target
from conformance.run.engine import run
from conformance.run.second_turn import REASONING_REBUILDERS
from conformance.servers.launch import Server
from conformance.suite.cases import load_suite

REBUILDERS = {**CLIENT_REBUILDERS, **REASONING_REBUILDERS}


def second_turn_results(server: Server, profile: str, out_dir: Path) -> list[CaseResult]:
    """The second turns' results of a run of the second-turn cases on `server` as `profile`, every rebuilder."""
    cases = [case for case in load_suite() if case.second_turn is not None]
    import_libraries(CLIENT_REBUILDERS)  # before any request, as the commands do
    target = Target(base_url=server.base_url, model=server.model, profile=profile, version=server.version, timeout=120)
    output = run(cases, target, out_dir, rebuilders=REBUILDERS)
    results = [result for result in output.results if rebuilder_of(result.mode) is not None]
    assert len(results) == len(cases) * len(REBUILDERS)
    return results
