"""The audit on a terminal or in a log, read from the JSON report only: a legend, then a short block per
checkpoint (its state in words, every predicted server's verdicts, one line per finding, skip, error or
unmet expectation) and a closing count. No line is wider than `WIDTH`; text wraps between words. A finding's,
a skip's or a refusal's message is cut to one line (the JSON and Markdown reports hold it whole); an error or
an unmet expectation is shown whole."""

from __future__ import annotations

from typing import Any

from conformance.report.audit.offline import cuts_summary
from conformance.util.markdown_text import visible

WIDTH = 80
INDENT = "  "
KEEP_TOGETHER = "\u00a0"  # joins the words of one unit (`vLLM 0.32 y/y/y`): textwrap does not break there
CONFIGURATION_WORDS = {"tool_call_parser_hf": "tool", "reasoning_parser_hf": "reasoning", "both": "both"}
SHORT_VERDICTS = {True: "y", False: "n", "starts": "y", "refuses_to_start": "n"}  # else the HTTP status
LEGEND = ("Verdicts per server for tool/reasoning/both (--tool-call-parser hf, --reasoning-parser hf, both; "
          "SGLang's parser is response_template): y starts, n does not start, 500 or 400 starts, then answers "
          "every chat request (400: every one with tools) with that HTTP status.")


def wrapped(text: str, indent: str = "", hang: str = INDENT) -> list[str]:
    """`text` in lines of at most WIDTH columns, broken between words; a word wider than a line (a long path)
    fills the line and breaks after a `/` where it can, else where it must. Lines after the first are
    indented by `hang` more."""
    lines: list[str] = []
    line = indent
    for word in (word for word in text.split(" ") if word):
        gap = " " if line.strip() else ""
        if len(line) + len(gap) + len(word) <= WIDTH:
            line += gap + word
            continue
        if len(indent + hang) + len(word) <= WIDTH:  # it fits on a line of its own
            lines.append(line)
            line = indent + hang + word
            continue
        line += gap
        while len(line) + len(word) > WIDTH:
            room = WIDTH - len(line)
            slash = word.rfind("/", 0, room)
            if slash == -1 and line.strip():  # no break in this line's room: start the next
                lines.append(line.rstrip())
                line = indent + hang
                continue
            cut = slash + 1 if slash != -1 else room
            lines.append(line + word[:cut])
            line, word = indent + hang, word[cut:]
        line += word
    return [entry.replace(KEEP_TOGETHER, " ") for entry in lines + [line]]


def one_line(text: str, indent: str = INDENT) -> str:
    """`text` on one line of at most WIDTH columns: cut at a word with `…` when longer."""
    line = indent + " ".join(visible(text).split())
    if len(line) <= WIDTH:
        return line
    cut = line[:WIDTH - 1]
    if " " in cut[len(indent):]:
        cut = cut[:cut.rindex(" ")]
    return cut + "…"


def _short(verdict: dict[str, Any]) -> str:
    key = verdict["starts"] if "starts" in verdict else verdict["outcome"]
    return SHORT_VERDICTS.get(key, str(verdict.get("http_status")))


def _main_predictor(predictors: list[dict[str, str]]) -> dict[str, str]:
    """The predicted server the state names: the first that predicts start-up (vLLM 0.32)."""
    return next(predictor for predictor in predictors if predictor["kind"] == "startup")


def _startup_words(label: str, verdicts: dict[str, dict[str, Any]]) -> str:
    starting = [CONFIGURATION_WORDS[name] for name, verdict in verdicts.items() if verdict["starts"]]
    if len(starting) == len(verdicts):
        return f"{label} starts"
    if not starting:
        return f"{label} does not start"
    return f"{label} starts with {' and '.join(starting)} only"


def checkpoint_state(predictors: list[dict[str, str]], checkpoint: dict[str, Any]) -> str:
    """What the audit of one checkpoint came to, in words: whether it could be read (else its status), whether
    the main predicted server starts its hf parsers on it, its findings, a skipped round trip, `expect`."""
    parts = [] if checkpoint["status"] == "ok" else [checkpoint["status"].replace("_", " ")]
    main = _main_predictor(predictors)
    if checkpoint[main["key"]] is not None:
        parts.append(_startup_words(main["label"], checkpoint[main["key"]]))
    if findings := len(checkpoint["findings"]):
        parts.append(f"{findings} finding{'s' if findings > 1 else ''}")
    if (checkpoint["roundtrip"] or {}).get("status") == "skipped":
        parts.append("round trip skipped")
    if checkpoint["expect"]:
        parts.append("expect UNMET" if checkpoint["unmet_expectations"] else "expect met")
    return "; ".join(parts)


def _heading(checkpoint: dict[str, Any]) -> str:
    if checkpoint["source"] == "local":
        return f"{visible(checkpoint['id'])} (local)"
    commit, revision = checkpoint["commit"], checkpoint["revision"]
    if commit is None or commit == revision:
        return f"{checkpoint['id']}@{(commit or revision)[:12]}"
    return f"{checkpoint['id']}@{revision} → {commit[:12]}"


def _verdicts_line(report: dict[str, Any], checkpoint: dict[str, Any]) -> list[str]:
    units = []
    for predictor in report["predictors"]:
        verdicts = checkpoint[predictor["key"]]
        shown = "/".join(_short(verdict) for verdict in verdicts.values()) if verdicts is not None else "n/a"
        units.append(f"{predictor['label']} {shown}".replace(" ", KEEP_TOGETHER))
    return wrapped("predicted: " + ", ".join(units), INDENT)


def _template_line(checkpoint: dict[str, Any]) -> str:
    template = checkpoint["response_template"]
    if template is None:
        return ""
    key = checkpoint["metadata_key"] or "no response_template"
    if not template["present"]:
        return f"metadata: {key}"
    return f"metadata: {key}, " + ("valid" if template["valid"] else f"invalid: {template['error']}")


def _offline_lines(checkpoint: dict[str, Any]) -> list[str]:
    lines = []
    roundtrip, matrix = checkpoint["roundtrip"], checkpoint["implementations"]
    if roundtrip is not None:
        if roundtrip["status"] == "ran":
            failures = len(roundtrip["failures"])
            lines.append(f"round trip: {roundtrip['examples']} of {roundtrip['examples_asked']} examples "
                         f"(seed {roundtrip['seed']}), "
                         + (f"{failures} kind(s) of counterexample" if failures else "no counterexample"))
            lines.append(f"round trip streamed: {cuts_summary(roundtrip, detail=False)}")
        else:
            lines.append(f"round trip {roundtrip['status']}: {roundtrip['reason']}")
    if matrix is not None:
        if matrix["status"] == "ran":
            lines.append(f"implementations: {matrix['agreeing_inputs']} of {matrix['inputs']} inputs agree "
                         f"({matrix['inputs_left_out']} forced outputs in another format left out)")
        else:
            lines.append(f"implementations {matrix['status']}: {matrix['reason']}")
        lines += [f"implementation {name} unavailable: {reason}" for name, reason in matrix["unavailable"].items()]
    return lines


def _refusal_line(report: dict[str, Any], checkpoint: dict[str, Any]) -> str:
    """The main predicted server's reason not to start (its first refused configuration's)."""
    main = _main_predictor(report["predictors"])
    refused = [(name, verdict) for name, verdict in (checkpoint[main["key"]] or {}).items() if not verdict["starts"]]
    if not refused:
        return ""
    name, verdict = refused[0]
    return f"{main['label']} ({CONFIGURATION_WORDS[name]}): {verdict['error']}"


def checkpoint_lines(report: dict[str, Any], checkpoint: dict[str, Any]) -> list[str]:
    lines = wrapped(f"{_heading(checkpoint)}: {checkpoint_state(report['predictors'], checkpoint)}")
    if checkpoint["error"]:
        lines += wrapped(f"error: {visible(checkpoint['error'])}", INDENT)
    if template := _template_line(checkpoint):
        lines.append(one_line(template))
    if any(checkpoint[predictor["key"]] is not None for predictor in report["predictors"]):
        lines += _verdicts_line(report, checkpoint)
    if refusal := _refusal_line(report, checkpoint):
        lines.append(one_line(refusal))
    lines += [one_line(f"finding {finding['code']}: {finding['message']}") for finding in checkpoint["findings"]]
    lines += [one_line(line) for line in _offline_lines(checkpoint)]
    lines += [one_line(f"warning: {warning}") for warning in checkpoint["warnings"]]
    for message in checkpoint["unmet_expectations"]:  # whole: the line a CI log is read for
        lines += wrapped(f"UNMET expectation {visible(message)}", INDENT)
    return lines


def _closing(report: dict[str, Any]) -> str:
    checkpoints = report["checkpoints"]
    with_findings = sum(bool(checkpoint["findings"]) for checkpoint in checkpoints)
    skipped = sum((checkpoint["roundtrip"] or {}).get("status") == "skipped" for checkpoint in checkpoints)
    unmet = sum(bool(checkpoint["unmet_expectations"]) for checkpoint in checkpoints)
    unread = sum(checkpoint["status"] != "ok" for checkpoint in checkpoints)
    return (f"{len(checkpoints)} checkpoint(s): {unread} not audited, {with_findings} with findings, "
            f"{skipped} round trip(s) skipped, {unmet} with an unmet expectation. Findings fail the audit "
            "only with --fail-on-findings; the JSON and Markdown reports hold every detail.")


def render_terminal(report: dict[str, Any]) -> str:
    """The report as lines of at most WIDTH columns (see the module docstring)."""
    lines = wrapped(f"response_template audit: the hf parsers of {report['target']} and the other predicted "
                    "servers, predicted from the checkpoint's files", hang="") + wrapped(LEGEND, hang="")
    if not report["complete"]:
        lines += wrapped("(incomplete: the run did not finish)", hang="")
    for checkpoint in report["checkpoints"]:
        lines += [""] + checkpoint_lines(report, checkpoint)
    return "\n".join(lines + [""] + wrapped(_closing(report), hang="")) + "\n"


__all__ = ["WIDTH", "checkpoint_state", "render_terminal"]
