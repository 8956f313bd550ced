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
