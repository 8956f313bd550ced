"""Text that GitHub-flavoured Markdown shows verbatim: code spans and escaped plain text."""

from __future__ import annotations

import re
from html import escape

_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# emphasis, code, strike-through, links; `_` between two letters or digits (`expected_message`) is plain
_SPECIALS = re.compile(r"[\\`*~]|(?<![^\W_])_|_(?![^\W_])|\](?=[(\[])")


def visible(text: str) -> str:
    """Control and line-separator characters as escapes (`\\n`, `\\u001b`), lone surrogates as `\\udXXX`
    (the text can then be written as UTF-8 and shows on one line)."""
    text = _INVISIBLE.sub(lambda m: _SHORT_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def code_span(text: str) -> str:
    """`text` as a CommonMark code span: a fence longer than any run of backticks inside, padded with a
    space when the text starts or ends with a backtick (or with spaces that would otherwise be stripped)."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    padded = text.startswith("`") or text.endswith("`") or (text[:1] == text[-1:] == " " and text.strip() != "")
    return f"{fence} {text} {fence}" if padded else f"{fence}{text}{fence}"


def plain(text: str) -> str:
    """`text` (already `visible`) as literal Markdown text: special characters backslash-escaped and `<`,
    `>`, `&` as entities (GitHub would otherwise take a `<tool_call>` for an HTML tag)."""
    return escape(_SPECIALS.sub(lambda m: "\\" + m.group(), text), quote=False)
