"""The audit's offline checks of a checkpoint's response_template: the round trip against its own chat
template (`--examples`) and the implementations matrix (`--implementations`). Both need no server.

`check(audit, options)` fills `audit.roundtrip` and `audit.implementations` (the report's records) and
adds a finding per round-trip counterexample (with the raw text that reproduces it) and per
implementation disagreement that is not a documented one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.audit.template_rules import Finding
from conformance.util.markdown_text import code_span, visible

DEFAULT_EXAMPLES = 100
DEFAULT_SEED = 0
SHOWN_RAW_CHARS = 300


@dataclass(frozen=True)
class OfflineOptions:
    examples: int = DEFAULT_EXAMPLES  # 0: no round trip
    seed: int = DEFAULT_SEED
    database: Path | None = None  # hypothesis's example database (only when asked for)
    implementations: list | None = None  # registry.Implementation records; None: no matrix


def case_probes() -> list[dict[str, Any]]:
    """Every shipped chat case's forced output with its request, as matrix probes."""
    from conformance.suite.cases import load_suite

    return [{"origin": f"case {case.id}", "messages": case.request.get("messages", []),
             "tools": case.request.get("tools", []), "raw": case.force}
            for case in load_suite() if case.force is not None and case.endpoint == "chat"]


def _shown(raw: str) -> str:
    """The raw text as a code span with escapes (it goes into Markdown and onto terminals)."""
    return code_span(visible(raw if len(raw) <= SHOWN_RAW_CHARS else raw[:SHOWN_RAW_CHARS] + "…"))


def _roundtrip_record(result: Any, options: OfflineOptions) -> dict[str, Any]:
    return {"status": "error" if result.error else "ran", "reason": result.error, "seed": result.seed,
            "database": str(options.database) if options.database else None,
            "examples_asked": options.examples, "examples": result.examples, "failures": list(result.failures.values())}


def skipped(reason: str, options: OfflineOptions) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason, "seed": options.seed, "database": None,
            "examples_asked": options.examples,
            "examples": 0, "failures": []}


def check(audit: Any, options: OfflineOptions) -> None:
    """Run the offline checks the options ask for on one audited checkpoint (see the module docstring)."""
    from conformance.audit.implementations.matrix import CAST_PROBES, build_matrix
    from conformance.audit.roundtrip.roundtrip import subject_of
    from conformance.audit.roundtrip.worker import bounded_roundtrip

    if options.examples <= 0 and options.implementations is None:
        return
    subject = (subject_of(audit.tokenizer_config or {}, audit.file_paths) if audit.status == "ok"
               else f"the checkpoint could not be audited ({audit.status})")
    if audit.status == "ok" and audit.template is not None and audit.template.present and not audit.template.valid:
        subject = "the response_template does not load"
    if isinstance(subject, str):
        if options.examples > 0:
            audit.roundtrip = skipped(subject, options)
        if options.implementations is not None:
            audit.implementations = {"status": "skipped", "reason": subject, "implementations": [], "unavailable": {},
                                     "inputs": 0, "agreeing_inputs": 0, "disagreements": []}
        return
    probes = (case_probes() + CAST_PROBES) if options.implementations is not None else []
    result = bounded_roundtrip(subject, max(options.examples, 0), options.seed, options.database, probes)
    if options.examples > 0:
        audit.roundtrip = _roundtrip_record(result, options)
        for failure in result.failures.values():
            raw = f"; raw output {_shown(failure['raw'])}" if "raw" in failure else ""
            audit.offline_findings.append(Finding(failure["code"], f"round trip (seed {result.seed}): "
                                                  f"{failure['summary']}{raw}"))
        if result.error:
            audit.offline_findings.append(Finding("roundtrip-error", f"round trip not judged: {result.error}"))
    if options.implementations is not None:
        inputs = result.inputs if options.examples > 0 else [i for i in result.inputs if i["origin"] != "round trip"]
        audit.implementations = build_matrix(options.implementations, subject.response_template, inputs)
        for entry in audit.implementations["disagreements"]:
            if entry["explained"] is None:
                sides = " vs ".join("/".join(group["implementations"]) for group in entry["groups"])
                audit.offline_findings.append(Finding(
                    "implementations-disagree", f"{entry['mode']}: {sides} on {entry['inputs']} input(s), "
                    f"shortest {_shown(entry['input']['raw'])} ({entry['input']['origin']})"))
