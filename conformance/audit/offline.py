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

from conformance.audit.roundtrip.cuts import NO_TOKENIZER
from conformance.audit.template_rules import Finding
from conformance.formats.checkpoint_files import TOKENIZER
from conformance.formats.turn_text import Subject
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


def case_probes(subject: Subject) -> tuple[list[dict[str, Any]], int]:
    """The shipped chat cases as matrix probes that exercise `subject`'s own template, and how many were left
    out. A format-independent case's turn is rendered with the checkpoint's chat template (in the worker); a
    forced output, written in one format, is kept only when it holds one of the template's own delimiters
    (a Hermes `<tool_call>` text is plain content to a Gemma 4 template: every parser agrees on it, which
    says nothing about the template)."""
    from conformance.suite.cases import load_suite
    from conformance.suite.format_cases import assistant_message

    delimiters = [text for text in subject.delimiters if text != subject.eos]
    probes, left_out = [], 0
    for case in load_suite():
        if case.endpoint != "chat" or (case.turn is None and case.force is None):
            continue
        probe = {"origin": f"case {case.id}", "messages": case.request.get("messages", []),
                 "tools": case.request.get("tools", [])}
        if case.turn is not None:
            probes.append({**probe, "message": assistant_message(case.turn)})
        elif any(delimiter in case.force for delimiter in delimiters):
            probes.append({**probe, "raw": case.force})
        else:
            left_out += 1
    return probes, left_out


def _shown(raw: str) -> str:
    """The raw text as a code span with escapes (it goes into Markdown and onto terminals)."""
    return code_span(visible(raw if len(raw) <= SHOWN_RAW_CHARS else raw[:SHOWN_RAW_CHARS] + "…"))


def _roundtrip_record(result: Any, options: OfflineOptions) -> dict[str, Any]:
    return {"status": "error" if result.error else "ran", "reason": result.error, "seed": result.seed,
            "database": str(options.database) if options.database else None,
            "examples_asked": options.examples, "examples": result.examples, "cuts": result.cuts,
            "token_cuts_skipped": result.token_cuts_skipped, "failures": list(result.failures.values())}


def skipped(reason: str, options: OfflineOptions) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason, "seed": options.seed, "database": None,
            "examples_asked": options.examples,
            "examples": 0, "cuts": {}, "token_cuts_skipped": None, "failures": []}


def tokenizer_of(audit: Any) -> Path | str:
    """The checkpoint's tokenizer.json for the round trip's token cuts, or why there is none."""
    if TOKENIZER in audit.file_paths:
        return Path(audit.file_paths[TOKENIZER])
    if audit.source == "hub":
        return f"{NO_TOKENIZER} (read on disk only: a Hub checkpoint's is not fetched)"
    return NO_TOKENIZER


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
                                     "inputs": 0, "inputs_left_out": 0, "agreeing_inputs": 0, "disagreements": []}
        return
    probes, left_out = case_probes(subject) if options.implementations is not None else ([], 0)
    probes += CAST_PROBES if options.implementations is not None else []
    result = bounded_roundtrip(subject, max(options.examples, 0), options.seed, options.database, probes,
                               tokenizer=tokenizer_of(audit))
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
        audit.implementations = build_matrix(options.implementations, subject.response_template, inputs, left_out)
        for entry in audit.implementations["disagreements"]:
            if entry["explained"] is None:
                sides = " vs ".join("/".join(group["implementations"]) for group in entry["groups"])
                audit.offline_findings.append(Finding(
                    "implementations-disagree", f"{entry['mode']}: {sides} on {entry['inputs']} input(s), "
                    f"shortest {_shown(entry['input']['raw'])} ({entry['input']['origin']})"))
