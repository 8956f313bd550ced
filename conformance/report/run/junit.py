"""JUnit XML: one <testsuite> per profile, one <testcase> per case x mode (x repeat).

The document is valid under the Apache Ant JUnit schema (the Windy Road XSD most CI tools read) with
the one thing Jenkins' junit-10.xsd adds that this report needs: `<skipped>` and the suite's `skipped`
count. Whatever a server sent stays well-formed: characters XML 1.0 forbids (control characters such
as \\x01 or \\x1b, lone surrogates) are shown as `#xNN`, as pytest's own JUnit writer does.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from conformance.record.results import CaseResult, summarize
from conformance.record.transcript import Transcript

MESSAGE_BUDGET = 500  # characters of the `message` attribute; the element's text has the whole story
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\u007e\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(value: object) -> str:
    """`value` as text XML 1.0 can carry: each forbidden character (and DEL) written as `#xNN`."""
    return _NOT_XML.sub(lambda match: f"#x{ord(match.group()):02X}", str(value))


def _timestamp(stamp: Mapping[str, Any]) -> str:
    """When the run was recorded, in UTC, in the schema's form (`YYYY-MM-DDTHH:MM:SS`, no zone)."""
    try:
        moment = datetime.fromisoformat(str(stamp.get("recorded_at") or stamp.get("time")))
    except ValueError:
        moment = datetime.now(timezone.utc)
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def render(results: Sequence[CaseResult], stamp: Mapping[str, Any], transcripts: Sequence[Transcript] = ()) -> str:
    """The JUnit document; each testcase's `time` is its request's duration from `transcripts` (0 without one)."""
    durations = {(t.case_id, t.mode, t.profile, t.repeat): t.duration for t in transcripts}
    hostname = xml_safe(socket.gethostname() or "localhost")
    root = ET.Element("testsuites")
    profiles = sorted({r.profile for r in results}) or [str(stamp.get("profile") or "")]
    for number, profile in enumerate(profiles):
        subset = [r for r in results if r.profile == profile]
        counts = summarize(subset).counts
        times = [durations.get((r.case_id, r.mode, r.profile, r.repeat), 0.0) for r in subset]
        suite = ET.SubElement(
            root, "testsuite", name=xml_safe(f"conformance.{profile}"), tests=str(len(subset)),
            failures=str(counts["fail"]), errors=str(counts["error"]), time=_seconds(sum(times)),
            timestamp=_timestamp(stamp), hostname=hostname, package="conformance", id=str(number),
        )  # fmt: skip
        if counts["skip"]:  # junit-10's count; left out at 0, so a run without skips is valid under the Ant schema
            suite.set("skipped", str(counts["skip"]))
        properties = ET.SubElement(suite, "properties")
        for key, value in stamp.items():
            text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            ET.SubElement(properties, "property", name=key, value=xml_safe(text))
        for result, seconds in zip(subset, times):
            _testcase(suite, result, profile, seconds)
        ET.SubElement(suite, "system-out")
        ET.SubElement(suite, "system-err")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _testcase(suite: ET.Element, result: CaseResult, profile: str, seconds: float) -> None:
    name = result.name + (f"#{result.repeat}" if result.repeat else "")
    testcase = ET.SubElement(suite, "testcase", name=xml_safe(name), classname=xml_safe(f"{profile}.{result.case_id}"),
                             time=_seconds(seconds))
    message = xml_safe(result.reason[:MESSAGE_BUDGET])
    if result.outcome in ("fail", "error"):
        checks = result.failed_checks()
        element = ET.SubElement(testcase, "failure" if result.outcome == "fail" else "error", message=message,
                                type=xml_safe(checks[0].name if checks else result.outcome))
        element.text = xml_safe("\n".join(
            f"{c.name}: {c.reason}\n  expected: {c.expected!r}\n  actual:   {c.actual!r}" for c in checks
        ) or result.reason)
    elif result.outcome == "skip":
        ET.SubElement(testcase, "skipped", message=message)
