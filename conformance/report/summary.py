"""Views of a summary record (`conformance.compare.summary`): summary.md (fit for `$GITHUB_STEP_SUMMARY`) and a
self-contained summary.html, one row per gate or run with its verdict class and a link to its own report."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from conformance.util.files import write_atomically
from conformance.util.markdown_text import code_span, plain, visible

SUMMARY_FILES = {"markdown": "summary.md", "html": "summary.html"}
MARKS = {"passed": "✅ passed", "needs acknowledging": "⚠️ needs acknowledging", "broke": "❌ broke"}
COLUMNS = ("checkpoint", "format", "servers", "verdict", "report")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a table cell: a pipe, even in a code span, would split it


def _heading(summary: Mapping[str, Any]) -> str:
    counts = summary["counts"]
    return (f"{len(summary['rows'])} gates and runs: " + ", ".join(f"{counts[verdict]} {verdict}" for verdict in MARKS))


def render_markdown(summary: Mapping[str, Any]) -> str:
    lines = ["# Conformance summary", "", _heading(summary), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in summary["rows"]:
        cells = [code_span(visible(row["checkpoint"])), code_span(visible(str(row["format"] or "-"))),
                 code_span(visible(row["servers"])), MARKS[row["verdict"]],
                 f"[{plain(visible(row['directory']))}]({row['report_md'].replace(' ', '%20')})"]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    lines += ["", "Each gate's verdict:", ""]
    lines += [f"- {plain(visible(row['directory']))}: {plain(visible(row['line']))}" for row in summary["rows"]]
    return "\n".join(lines) + "\n"


def render_html(summary: Mapping[str, Any]) -> str:
    rows = "".join(
        f'<tr class="{escape(row["verdict"].replace(" ", "-"))}"><td><code>{escape(visible(row["checkpoint"]))}</code></td>'
        f'<td>{escape(visible(str(row["format"] or "-")))}</td><td>{escape(visible(row["servers"]))}</td>'
        f'<td>{escape(MARKS[row["verdict"]])}</td>'
        f'<td><a href="{escape(row["report_html"])}">{escape(visible(row["directory"]))}</a>'
        f'<div class="line">{escape(visible(row["line"]))}</div></td></tr>'
        for row in summary["rows"])
    head = "".join(f"<th>{escape(column)}</th>" for column in COLUMNS)
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>Conformance summary</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:.3em .6em;vertical-align:top}.passed{background:#e8f5e9}.needs-acknowledging{background:#fff8e1}"
            ".broke{background:#ffebee}.line{color:#555;font-size:.85em}</style></head><body>"
            f"<h1>Conformance summary</h1><p>{escape(_heading(summary))}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></body></html>\n")


def write_summary_reports(out_dir: Path, summary: Mapping[str, Any]) -> dict[str, Path]:
    """summary.md and summary.html of `summary` in `out_dir`; their paths by kind."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {kind: out_dir / name for kind, name in SUMMARY_FILES.items()}
    write_atomically(paths["markdown"], render_markdown(summary))
    write_atomically(paths["html"], render_html(summary))
    return paths
