"""pytest plugin: the conformance cases as pytest items, run by the same engine as `conformance run`.

    pytest --conformance-base-url URL --conformance-model NAME --conformance-profile hf

adds one item per case x mode, named like `reasoning-then-one-call[stream]`, with one marker per
feature tag (so `-m tool_call` or `-k "not responses"` select cases). The whole selection is sent
at once, concurrently, when the first item runs; each item then reports its own result: `fail`
fails the item (with the failed checks, expected and actual), `error` is a pytest error, `skip` a
skip. Without `--conformance-base-url` the plugin adds nothing and costs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.driver import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT, FORCING_CHOICES, FORCING_HELP, forcing_fields

_STATE = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "response-template parser conformance cases")
    group.addoption("--conformance-base-url", metavar="URL", help="server to test, ending in /v1 (activates the plugin)")
    group.addoption("--conformance-model", metavar="NAME", help="model name the server serves")
    group.addoption("--conformance-profile", metavar="NAME", help="profile whose expectations apply (hf, legacy)")
    group.addoption("--conformance-cases", metavar="DIR", type=Path, help="case directory (default: shipped cases/)")
    group.addoption("--conformance-out", metavar="DIR", type=Path, help="write transcripts, results and reports here")
    group.addoption("--conformance-checkpoint", metavar="DIR", type=Path,
                    help="local checkpoint whose response_template gives the markers checked for leaks")
    group.addoption("--conformance-concurrency", metavar="N", type=int, default=DEFAULT_CONCURRENCY,
                    help=f"requests in flight (default {DEFAULT_CONCURRENCY})")
    group.addoption("--conformance-timeout", metavar="S", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds per request (default {DEFAULT_TIMEOUT:g})")
    group.addoption("--conformance-forcing", choices=FORCING_CHOICES, default="probe", help=FORCING_HELP)
    group.addoption("--conformance-api-key", metavar="KEY", default="EMPTY", help="API key sent to the server")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("conformance_base_url"):
        return
    from conformance.cases import CaseFileError, load_features, load_suite

    if not (config.getoption("conformance_model") and config.getoption("conformance_profile")):
        raise pytest.UsageError("--conformance-base-url needs --conformance-model and --conformance-profile")
    directory = config.getoption("conformance_cases")
    try:
        cases = load_suite(directory)
        features = load_features(directory)
    except CaseFileError as exc:
        raise pytest.UsageError(f"conformance cases: {exc}") from exc
    for tag, description in features.items():
        config.addinivalue_line("markers", f"{tag}: conformance feature: {description}")
    from conformance.engine import CheckpointError, markers_for_checkpoint

    try:
        markers = markers_for_checkpoint(config.getoption("conformance_checkpoint"))
    except CheckpointError as exc:
        raise pytest.UsageError(f"--conformance-checkpoint: {exc}") from exc
    config.stash[_STATE] = {"cases": cases, "markers": markers, "results": None}


class ConformanceSuite(pytest.Collector):
    """Parent node of the conformance items (they are made in pytest_collection_modifyitems)."""

    def collect(self) -> list[pytest.Item]:
        return []


class ConformanceItem(pytest.Item):
    def __init__(self, *, case: Any, mode: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case, self.mode = case, mode
        for tag in case.features:
            self.add_marker(tag)

    def setup(self) -> None:
        result = _results(self.session)[(self.case.id, self.mode)]
        if result.outcome == "error":  # failing in setup makes it a pytest error, not a test failure
            pytest.fail(f"{result.name} could not be judged: {result.reason}", pytrace=False)

    def runtest(self) -> None:
        result = _results(self.session)[(self.case.id, self.mode)]
        if result.outcome == "skip":
            pytest.skip(result.reason)
        if result.outcome == "fail":
            raise ConformanceFailure(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ConformanceFailure):
            return excinfo.value.explain()
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.case.source, self.case.line - 1, f"conformance case {self.name}: {self.case.description}"


class ConformanceFailure(Exception):
    def __init__(self, result: Any) -> None:
        super().__init__(result.reason)
        self.result = result

    def explain(self) -> str:
        lines = [f"{self.result.name} ({self.result.profile}): {self.result.description}"]
        for check in self.result.failed_checks():
            lines.append(f"  {check.name}: {check.reason}")
            if check.expected is not None or check.actual is not None:
                lines += [f"    expected: {check.expected!r}", f"    actual:   {check.actual!r}"]
        return "\n".join(lines)


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselection, which then applies to these items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    from conformance.engine import case_modes

    suite = ConformanceSuite.from_parent(session, name="conformance", nodeid="conformance")
    for case in state["cases"]:
        for mode in case_modes(case):
            items.append(ConformanceItem.from_parent(suite, name=f"{case.id}[{mode}]", case=case, mode=mode))


def _results(session: pytest.Session) -> dict[tuple[str, str], Any]:
    """Run every selected case once (on first use) with the shared engine; results by (case id, mode).
    A run that dies fails every item with the same reason instead of being started again per item."""
    state = session.config.stash[_STATE]
    if state["results"] is None:
        try:
            state["results"] = _run_selection(session)
        except Exception as exc:
            state["results"] = exc
            raise
    if isinstance(state["results"], Exception):
        pytest.fail(f"the conformance run failed: {type(state['results']).__name__}: {state['results']}",
                    pytrace=False)
    return state["results"]


def _run_selection(session: pytest.Session) -> dict[tuple[str, str], Any]:
    from conformance.driver import Target
    from conformance.engine import run, write_reports

    state, option = session.config.stash[_STATE], session.config.getoption
    selected = {item.case.id: item.case for item in session.items if isinstance(item, ConformanceItem)}
    target = Target(base_url=option("conformance_base_url"), model=option("conformance_model"),
                    profile=option("conformance_profile"), api_key=option("conformance_api_key"),
                    timeout=option("conformance_timeout"), **forcing_fields(option("conformance_forcing")))
    out_dir = option("conformance_out")
    output = run(list(selected.values()), target, out_dir, concurrency=option("conformance_concurrency"),
                 markers=state["markers"])
    if out_dir is not None:
        write_reports(out_dir, output.results, output.stamp, output.transcripts)
    return {(r.case_id, r.mode): r for r in output.results}
