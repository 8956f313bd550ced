"""Every view of a gate written in one go: report.md, summary.md (a CI step's job summary), report.html (with
the chart embedded), timing.png and junit.xml, next to the gate's gate.json."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conformance.report.gate import chart as gate_chart
from conformance.report.gate import html as gate_html
from conformance.report.gate import junit as gate_junit
from conformance.report.gate import markdown as gate_markdown
from conformance.util.files import write_atomically

REPORT_FILES = {"markdown": "report.md", "summary": "summary.md", "html": "report.html", "chart": "timing.png",
                "junit": "junit.xml"}


def write_gate_reports(out_dir: Path | str, gate: Mapping[str, Any]) -> dict[str, Path]:
    """Write the four reports of `gate` into `out_dir`; returns their paths by kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / name for kind, name in REPORT_FILES.items()}
    chart = gate_chart.render(gate)
    write_atomically(paths["chart"], chart)  # each whole or not at all
    write_atomically(paths["markdown"], gate_markdown.render(gate))
    write_atomically(paths["summary"], gate_markdown.render_summary(gate))
    write_atomically(paths["html"], gate_html.render(gate, chart))
    write_atomically(paths["junit"], gate_junit.render(gate))
    return paths
