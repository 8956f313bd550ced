"""The gate's job summary (summary.md): the verdict, what clients must change and the unacknowledged
differences, small enough for a CI step summary; acknowledged detail stays in report.md and report.html."""

from __future__ import annotations

from conformance.report.gate import markdown
from conformance.report.gate.write import write_gate_reports
from tests.gate_samples import full_gate, huge_gate, passing_gate


def test_a_passing_gates_summary_is_its_verdict_and_to_do_list_not_its_whole_report(tmp_path) -> None:
    gate = huge_gate()  # hundreds of acknowledged rows: report.md ran to thousands of lines in a job summary
    paths = write_gate_reports(tmp_path, gate)
    summary, report = paths["summary"].read_text(), paths["markdown"].read_text()
    assert summary.splitlines()[0] == report.splitlines()[0] and "What clients must change" in summary
    assert len(summary.splitlines()) * 5 < len(report.splitlines())


def test_the_summary_lists_every_unacknowledged_difference() -> None:
    gate = full_gate()
    open_ones = {d["case_id"] for d in gate["differences"] if d["acknowledged"] is None}
    summary = markdown.render_summary(gate)
    assert open_ones and all(f"`{case_id}`" in summary for case_id in open_ones)
    assert "None: every difference is acknowledged" in markdown.render_summary(passing_gate())


def test_the_summary_holds_verdict_to_do_and_open_rows_only_and_says_where_the_rest_is() -> None:
    gate = full_gate()
    summary = markdown.render_summary(gate)
    headings = [line for line in summary.splitlines() if line.startswith("#")]
    assert headings[0].startswith("# ❌ FAIL: ") and [h for h in headings if h.startswith("## ")] == [
        "## What clients must change", "## Unacknowledged differences (14)", "## Not in this summary"]
    # No acknowledged detail, no stamps, no timing, no CORS: those are in report.md (which has them all).
    report = markdown.render(gate)
    for detail in ("- **Acknowledged**:", "## Servers compared", "## Timing", "## Browser clients",
                   "#### `tool-choice-required` · `stream` · request newly refused (acknowledged)"):
        assert detail in report and detail not in summary, detail
    acknowledged = [d for d in gate["differences"] if d["acknowledged"]]
    unacknowledged_part = summary[summary.index("\n## Unacknowledged differences"):summary.index("## Not in this summary")]
    assert "`reasoning-then-one-call`" not in unacknowledged_part  # acknowledged only
    pointer = summary[summary.index("## Not in this summary"):]
    assert f"The {len(acknowledged)} acknowledged difference(s) in detail" in pointer
    assert "`report.html?outcome=acknowledged`" in pointer and "`gate.json`: `differences`, each with its `acknowledged`" in pointer


def test_a_passing_gates_summary_of_a_recorded_size_stays_small() -> None:
    """A passing legacy -> hf gate put 2,953 lines (362 KB) into the step summary: most of it acknowledged detail."""
    gate = huge_gate()
    for difference in gate["differences"]:
        difference["acknowledged"] = {"reason": "known", "source": "expect.yaml:1"}
    gate["verdict"].update(outcome="pass", exit_code=0, unacknowledged=0)
    summary, report = markdown.render_summary(gate), markdown.render(gate)
    assert "None: every difference is acknowledged" in summary
    assert len(summary.encode()) < 30_000 < len(report.encode())
