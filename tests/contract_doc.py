"""Reading the contract document's citations: which cases and tests each section names."""

from __future__ import annotations

import re
from pathlib import Path

_SECTION = re.compile(r'^#{2,6} <a id="(\d+(?:\.\d+)*)"></a>', re.MULTILINE)
_CITATION = re.compile(r"\(((?:cases|tests): [^()]*)\)")


def citations(text: str) -> dict[str, dict[str, set[str]]]:
    """{section number: {"cases": ids, "tests": node ids}} from the `(cases: ...)` and `(tests: ...; cases:
    ...)` citations of each section (a heading's section runs to the next heading)."""
    found: dict[str, dict[str, set[str]]] = {}
    starts = list(_SECTION.finditer(text))
    for start, end in zip(starts, [*starts[1:], None]):
        body = " ".join(text[start.end(): end.start() if end else None].split())
        named = found.setdefault(start.group(1), {"cases": set(), "tests": set()})
        for citation in _CITATION.findall(body):
            for part in citation.split(";"):
                kind, _, items = part.strip().partition(": ")
                named[kind].update(re.findall(r"`([^`]+)`", items))
    return found


def sections_naming(text: str) -> dict[str, set[str]]:
    """{case id: the sections that cite it}."""
    by_case: dict[str, set[str]] = {}
    for section, named in citations(text).items():
        for case_id in named["cases"]:
            by_case.setdefault(case_id, set()).add(section)
    return by_case


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")
