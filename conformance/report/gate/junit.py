"""junit.xml of a gate: one testcase per (case, mode, difference kind), failing when the difference is
unacknowledged; one passing testcase per case without a difference; one skipped testcase per stale
expectation; and a `verdict` testcase that fails or errors exactly when the gate did, so a CI view of
the JUnit file never shows green for a red gate. Well-formed XML for any server string."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from conformance.report.gate import actions, view

MAX_MESSAGE = 500


def xml_text(value: Any, limit: int | None = None) -> str:
    """A string XML 1.0 can hold: control characters, lone surrogates and noncharacters written as
    `\\uXXXX` (newlines kept); ElementTree escapes the markup."""
    text = view.printable(str(value), keep_newlines=True)
    return view.shorten(text, limit) if limit else text


def _element(parent: ET.Element, tag: str, text: str | None = None, **attributes: Any) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: xml_text(v, MAX_MESSAGE) for k, v in attributes.items()})
    if text is not None:
        element.text = xml_text(text)
    return element


def _difference_text(members: Any, labels: Mapping[str, str]) -> str:
    lines = []
    for member in members:
        base, cand = view.difference_values(member)
        action = "".join(actions.client_action(member, labels))
        lines += [f"{member.get('field') or member.get('kind')}: {view.plain(member.get('summary') or '', 400)}",
                  f"  {labels['baseline']} (baseline): {base}", f"  {labels['candidate']} (candidate): {cand}",
                  f"  client action: {action}"]
        ack = view.acknowledgement(member)
        if ack:
            lines.append("  acknowledged: " + "; ".join(f"{k} {v}" for k, v in ack.items()))
    return "\n".join(lines)


def render(gate: Mapping[str, Any]) -> str:
    labels = view.labels(gate)
    groups = view.difference_groups(gate)
    root = ET.Element("testsuites", name="conformance-gate")
    suite = _element(root, "testsuite", name=f"gate.{labels['baseline']}-vs-{labels['candidate']}",
                     timestamp=gate.get("created_at") or "")
    properties = _element(suite, "properties")
    for side in view.SIDES:
        stamp = ((gate.get("sides") or {}).get(side) or {}).get("stamp") or {}
        for key, value in stamp.items():
            _element(properties, "property", name=f"{side}.{key}",
                     value=" ".join(map(str, value)) if isinstance(value, list) else value)
    failures = errors = skipped = 0
    for group in groups:
        testcase = _element(suite, "testcase", classname=group.case_id, name=f"{group.mode} {group.kind}")
        details = _difference_text(group.members, labels)
        if group.acknowledged:
            _element(testcase, "system-out", details)
        else:
            failures += 1
            _element(testcase, "failure", details, message=f"unacknowledged: {group.summary}", type=group.kind)
    with_difference = {g.case_id for g in groups}
    for behaviour in gate.get("behaviours") or []:
        if str(behaviour.get("case_id")) not in with_difference:
            _element(suite, "testcase", classname=str(behaviour.get("case_id")), name="no difference")
    for stale in gate.get("stale") or []:
        skipped += 1
        testcase = _element(suite, "testcase", classname="expectations", name=f"stale {stale.get('source') or ''}")
        _element(testcase, "skipped", message=f"stale expectation ({stale.get('kind')} {view.json_text(stale.get('selector'))}): "
                 f"{stale.get('reason') or ''}")
    _, outcome, line = view.verdict(gate)
    testcase = _element(suite, "testcase", classname="gate", name="verdict")
    if outcome == "FAIL":
        failures += 1
        _element(testcase, "failure", line, message=line, type="verdict")
    elif outcome != "PASS":
        errors += 1
        _element(testcase, "error", line, message=line, type="verdict")
    tests = len(suite.findall("testcase"))
    for element in (root, suite):
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
