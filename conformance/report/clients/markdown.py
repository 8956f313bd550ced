"""`clients.md`: a view of one or more `clients.jsonl` (a run, or a gate's two sides): which client
versions ran, a matrix of client calls x profiles, and every case where a client loses, changes or
rejects (raises on) something the server sent, with the client's own error text."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.clients.compare import OUTCOMES
from conformance.clients.jobs import CLIENT_OF
from conformance.clients.record import ClientFinding, IdiomFinding
from conformance.util.markdown_text import plain, visible

NOTABLE = ("lost", "changed", "raised")


def render(headers: Sequence[Mapping[str, Any]], findings: Sequence[ClientFinding],
           idioms: Sequence[IdiomFinding] = ()) -> str:
    profiles = sorted({f.profile for f in findings})
    apis = [api for api in CLIENT_OF if any(f.api == api for f in findings)]
    lines = ["# Real clients over the recorded answers", ""]
    lines += ["Each recorded answer was served as the server sent it from a loopback replay server to each "
              "client; the client's message is compared with the server's parsed message (reasoning, content, "
              "each call's name and arguments as JSON values).", ""]
    lines += ["| profile | client | version |", "|---|---|---|"]
    for header in headers:
        for client, version in header["clients"].items():
            lines.append(f"| {cell(header.get('profile') or '?')} | {cell(client)} | "
                         f"{cell(version['version'] or 'not run: ' + (version['unavailable'] or ''))} |")
    lines += ["", "## Matrix", "", "| client call | " + " | ".join(cell(p) for p in profiles) + " |",
              "|---|" + "---|" * len(profiles)]
    for api in apis:
        row = [counts_text(Counter(f.outcome for f in findings if f.api == api and f.profile == p)) for p in profiles]
        lines.append(f"| `{api}` | " + " | ".join(row) + " |")
    lines += ["", "## Where a client loses, changes or rejects something", ""]
    notable = [f for f in findings if f.outcome in NOTABLE]
    if not any(f.outcome != "not_run" for f in findings):
        lines.append("Nothing to tell: no client call ran (clients.jsonl gives each call's reason).")
    elif not notable:
        lines.append("Nowhere: every client call that ran rebuilt the server's message (or carried its refusal).")
    else:
        lines += ["| profile | client call | case | mode | outcome | what the client did |", "|---|---|---|---|---|---|"]
        for f in sorted(notable, key=lambda f: (f.profile, list(CLIENT_OF).index(f.api), f.case_id, f.mode)):
            lines.append(f"| {cell(f.profile)} | `{f.api}` | {cell(f.case_id)} | {f.mode} | {f.outcome} | "
                         f"{cell((f.error or f.reason)[:300])} |")
    lines += ["", "## When the tool name is first exposed (streams)", "",
              "Per streaming call and profile: of the streams that carry a call, how many expose the name before "
              "the client's last item, and how many only with it (the server's chunk is where the name first "
              "arrived).", "", "| profile | client call | before the last item | only with the last item | never |",
              "|---|---|---|---|---|"]
    for profile in profiles:
        for api in apis:
            calls = [f for f in findings if f.api == api and f.profile == profile and f.server_first_name_chunk]
            if not calls:
                continue
            early = sum(1 for f in calls if f.first_name_item and f.items and f.first_name_item < f.items)
            late = sum(1 for f in calls if f.first_name_item and f.first_name_item == f.items)
            lines.append(f"| {cell(profile)} | `{api}` | {early} | {late} | {len(calls) - early - late} |")
    if idioms:
        lines += ["", "## Client idioms: what the caller gets", "",
                  "Each idiom sent its case's body (cases/client_idioms.yaml) and was answered with the case's "
                  "recorded non-streaming answer.", "",
                  "| profile | idiom | case | status | what the caller gets |", "|---|---|---|---|---|"]
        for idiom in sorted(idioms, key=lambda i: (i.profile, i.case_id, i.idiom)):
            lines.append(f"| {cell(idiom.profile)} | {cell(idiom.idiom)} | {cell(idiom.case_id)} | {idiom.status} | "
                         f"{'raises ' if idiom.raised else ''}{cell(idiom.surfaced[:300])} |")
    return "\n".join(lines) + "\n"


def cell(text: str) -> str:
    """Plain text in a table cell, shown literally on one line."""
    return plain(visible(text)).replace("|", "\\|")


def counts_text(counts: Counter[str]) -> str:
    """`61 same, 5 raised`: the outcomes counted, in OUTCOMES order; `-` for none."""
    if not counts:
        return "-"
    return ", ".join(f"{counts[o]} {o.replace('_', ' ')}" for o in OUTCOMES if counts[o])
