"""JUnit XML: one <testsuite> per profile, one <testcase> per case x mode (x repeat)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.results import CaseResult, summarize


def render(results: Sequence[CaseResult], stamp: Mapping[str, Any]) -> str:
    root = ET.Element("testsuites", name="conformance")
    profiles = sorted({r.profile for r in results}) or [str(stamp.get("profile") or "")]
    for profile in profiles:
        subset = [r for r in results if r.profile == profile]
        counts = summarize(subset).counts
        suite = ET.SubElement(
            root, "testsuite", name=f"conformance.{profile}", tests=str(len(subset)),
            failures=str(counts["fail"]), errors=str(counts["error"]), skipped=str(counts["skip"]),
            timestamp=str(stamp.get("time") or ""),
        )  # fmt: skip
        properties = ET.SubElement(suite, "properties")
        for key, value in stamp.items():
            text = " ".join(value) if isinstance(value, list) else str(value)
            ET.SubElement(properties, "property", name=key, value=text)
        for result in subset:
            name = result.name + (f"#{result.repeat}" if result.repeat else "")
            testcase = ET.SubElement(suite, "testcase", name=name, classname=f"{profile}.{result.case_id}")
            if result.outcome in ("fail", "error"):
                element = ET.SubElement(testcase, "failure" if result.outcome == "fail" else "error",
                                        message=result.reason[:500])
                element.text = "\n".join(
                    f"{c.name}: {c.reason}\n  expected: {c.expected!r}\n  actual:   {c.actual!r}"
                    for c in result.failed_checks()
                )
            elif result.outcome == "skip":
                ET.SubElement(testcase, "skipped", message=result.reason[:500])
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
