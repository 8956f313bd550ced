"""Text that GitHub-flavoured Markdown shows verbatim: invisible characters as escapes, code spans and
escaped plain text. Every Markdown view (run, audit, clients, gate, contract matrix) escapes with these."""

from __future__ import annotations

import re
from html import escape

# Shown as escapes: C0/C1 controls, line/paragraph separators, bidi controls (U+061C, U+200E-F, U+202A-E,
# U+2066-9), zero-widths (U+200B-D, U+2060-4), the BOM, the noncharacters U+FFFE-F and lone surrogates.
# None is visible, harmless or valid in Markdown, HTML and XML alike.
_HIDDEN = "\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffe\uffff\ud800-\udfff"
_INVISIBLE = re.compile(f"[{_HIDDEN}]")
_INVISIBLE_BUT_NEWLINE = re.compile(f"(?!\n)[{_HIDDEN}]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# emphasis, code, strike-through, links; `_` between two letters or digits (`expected_message`) is plain
_SPECIALS = re.compile(r"[\\`*~]|(?<![^\W_])_|_(?![^\W_])|\](?=[(\[])")


def visible(text: str, keep_newlines: bool = False) -> str:
    """`text` with every invisible character written as an escape (`\\n`, `\\t`, `\\u202e`, `\\ud800`), so it
    shows on one line, reads in the order it was sent and can be written as UTF-8; `keep_newlines` keeps `\\n`."""
    pattern = _INVISIBLE_BUT_NEWLINE if keep_newlines else _INVISIBLE
    return pattern.sub(lambda m: _SHORT_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def code_span(text: str) -> str:
    """`text` as a CommonMark code span: a fence longer than any run of backticks inside, padded with a
    space when the text starts or ends with a backtick, or with a space each side that would be stripped."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    padded = text.startswith("`") or text.endswith("`") or (text[:1] == text[-1:] == " " and text.strip(" ") != "")
    return f"{fence} {text} {fence}" if padded else f"{fence}{text}{fence}"


def plain(text: str) -> str:
    """`text` (already `visible`) as literal Markdown text: special characters backslash-escaped and `<`,
    `>`, `&` as entities (GitHub would otherwise take a `<tool_call>` for an HTML tag)."""
    return escape(_SPECIALS.sub(lambda m: "\\" + m.group(), text), quote=False)
