"""The Markdown of a checkpoint's offline records (round trip, implementations matrix) in the audit
report; reads the JSON record only."""

from __future__ import annotations

import json
from typing import Any

from conformance.util.markdown_text import code_span, visible

SHOWN_CHARS = 400


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return code_span(visible(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"))


def cuts_summary(record: dict[str, Any], detail: bool = True) -> str:
    """How a round trip's examples were streamed: per kind of cut, the examples (and, in `detail`, how they
    were cut), or why no example was cut at tokens."""
    parts = []
    for kind in ("token", "character"):
        counts = record["cuts"].get(kind, {})
        if kind == "token" and record["token_cuts_skipped"] is not None:
            parts.append(f"token cuts skipped ({record['token_cuts_skipped']})")
        elif counts:
            ways = f" ({', '.join(f'{how} {count}' for how, count in counts.items())})" if detail else ""
            parts.append(f"{sum(counts.values())} cut at {kind}s{ways}")
    return "; ".join(parts)


def roundtrip_lines(record: dict[str, Any] | None) -> list[str]:
    if record is None:
        return []
    if record["status"] != "ran":
        return [f"- round trip **{record['status']}**: {record['reason']}"]
    failures = record["failures"]
    lines = [f"- round trip: {record['examples']} examples generated of {record['examples_asked']} asked "
             f"(seed {record['seed']}), "
             + (f"**{len(failures)} counterexample(s)**" if failures else "no counterexample")]
    lines.append(f"  - streamed: {cuts_summary(record)}")
    for failure in failures:
        cut = f" ({failure['cut']} cut)" if "cut" in failure else ""
        lines.append(f"  - {failure['code']}{cut}: {failure['summary']}")
        lines.append(f"    - message: {_code(failure['message'])}; tools: {_code([t['function']['name'] for t in failure['tools']])}")
        if "raw" in failure:
            lines.append(f"    - raw output: {_code(failure['raw'])}")
        for key in ("expected", "actual", "chunks"):
            if key in failure:
                lines.append(f"    - {key}: {_code(failure[key])}")
    return lines


def implementations_lines(record: dict[str, Any] | None) -> list[str]:
    if record is None:
        return []
    lines = []
    if record["status"] != "ran":
        lines.append(f"- implementations **{record['status']}**: {record['reason']}")
    else:
        lines.append(f"- implementations ({', '.join(record['implementations'])}): {record['agreeing_inputs']} of "
                     f"{record['inputs']} inputs that exercise its template agree in both modes "
                     f"({record['inputs_left_out']} shipped forced output(s) in another format left out); "
                     f"{len(record['disagreements'])} kind(s) of disagreement")
    lines += [f"  - unavailable {name}: {reason}" for name, reason in record["unavailable"].items()]
    for entry in record["disagreements"]:
        note = entry["explained"] or "**undocumented**"
        lines.append(f"  - {entry['mode']}, {entry['inputs']} input(s) ({note}); shortest, from {entry['input']['origin']}: "
                     f"{_code(entry['input']['raw'])}")
        for group in entry["groups"]:
            lines.append(f"    - {', '.join(group['implementations'])}: {_code(group['answer'])}")
    return lines


def offline_lines(checkpoint: dict[str, Any]) -> list[str]:
    return roundtrip_lines(checkpoint.get("roundtrip")) + implementations_lines(checkpoint.get("implementations"))
