"""junit.xml against a published JUnit schema, with hostile server text in it (fast tier).

The schema is the Apache Ant JUnit XSD (Windy Road) as the `ub-test-reports` package ships it (test
extra). Jenkins' junit-10.xsd adds `<skipped message>` to a testcase and a `skipped` count to a
suite, which the Ant schema predates; `jenkins_schema()` adds exactly those two to the Ant one.
"""

from __future__ import annotations

import copy
import importlib.util
import socket
from pathlib import Path

import pytest
from lxml import etree

from conformance.record.outcomes import Check
from conformance.record.results import CaseResult
from conformance.record.stamp import make_stamp
from conformance.report.run import junit
from conformance.report.run.write import write_reports
from tests.engine_helpers import STAMP, response_transcript, stream_transcript

XS = "{http://www.w3.org/2001/XMLSchema}"
HOSTILE = "bell\x07 esc\x1b[31m nul-ish\x01 del\x7f lone\ud800 nonchar\uffff ]]> <tool_call> & \"q\" 'a'"


def ant_schema_tree() -> etree._ElementTree:
    spec = importlib.util.find_spec("ub_test_reports")
    assert spec is not None and spec.submodule_search_locations, "install the test extra (ub-test-reports)"
    return etree.parse(str(Path(spec.submodule_search_locations[0]) / "schemas" / "JUnit.xsd"))


def jenkins_schema() -> etree.XMLSchema:
    """The Ant schema plus junit-10.xsd's `<skipped message>` in a testcase and `skipped` on a suite."""
    tree = copy.deepcopy(ant_schema_tree())
    choice = tree.find(f".//{XS}element[@name='testcase']/{XS}complexType/{XS}choice")
    skipped = etree.SubElement(choice, f"{XS}element", name="skipped")
    extension = etree.SubElement(etree.SubElement(etree.SubElement(skipped, f"{XS}complexType"), f"{XS}simpleContent"),
                                 f"{XS}extension", base="pre-string")
    etree.SubElement(extension, f"{XS}attribute", name="message", type="xs:string")
    etree.SubElement(tree.find(f"{XS}complexType[@name='testsuite']"), f"{XS}attribute", name="skipped", type="xs:int")
    return etree.XMLSchema(tree)


def result(case_id: str, mode: str, outcome: str, reason: str = "", checks=(), profile: str = "hf") -> CaseResult:
    return CaseResult(case_id, mode, profile, outcome, reason, checks=list(checks))


def hostile_results() -> list[CaseResult]:
    leak = Check("marker_leak", "fail", reason=f"leaked {HOSTILE}", expected={"content": HOSTILE}, actual=HOSTILE)
    return [
        result("one-call", "non-stream", "fail", reason=f"marker_leak: {HOSTILE}", checks=[leak]),
        result("one-call", "stream", "error", reason=f"http: 500 {HOSTILE}",
               checks=[Check("http", "error", reason=f"500 {HOSTILE}")]),
        result("one-call", "stream", "pass", profile="legacy"),
    ]


def stamp_with(server_version: str) -> dict:
    return make_stamp({**STAMP.__dict__, "version": server_version, "args": ("--tool-call-parser", "hf")})


def test_hostile_text_stays_valid_under_the_ant_schema(tmp_path: Path) -> None:
    text = junit.render(hostile_results(), stamp_with(f"0.32.0 {HOSTILE}"))
    (tmp_path / "junit.xml").write_text(text, "utf-8")  # a lone surrogate would not even encode
    document = etree.parse(str(tmp_path / "junit.xml"))
    schema = etree.XMLSchema(ant_schema_tree())
    assert schema.validate(document), schema.error_log
    failure = document.find(".//testcase[@name='one-call[non-stream]']/failure")
    assert failure.get("type") == "marker_leak"
    assert "bell#x07 esc#x1B[31m nul-ish#x01 del#x7F lone#xD800 nonchar#xFFFF ]]> <tool_call> & \"q\"" in failure.get("message")
    assert "<tool_call>" in failure.text and "#x1B" in failure.text
    assert document.find(".//property[@name='server_version']").get("value").startswith("0.32.0 bell#x07")


def test_every_testcase_gets_its_requests_time_and_the_suite_its_time_host_and_total(tmp_path: Path) -> None:
    stream = stream_transcript([{"choices": []}], case_id="one-call")
    stream.duration = 1.25
    plain = response_transcript({"content": "hi"}, "stop", case_id="one-call")
    plain.duration = 0.5
    results = [result("one-call", "stream", "pass"), result("one-call", "non-stream", "pass"),
               result("gone", "stream", "skip", reason="no expectation for profile hf")]
    stamp = stamp_with("0.32.0") | {"recorded_at": "2026-12-01T09:30:05+01:00"}
    paths = write_reports(tmp_path, results, stamp, [stream, plain])
    document = etree.parse(str(paths["junit"]))
    schema = jenkins_schema()
    assert schema.validate(document), schema.error_log
    times = {case.get("name"): case.get("time") for case in document.iter("testcase")}
    assert times == {"one-call[stream]": "1.250", "one-call[non-stream]": "0.500", "gone[stream]": "0.000"}
    suite = document.find("testsuite")
    assert (suite.get("time"), suite.get("timestamp"), suite.get("skipped")) == ("1.750", "2026-12-01T08:30:05", "1")
    assert suite.get("hostname") == socket.gethostname()
    assert not etree.XMLSchema(ant_schema_tree()).validate(document)  # the `skipped` parts are junit-10's


@pytest.mark.parametrize("outcomes", [("pass",), ("fail", "error", "skip"), ()])
def test_any_mix_of_outcomes_is_valid(outcomes: tuple[str, ...]) -> None:
    results = [result(f"case-{i}", "stream", o, reason=f"{o} because {HOSTILE}") for i, o in enumerate(outcomes)]
    schema = jenkins_schema()
    assert schema.validate(etree.fromstring(junit.render(results, stamp_with("0.32.0")).encode())), schema.error_log
