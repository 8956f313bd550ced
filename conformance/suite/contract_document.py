"""The project's contract document, docs/vllm-0.32-contract.md, and the case references into it.

A case's `references` entry is either `contract N.M`, the section of the document numbered N.M
(its heading carries the anchor `#N.M`), or a web address (`https://...`) for anything else.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from conformance.util.package_paths import DOCS_DIR

CONTRACT_PATH = DOCS_DIR / "vllm-0.32-contract.md"
CONTRACT_REFERENCE = re.compile(r"contract (\d+(?:\.\d+)*)")
WEB_REFERENCE = re.compile(r"https?://\S+")
_SECTION_HEADING = re.compile(r'^#{2,6} <a id="(\d+(?:\.\d+)*)"></a>\1\.? \S', re.MULTILINE)


@cache
def contract_sections(path: Path = CONTRACT_PATH) -> frozenset[str]:
    """The numbers of the document's sections (headings of the form `## <a id="N.M"></a>N.M Title`);
    raises OSError or UnicodeDecodeError when the document cannot be read."""
    return frozenset(_SECTION_HEADING.findall(path.read_text(encoding="utf-8")))


def reference_problem(reference: str) -> str | None:
    """Why a case reference does not resolve, or None when it does."""
    if WEB_REFERENCE.fullmatch(reference):
        return None
    match = CONTRACT_REFERENCE.fullmatch(reference)
    if match is None:
        return (f"reference {reference!r} is neither 'contract N.M' (a section of {CONTRACT_PATH.name}) "
                "nor a web address")
    try:
        sections = contract_sections()
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read the contract document to resolve {reference!r}: {exc}"
    if match.group(1) not in sections:
        known = ", ".join(sorted(sections, key=lambda n: [int(p) for p in n.split(".")]))
        return f"{CONTRACT_PATH.name} has no section {match.group(1)} (its sections: {known})"
    return None
