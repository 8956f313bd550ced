"""pytest plugin: the conformance cases as pytest items, run by the same engine as `conformance run`.

    pytest --conformance-base-url URL --conformance-model NAME --conformance-profile hf

adds one item per case x mode, `conformance::reasoning-then-one-call[stream]`, with one marker per
feature tag (so `-m tool_call` or `-k "not responses"` select cases), and `pytest
"conformance::ID[MODE]"` (or `conformance::ID`, or `conformance`) selects by node id. The whole
selection is sent at once, concurrently, before the first item runs (never on `--collect-only`);
each item then reports its own result and its own duration (its request's, from the transcript):
`fail` fails the item (with the failed checks, expected and actual), `error` is a pytest error, a
skip of an allowed kind (declared by the case, or `--conformance-allow-skip KIND`) a skip, any other
skip an error ("not judged"). A session where no conformance item was judged is not green.

Under pytest-xdist (`-n N`) each worker sends the cases of its share (every N-th case) and reads the
other results from the shares the other workers write to a directory they all see; the controller
writes the reports of the whole run. Without `--conformance-base-url` the plugin adds nothing.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.record.case_model import Case, Mode
from conformance.record.outcomes import SKIP_KINDS
from conformance.run.driver import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT, FORCING_CHOICES, FORCING_HELP, forcing_fields

_STATE = pytest.StashKey[dict[str, Any]]()
SUITE_NAME = "conformance"  # the node id prefix of every item
SHARE_DIR_KEY = "conformance_share_dir"  # in an xdist worker's workerinput
DONE_FILE = "done"  # written into a worker's share directory when its share is judged (empty: no failure)
SHARE_WAIT_SLACK = 60.0  # seconds to wait for another worker's share beyond its own request time budget


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
    group.addoption("--conformance-api-key", metavar="KEY",
                    help="API key sent to the server (default: $OPENAI_API_KEY, else EMPTY)")
    group.addoption("--conformance-allow-skip", action="append", default=[], choices=SKIP_KINDS, metavar="KIND",
                    help=f"a skip of this kind is a pytest skip, not an error (repeatable; {', '.join(SKIP_KINDS)})")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("conformance_base_url"):
        return
    from conformance.formats.markers import CheckpointError, markers_for_checkpoint
    from conformance.run.engine import known_profiles
    from conformance.suite.cases import CaseFileError, load_features, load_suite

    if not (config.getoption("conformance_model") and config.getoption("conformance_profile")):
        raise pytest.UsageError("--conformance-base-url needs --conformance-model and --conformance-profile")
    timeout = config.getoption("conformance_timeout")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise pytest.UsageError(f"--conformance-timeout must be a positive number of seconds, not {timeout:g}")
    directory = config.getoption("conformance_cases")
    try:
        cases = load_suite(directory)
        features = load_features(directory)
    except CaseFileError as exc:
        raise pytest.UsageError(f"conformance cases: {exc}") from exc
    profile = config.getoption("conformance_profile")
    if profile not in known_profiles(cases):
        raise pytest.UsageError(f"--conformance-profile: unknown profile {profile!r}: no profile record and no case "
                                f"expectation names it (known: {', '.join(sorted(known_profiles(cases)))})")
    for tag, description in features.items():
        config.addinivalue_line("markers", f"{tag}: conformance feature: {description}")
    try:
        markers = markers_for_checkpoint(config.getoption("conformance_checkpoint"))
    except CheckpointError as exc:
        raise pytest.UsageError(f"--conformance-checkpoint: {exc}") from exc
    state = config.stash[_STATE] = {"cases": cases, "markers": markers, "node_ids": None, "results": {},
                                    "durations": {}, "failure": None, "selected": [], "share_dir": None}
    config.pluginmanager.register(_Tally(state), "conformance-tally")
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_XdistController(state), "conformance-xdist")


class _Tally:
    """Counts the conformance items reported and judged (in the controller too: xdist relays the
    workers' reports), so that a session that judged none is not green."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state, self.reported, self.judged = state, 0, 0
        self.skip_reasons: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith(SUITE_NAME + "::"):
            return
        if report.when == "call" and report.outcome in ("passed", "failed"):
            self.judged += 1
        if (report.when == "setup" and report.outcome != "passed") or report.when == "call":
            self.reported += 1
            if report.skipped and isinstance(report.longrepr, tuple):
                self.skip_reasons.append(str(report.longrepr[2]).removeprefix("Skipped: "))

    def nothing_judged(self) -> str | None:
        """`nothing was judged: ...` when items were reported and none passed or failed, else None."""
        if not self.reported or self.judged:
            return None
        first = self.skip_reasons[0] if self.skip_reasons else "every item is an error"
        return f"nothing was judged: {self.reported} conformance items, none passed or failed (first: {first})"


class _XdistController:
    """Hooks of the xdist controller (registered only where xdist is installed): one share directory
    for every worker of the run."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        if self.state["share_dir"] is None:
            self.state["share_dir"] = Path(tempfile.mkdtemp(prefix="conformance-xdist-"))
        node.workerinput[SHARE_DIR_KEY] = str(self.state["share_dir"])


def _controls_workers(config: pytest.Config) -> bool:
    return config.pluginmanager.hasplugin("dsession")


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool | None:
    """Take `conformance[::ID[MODE]]` arguments out of the paths pytest collects: they select items."""
    state = session.config.stash.get(_STATE, None)
    if state is None or _controls_workers(session.config):
        return None
    args = session.config.args
    ours = [arg for arg in args if arg == SUITE_NAME or arg.startswith(SUITE_NAME + "::")]
    if not ours:
        return None
    state["node_ids"] = [arg.removeprefix(SUITE_NAME).removeprefix("::") for arg in ours]
    session.perform_collect([arg for arg in args if arg not in ours])
    return True


class ConformanceSuite(pytest.Collector):
    """Parent node of the conformance items: one item per selected case x mode."""

    def collect(self) -> list[pytest.Item]:
        from conformance.run.engine import case_modes

        wanted = self.config.stash[_STATE]["node_ids"]
        items = []
        for case in self.config.stash[_STATE]["cases"]:
            for mode in case_modes(case):
                name = f"{case.id}[{mode}]"
                if wanted is None or any(n in ("", name, case.id) for n in wanted):
                    items.append(ConformanceItem.from_parent(self, name=name, case=case, mode=mode))
        unmatched = [n for n in wanted or () if n and not any(n in (i.name, i.case.id) for i in items)]
        if unmatched:
            raise pytest.UsageError(f"no conformance item {', '.join(unmatched)} (ids look like "
                                    f"{SUITE_NAME}::CASE-ID[stream])")
        return items


class ConformanceItem(pytest.Item):
    def __init__(self, *, case: Case, mode: Mode, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case, self.mode = case, mode
        for tag in case.features:
            self.add_marker(tag)

    def setup(self) -> None:
        result = _result(self)
        if result.outcome == "error":  # failing in setup makes it a pytest error, not a test failure
            pytest.fail(f"{result.name} could not be judged: {result.reason}", pytrace=False)
        if result.outcome == "skip" and not result.skip_allowed:
            pytest.fail(f"{result.name} was not judged: skipped ({result.skip_kind}), a kind this run does not allow "
                        f"(--conformance-allow-skip {result.skip_kind}): {result.reason}", pytrace=False)

    def runtest(self) -> None:
        result = _result(self)
        if result.outcome == "skip":
            pytest.skip(f"{result.skip_kind}: {result.reason}")
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
    """Collect the suite as pytest collects a file: reported (so `collected N items` counts it), then added."""
    from _pytest.runner import collect_one_node

    if config.stash.get(_STATE, None) is None:
        return
    suite = ConformanceSuite.from_parent(session, name=SUITE_NAME, nodeid=SUITE_NAME)
    report = collect_one_node(suite)
    session.ihook.pytest_collectreport(report=report)
    if report.failed:
        raise pytest.UsageError(str(report.longrepr))
    items.extend(report.result)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """Before any item runs: send this process's share of the selected cases (all of them without xdist)."""
    state = session.config.stash.get(_STATE, None)
    if state is not None and not (session.config.option.collectonly or session.testsfailed
                                  or _controls_workers(session.config)):
        state["selected"] = list({item.case.id: item.case for item in session.items
                                  if isinstance(item, ConformanceItem)}.values())
        if state["selected"]:
            _run_share(session.config, state)
    return (yield)


def _worker(config: pytest.Config) -> tuple[int, int, Path] | None:
    """(this worker's index, the number of workers, the shared directory) under xdist, else None."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or SHARE_DIR_KEY not in workerinput:
        return None
    index, count = int(workerinput["workerid"].removeprefix("gw")), int(workerinput["workercount"])
    return index, count, Path(workerinput[SHARE_DIR_KEY])


def _share(selected: list[Any], index: int, count: int) -> list[Any]:
    """The cases worker `index` of `count` sends (both modes of a case go together: they are judged together)."""
    return [case for position, case in enumerate(selected) if position % count == index]


def _run_share(config: pytest.Config, state: dict[str, Any]) -> None:
    """Send this process's share and keep the results; a worker leaves them, and a done mark, for the others."""
    from conformance.report.run.write import write_reports
    from conformance.run.driver import Target
    from conformance.run.engine import run

    option = config.getoption
    worker = _worker(config)
    cases, out_dir = state["selected"], option("conformance_out")
    if worker is not None:
        index, count, share_dir = worker
        cases, out_dir = _share(cases, index, count), share_dir / f"gw{index}"
        out_dir.mkdir(parents=True, exist_ok=True)
    target = Target(base_url=option("conformance_base_url"), model=option("conformance_model"),
                    profile=option("conformance_profile"), api_key=_api_key(config),
                    timeout=option("conformance_timeout"), **forcing_fields(option("conformance_forcing")))
    failure = ""
    try:
        if cases:
            output = run(cases, target, out_dir, concurrency=option("conformance_concurrency"),
                         markers=state["markers"], allowed_skips=option("conformance_allow_skip"))
            _keep(state, output.results, output.transcripts)
            if worker is None and out_dir is not None:
                write_reports(out_dir, output.results, output.stamp, output.transcripts)
    except Exception as exc:  # every item of the share fails with it, once, instead of a traceback each
        failure = state["failure"] = f"{type(exc).__name__}: {target.redact(str(exc))}"
    if worker is not None:
        (out_dir / DONE_FILE).write_text(failure, "utf-8")


def _api_key(config: pytest.Config) -> str:
    return config.getoption("conformance_api_key") or os.environ.get("OPENAI_API_KEY") or "EMPTY"


def _keep(state: dict[str, Any], results: list[Any], transcripts: list[Any]) -> None:
    state["results"].update({(r.case_id, r.mode): r for r in results})
    state["durations"].update({(t.case_id, t.mode): t.duration for t in transcripts})


def _result(item: ConformanceItem) -> Any:
    """The item's result: from this process's share, or (xdist) from the worker whose share holds its case."""
    state = item.config.stash[_STATE]
    key = (item.case.id, item.mode)
    if key not in state["results"] and state["failure"] is None:
        worker = _worker(item.config)
        if worker is not None:
            _read_share(item, state, worker)
    if key not in state["results"]:
        pytest.fail(f"the conformance run failed: {state['failure'] or 'no result was recorded'}", pytrace=False)
    return state["results"][key]


def _read_share(item: ConformanceItem, state: dict[str, Any], worker: tuple[int, int, Path]) -> None:
    from conformance.record.recording import read_transcripts
    from conformance.record.results import RESULTS_FILE, read_results
    from conformance.record.transcript import TRANSCRIPTS_FILE
    from conformance.run.engine import request_count

    _, count, share_dir = worker
    owner_index = [case.id for case in state["selected"]].index(item.case.id) % count
    owner = share_dir / f"gw{owner_index}"
    budget = item.config.getoption("conformance_timeout") * request_count(_share(state["selected"], owner_index, count))
    deadline = time.monotonic() + budget + SHARE_WAIT_SLACK
    while not (owner / DONE_FILE).is_file():
        if time.monotonic() > deadline:
            state["failure"] = f"worker {owner.name} did not finish its share in time"
            return
        time.sleep(0.05)
    failure = (owner / DONE_FILE).read_text("utf-8")
    if failure:
        state["failure"] = f"{failure} (in worker {owner.name})"
        return
    _keep(state, read_results(owner / RESULTS_FILE), read_transcripts(owner / TRANSCRIPTS_FILE))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A conformance item's duration is its own request's (from the transcript), billed to the phase
    that gives its outcome; the other phases only look results up."""
    report = yield
    if isinstance(item, ConformanceItem):
        duration = item.config.stash[_STATE]["durations"].get((item.case.id, item.mode), 0.0)
        outcome_phase = "setup" if report.when == "setup" and report.outcome != "passed" else "call"
        report.duration = duration if report.when == outcome_phase else 0.0
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Not green when no conformance item was judged; under xdist, the controller writes the reports."""
    state = session.config.stash.get(_STATE, None)
    if state is None or hasattr(session.config, "workerinput"):
        return
    share_dir = state["share_dir"]
    if share_dir is not None:
        _write_merged_reports(session.config, share_dir)
        shutil.rmtree(share_dir, ignore_errors=True)
    if session.config.pluginmanager.get_plugin("conformance-tally").nothing_judged():
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    tally = config.pluginmanager.get_plugin("conformance-tally")
    reason = tally.nothing_judged() if tally is not None and not hasattr(config, "workerinput") else None
    if reason:
        terminalreporter.write_line(f"conformance: {reason}", red=True)


def _write_merged_reports(config: pytest.Config, share_dir: Path) -> None:
    """The reports of an xdist run: every worker's share put together into --conformance-out."""
    from conformance.record.recording import RecordingFile, make_header, read_header, read_transcripts
    from conformance.record.results import RESULTS_FILE, read_results
    from conformance.record.run_dir import write_results
    from conformance.record.stamp import stamp_of_recording
    from conformance.record.transcript import TRANSCRIPTS_FILE, JsonLinesWriter
    from conformance.report.run.write import write_reports

    out_dir = config.getoption("conformance_out")
    shares = sorted(path for path in share_dir.glob("gw*") if (path / RESULTS_FILE).is_file())
    if out_dir is None or not shares:
        return
    results = [r for share in shares for r in read_results(share / RESULTS_FILE)]
    transcripts = [t for share in shares for t in read_transcripts(share / TRANSCRIPTS_FILE)]
    first = read_header(shares[0] / TRANSCRIPTS_FILE, "transcripts")
    if first is None:
        return
    state = config.stash[_STATE]
    ran = {t.case_id for t in transcripts}

    def header(file: RecordingFile) -> dict[str, Any]:  # the whole run's: every share's cases
        return make_header(file, cases=[c for c in state["cases"] if c.id in ran], markers=first["markers"],
                           server=first["server"], created_at=first["created_at"])

    with JsonLinesWriter(out_dir / TRANSCRIPTS_FILE) as writer:
        writer.write(header("transcripts"))
        for transcript in transcripts:
            writer.write(transcript.to_dict())
    write_results(out_dir / RESULTS_FILE, results, header("results"))
    if transcripts:
        write_reports(out_dir, results, stamp_of_recording(transcripts), transcripts)
