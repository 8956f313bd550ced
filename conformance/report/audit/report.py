"""Audit reports: the JSON document (shape: `schemas/audit-report.schema.json`), its Markdown and
terminal renderings. Renderings read the JSON document only, so any report file can be re-rendered.

`AuditReportWriter` appends every checkpoint's record to `<report>.partial.jsonl` the moment it is
computed (removed when the run finishes), so nothing is lost if the run dies, and rewrites the report files
(atomically, marked `"complete": false`) at most once a second while the run goes on.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from conformance import __version__
from conformance.audit.checkpoint_audit import OK, CheckpointAudit
from conformance.audit.predictors.registry import PREDICTORS
from conformance.audit.predictors.sglang import SGLANG_CONFIGURATIONS, SGLangVerdict
from conformance.audit.predictors.vllm_032 import CONFIGURATIONS, StartupVerdict
from conformance.audit.predictors.vllm_rs import RUST_CONFIGURATIONS, RustVerdict
from conformance.report.audit.offline import offline_lines
from conformance.util.files import STDOUT, write_atomically
from conformance.util.markdown_text import code_span, visible

TARGET = "vLLM 0.32.0 and 0.33.0"


def audit_to_json(audit: CheckpointAudit) -> dict[str, Any]:
    template = audit.template
    return {
        "id": audit.id,
        "source": audit.source,
        "revision": audit.revision,
        "commit": audit.commit,
        "status": audit.status,
        "error": audit.error,
        "files": audit.files,
        "metadata_key": template.metadata_key if template else None,
        "response_template": {
            "present": template.present,
            "valid": template.valid,
            "error": template.error,
        } if template else None,
        "regions": template.regions if template else None,
        "findings": [{"code": f.code, "message": f.message} for f in audit.findings],
        **{predictor.key: PREDICTION_JSON[predictor.kind](audit.prediction(predictor)) for predictor in PREDICTORS},
        "expect": audit.expect,
        "unmet_expectations": audit.unmet_expectations,
        "warnings": audit.warnings,
        "roundtrip": audit.roundtrip,
        "implementations": audit.implementations,
    }


def _outcome_json(verdicts: dict[str, RustVerdict] | dict[str, SGLangVerdict] | None) -> dict[str, Any] | None:
    if verdicts is None:
        return None
    return {name: {"outcome": verdict.outcome, "error": verdict.error, "http_status": verdict.http_status}
            for name, verdict in verdicts.items()}


def _python_json(verdicts: dict[str, StartupVerdict] | None) -> dict[str, Any] | None:
    if verdicts is None:
        return None
    return {name: {"starts": verdict.starts, "error": verdict.error} for name, verdict in verdicts.items()}


PREDICTION_JSON = {"startup": _python_json, "outcome": _outcome_json}  # by the predictor's kind


def build_report(audits: list[CheckpointAudit], *, started_at: datetime, complete: bool) -> dict[str, Any]:
    ordered = sorted(audits, key=lambda audit: audit.position)
    return {
        "tool": {"name": "conformance", "version": __version__},
        "target": TARGET,
        "generated_at": started_at.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "complete": complete,
        "configurations": CONFIGURATIONS,
        "rust_configurations": RUST_CONFIGURATIONS,
        "sglang_configurations": SGLANG_CONFIGURATIONS,
        "summary": {
            "checkpoints": len(ordered),
            "ok": sum(audit.status == OK for audit in ordered),
            "failed": sum(audit.status != OK for audit in ordered),
            "unmet_expectations": sum(bool(audit.unmet_expectations) for audit in ordered),
        },
        "checkpoints": [audit_to_json(audit) for audit in ordered],
    }


def _outcome(checkpoint: dict, configuration: str, release: str = "vllm_0_32") -> str:
    verdicts = checkpoint.get(release)  # a report written before 0.33 was predicted has no `vllm_0_33`
    if verdicts is None:
        return "n/a"
    return "starts" if verdicts[configuration]["starts"] else "fails"


def _outcomes_033(checkpoint: dict) -> str:
    """vLLM 0.33's outcome per configuration, in CONFIGURATIONS order."""
    if checkpoint.get("vllm_0_33") is None:
        return "n/a"
    return "/".join(_outcome(checkpoint, name, "vllm_0_33") for name in CONFIGURATIONS)


RUST_WORDS = {"starts": "starts", "refuses_to_start": "no start", "starts_but_refuses_requests": "500"}


def _rust_outcomes(checkpoint: dict, release: str = "vllm_0_32_rust") -> str:
    """The Rust frontend's outcome per configuration, in CONFIGURATIONS order."""
    verdicts = checkpoint.get(release)  # a report written before 0.33 was predicted has no `vllm_0_33_rust`
    if verdicts is None:
        return "n/a"
    return "/".join(RUST_WORDS[verdicts[name]["outcome"]] for name in CONFIGURATIONS)


def _rust_details(report: dict, checkpoint: dict) -> list[str]:
    lines = []
    verdicts = [(name, verdict, label) for release, label in (("vllm_0_32_rust", ""), ("vllm_0_33_rust", "vLLM 0.33: "))
                for name, verdict in (checkpoint.get(release) or {}).items()]
    for name, verdict, label in verdicts:
        flags = f"{label}`vllm-rs serve {report['rust_configurations'][name]}`"
        if verdict["outcome"] == "refuses_to_start":
            lines.append(f"- {flags} does not start (its Python engine refuses): {_code(verdict['error'])}")
        elif verdict["outcome"] == "starts_but_refuses_requests":
            lines.append(f"- {flags} starts, but answers every chat request HTTP {verdict['http_status']}: "
                         f"{_code(verdict['error'])}")
    return lines


SGLANG_WORDS = {"starts": "starts", "refuses_to_start": "no start", "starts_but_refuses_tool_requests": "400 tools"}


def _sglang_outcomes(checkpoint: dict) -> str:
    """SGLang's predicted outcome per configuration, in CONFIGURATIONS order."""
    verdicts = checkpoint["sglang_0_5_23"]
    if verdicts is None:
        return "n/a"
    return "/".join(SGLANG_WORDS[verdicts[name]["outcome"]] for name in CONFIGURATIONS)


def _sglang_details(report: dict, checkpoint: dict) -> list[str]:
    lines = []
    for name, verdict in (checkpoint["sglang_0_5_23"] or {}).items():
        flags = f"SGLang `{report['sglang_configurations'][name]}`"
        if verdict["outcome"] == "refuses_to_start":
            lines.append(f"- {flags} would not start (predicted from its code): {_code(verdict['error'])}")
        elif verdict["outcome"] == "starts_but_refuses_tool_requests":
            lines.append(f"- {flags} would start, but answer chat requests with tools HTTP {verdict['http_status']} "
                         f"(predicted from its code): {_code(verdict['error'])}")
    return lines


def _revision(checkpoint: dict) -> str:
    if checkpoint["source"] == "local":
        return "(local)"
    commit = checkpoint["commit"]
    if commit is None:
        return checkpoint["revision"]
    if commit == checkpoint["revision"]:
        return commit[:12]
    return f"{checkpoint['revision']} → {commit[:12]}"


def _template_state(checkpoint: dict) -> str:
    template = checkpoint["response_template"]
    if template is None:
        return "n/a"
    if not template["present"]:
        return "absent"
    return "valid" if template["valid"] else "invalid"


def _expectation(checkpoint: dict) -> str:
    if not checkpoint["expect"]:
        return "—"
    return "UNMET" if checkpoint["unmet_expectations"] else "met"


def _code(text: str) -> str:
    """An inline code span that shows `text` verbatim, whatever backticks are in it."""
    return code_span(visible(text))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


SHORT_NAMES = {"tool_call_parser_hf": "tool", "reasoning_parser_hf": "reasoning", "both": "both"}  # table columns
TABLE_STYLES = {"yes/yes/yes": "green", "no/no/no": "red", "UNMET": "bold red", "met": "green", "ok": "green"}


def _row(checkpoint: dict) -> list[str]:
    """A checkpoint's table cells after its id: revision, status, metadata, template, the outcome
    per configuration (0.32's, then 0.33's and the Rust frontend's in one cell each), expectation."""
    return [_revision(checkpoint), checkpoint["status"], checkpoint["metadata_key"] or "n/a", _template_state(checkpoint),
            *(_outcome(checkpoint, name) for name in CONFIGURATIONS), _outcomes_033(checkpoint), _rust_outcomes(checkpoint),
            _rust_outcomes(checkpoint, "vllm_0_33_rust"), _sglang_outcomes(checkpoint),
            _expectation(checkpoint)]


def render_markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Checkpoint audit: `response_template` and {report['target']} `hf` parser startup",
        "",
        f"Generated {report['generated_at']} by conformance {report['tool']['version']}"
        + ("" if report["complete"] else " (**incomplete: the run did not finish**)") + ".",
        "",
        "Configurations: " + "; ".join(f"`{name}` = `{flags}`" for name, flags in report["configurations"].items()) + ".",
        "",
        "Outcomes on vLLM 0.32 per configuration, then on vLLM 0.33 (column `0.33`, in the same order, with 0.33's"
        " own messages below); `expect` holds for both.",
        "",
        "vLLM 0.32's Rust frontend (`vllm-rs serve`), same configurations: "
        + "; ".join(f"`{name}` = `{flags}`" for name, flags in report["rust_configurations"].items())
        + ". Its column gives them in that order: `starts`, `no start` (the server does not start) or `500`"
        " (it starts, but refuses every chat request); `vllm-rs 0.33` the same for vLLM 0.33's Rust frontend.",
        "",
        "SGLang 0.5.23, same configurations: "
        + "; ".join(f"`{name}` = `{flags}`" for name, flags in report["sglang_configurations"].items())
        + ". SGLang's server cannot run on a machine without CUDA (its kernels on PyPI are CUDA-only): its column is"
        " predicted from the code of its wheel (`conformance/audit/predictors/sglang.py`), in that order: `starts`, `no start`"
        " or `400 tools` (it starts, but refuses every chat request that sends tools).",
        "",
        "| checkpoint | revision → commit | status | metadata | template | " + " | ".join(CONFIGURATIONS)
        + " | 0.33 | vllm-rs | vllm-rs 0.33 | sglang | expect |",
        "|---|---|---|---|---|" + "---|" * len(CONFIGURATIONS) + "---|---|---|---|---|",
    ]
    for checkpoint in report["checkpoints"]:
        lines.append("| " + " | ".join(_cell(cell) for cell in [f"`{checkpoint['id']}`", *_row(checkpoint)]) + " |")
    lines += ["", "## Details", ""]
    for checkpoint in report["checkpoints"]:
        lines += [f"### `{checkpoint['id']}`", ""]
        if checkpoint["commit"]:
            lines.append(f"- commit: `{checkpoint['commit']}` (revision asked: `{checkpoint['revision']}`)")
        if checkpoint["error"]:
            lines.append(f"- **{checkpoint['status']}**: {checkpoint['error']}")
        if checkpoint["files"]:
            lines.append("- files: " + ", ".join(f"`{name}`" for name in checkpoint["files"]))
        template = checkpoint["response_template"]
        if template and template["error"]:
            lines.append(f"- response_template error: {_code(template['error'])}")
        if checkpoint["regions"]:
            lines.append(f"- regions: {checkpoint['regions']}")
        for release, label in (("vllm_0_32", ""), ("vllm_0_33", "vLLM 0.33: ")):
            for name, verdict in (checkpoint.get(release) or {}).items():
                if not verdict["starts"]:
                    lines.append(f"- {label}`{report['configurations'][name]}` fails: {_code(verdict['error'])}")
        lines += _rust_details(report, checkpoint)
        lines += _sglang_details(report, checkpoint)
        lines += [f"- finding ({finding['code']}): {finding['message']}" for finding in checkpoint["findings"]]
        lines += [f"- warning: {warning}" for warning in checkpoint["warnings"]]
        lines += [f"- **unmet expectation**: {message}" for message in checkpoint["unmet_expectations"]]
        lines += offline_lines(checkpoint)
        lines.append("")
    return "\n".join(lines)


def _table_row(checkpoint: dict) -> list[str]:
    """The terminal table's cells: the Markdown row's facts, in words short enough for 80 columns."""
    commit, verdicts = checkpoint["commit"], checkpoint["vllm_0_32"]
    if checkpoint["source"] == "local":
        revision = "local"
    elif commit is None or commit == checkpoint["revision"]:
        revision = (commit or checkpoint["revision"])[:8] if commit else checkpoint["revision"]
    else:
        revision = f"{checkpoint['revision']}→{commit[:8]}"
    template = {"valid": "yes", "invalid": "no"}.get(_template_state(checkpoint), _template_state(checkpoint))
    starts = "/".join("yes" if verdicts[name]["starts"] else "no" for name in CONFIGURATIONS) if verdicts else "n/a"
    metadata = (checkpoint["metadata_key"] or "n/a").removeprefix("response_")
    return [checkpoint["id"], checkpoint["status"], revision, metadata, template, starts, _expectation(checkpoint)]


def render_table(report: dict[str, Any]) -> Any:
    """A rich Table of the report, one row per checkpoint, that fits 80 columns (long cells fold)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"response_template audit ({report['target']} hf parser)", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True, title_justify="left")
    table.add_column("checkpoint", overflow="fold")
    table.add_column("status", overflow="fold")
    # fixed widths for the short cells (a longer revision folds), so that the long ones fold, not these
    for column, width in (("revision", 13), ("key", 8), ("valid", 6),
                          ("starts: " + "/".join(SHORT_NAMES[name] for name in CONFIGURATIONS), 11), ("expect", 6)):
        table.add_column(column, overflow="fold", width=width)
    for checkpoint in report["checkpoints"]:
        cells = _table_row(checkpoint)
        table.add_row(*(Text(cell, style=TABLE_STYLES.get(cell, "")) for cell in cells))
    return table


class AuditReportWriter:
    """Collects audits and keeps what is on disk current (see the module docstring)."""

    REWRITE_INTERVAL_S = 1.0

    def __init__(self, json_path: Path | None = None, markdown_path: Path | None = None,
                 stdout: IO[str] | None = None) -> None:
        self.json_path, self.markdown_path = json_path, markdown_path
        self.stdout = stdout
        self.audits: list[CheckpointAudit] = []
        self.started_at = datetime.now(timezone.utc)
        self._last_rewrite = 0.0
        files = [path for path in (json_path, markdown_path) if path is not None and path != STDOUT]
        for path in files:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.partial_path = files[0].with_name(files[0].name + ".partial.jsonl") if files else None
        if self.partial_path is not None:
            self.partial_path.write_text("", encoding="utf-8")

    def report(self, complete: bool) -> dict[str, Any]:
        return build_report(self.audits, started_at=self.started_at, complete=complete)

    def add(self, audit: CheckpointAudit) -> None:
        self.audits.append(audit)
        if self.partial_path is not None:
            with self.partial_path.open("a", encoding="utf-8") as partial:
                partial.write(json.dumps(audit_to_json(audit), ensure_ascii=False) + "\n")
        if time.monotonic() - self._last_rewrite >= self.REWRITE_INTERVAL_S:
            self._write(self.report(complete=False))

    def interrupt(self) -> None:
        """Write the reports of the audits so far, marked incomplete (the partial records stay)."""
        self._write(self.report(complete=False))

    def finish(self) -> dict[str, Any]:
        report = self.report(complete=True)
        self._write(report, final=True)
        if self.partial_path is not None:
            self.partial_path.unlink(missing_ok=True)
        return report

    def _write(self, report: dict[str, Any], final: bool = False) -> None:
        """Rewrite the report files; standard output gets the finished report only, once."""
        self._last_rewrite = time.monotonic()
        for path, render in ((self.json_path, _json_text), (self.markdown_path, render_markdown)):
            if path == STDOUT:
                if final:
                    (self.stdout or sys.stdout).write(render(report))
                    (self.stdout or sys.stdout).flush()
            elif path is not None:
                write_atomically(path, render(report))


def _json_text(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


__all__ = ["STDOUT", "AuditReportWriter", "audit_to_json", "build_report", "render_markdown", "render_table"]
