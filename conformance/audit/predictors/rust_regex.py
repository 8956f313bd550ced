"""Rust regex syntax as vLLM 0.32's Rust frontend reads a `response_template` pattern, without Rust.

The frontend parses boundary patterns with the `regex-syntax` crate (0.8.10 in the 0.32.0 binary) and
requires every match to start with one of a finite set of non-empty literals, which it extracts with
`regex_syntax::hir::literal::Extractor` (prefix kind, default limits). This module mirrors the part of
both that decides a verdict:

- `parse(pattern)` reads the Rust syntax (literals and escapes, classes, groups and flags, alternation,
  repetition, assertions) into a small tree, or raises `RustRegexError` with the crate's own error
  text (`regex parse error:` / the pattern / carets under the span / `error: ...`) for the errors a
  Python-syntax template is likely to contain: unclosed or unopened groups, unclosed group names,
  reversed class ranges, unclosed classes, look-around, backreferences, unknown escapes, a repetition
  without an operand.
- `rust_literals.literal_prefixes(tree)` is the extractor (limits: 10 class characters, 10 repetitions, 100 bytes
  per literal, 250 literals) followed by the frontend's own check (every literal's valid UTF-8 prefix
  non-empty): `None` is the frontend's "must start with a literal prefix".

Not mirrored (documented limits of the prediction): a DFA over 16 MiB ("cannot be matched
incrementally"), whitespace inside classes under `(?x)`, class set operations, Unicode property names the crate does not
know, and the multi-line layout of errors in patterns that contain a newline.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field

CLASS_LIMIT = 10  # the literal extractor enumerates classes of at most this many characters
ASSERTION = -1  # a class item that is an assertion escape, such as `[\b]`
NEST_LIMIT = 250  # regex-syntax's default nest limit
BIG = ((0, sys.maxunicode),)  # a class too large to enumerate: only its size matters


class RustRegexError(ValueError):
    """The pattern is not valid Rust regex syntax; `str(error)` is regex-syntax's own text."""


# --- the tree ------------------------------------------------------------------------------------------
# ("lit", char) · ("class", ranges) · ("empty",) · ("rep", min, max|None, greedy, node) · ("cat", nodes)
# · ("alt", nodes) · ("group", name|None, node)


def _error(pattern: str, spans: list[tuple[int, int]], message: str) -> RustRegexError:
    notes, column = "", 0
    for start, end in sorted(spans):
        notes += " " * (start - column) + "^" * max(1, end - start)
        column = start + max(1, end - start)
    return RustRegexError(f"regex parse error:\n    {pattern}\n    {notes}\nerror: {message}")


_PERL = {"d", "D", "s", "S", "w", "W"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_ASSERTIONS = set("bBAz<>")
_META = set("\\.+*?()|[]{}^$#&-~")


@functools.cache
def _case_variants() -> dict[str, frozenset[str]]:
    """Simple case-folding orbits (e.g. k, K and the Kelvin sign), for `(?i)`."""
    orbits: dict[str, set[str]] = {}
    for code in range(sys.maxunicode + 1):
        character = chr(code)
        for other in (character.lower(), character.upper()):
            if len(other) == 1 and other != character:
                merged = orbits.get(character, {character}) | orbits.get(other, {other})
                for member in merged:
                    orbits[member] = merged
    return {character: frozenset(orbit) for character, orbit in orbits.items()}


def _fold(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    if class_size(ranges) > CLASS_LIMIT:  # already past what the extractor enumerates: folding only adds
        return ranges
    codes = {code for start, end in ranges for code in range(start, end + 1)}
    for code in list(codes):
        codes |= {ord(variant) for variant in _case_variants().get(chr(code), ())}
    return normalise_ranges([(code, code) for code in codes])


def normalise_ranges(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((start, end) for start, end in merged)


def class_size(ranges: tuple[tuple[int, int], ...]) -> int:
    return sum(end - start + 1 for start, end in ranges)


@dataclass
class _Parser:
    pattern: str
    position: int = 0
    insensitive: bool = False
    swap_greed: bool = False
    extended: bool = False  # (?x): whitespace and `#` comments outside classes are ignored
    names: dict[str, int] = field(default_factory=dict)  # capture group name -> where it was first given

    def peek(self, offset: int = 0) -> str | None:
        index = self.position + offset
        return self.pattern[index] if index < len(self.pattern) else None

    def fail(self, start: int, end: int, message: str) -> RustRegexError:
        return _error(self.pattern, [(start, end)], message)

    def alternation(self, depth: int) -> tuple:
        branches = [self.concat(depth)]
        while self.peek() == "|":
            self.position += 1
            branches.append(self.concat(depth))
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def concat(self, depth: int) -> tuple:
        items: list[tuple] = []
        while (character := self.peek()) is not None and character != "|":
            if character == ")":
                if depth == 0:
                    raise self.fail(self.position, self.position + 1, "unopened group")
                break
            if self.extended and (character.isspace() or character == "#"):
                end = self.pattern.find("\n", self.position) if character == "#" else self.position
                self.position = len(self.pattern) if end == -1 else end + 1
                continue
            start = self.position
            if character in "*+?{":
                if not items or items[-1][0] == "flags":
                    raise self.fail(start, start + 1, "repetition operator missing expression")
                items[-1] = self.repetition(items[-1], start)
                continue
            item = self.atom(depth)
            if item is not None:
                items.append(item)
        items = [item for item in items if item[0] != "flags"]
        return items[0] if len(items) == 1 else ("cat", items)

    def repetition(self, operand: tuple, start: int) -> tuple:
        character = self.pattern[self.position]
        self.position += 1
        if character == "{":
            minimum = self._decimal(start)
            maximum: int | None = minimum
            if self._space_then(start) == ",":
                self.position += 1
                maximum = None if self._space_then(start) == "}" else self._decimal(start)
            if self._space_then(start) != "}":
                raise self.fail(start, len(self.pattern), "unclosed counted repetition")
            self.position += 1
            if maximum is not None and minimum > maximum:
                raise self.fail(start, self.position, "invalid repetition count range, the start must be <= the end")
        else:
            minimum, maximum = {"*": (0, None), "+": (1, None), "?": (0, 1)}[character]
        greedy = True
        if self.peek() == "?":
            self.position += 1
            greedy = False
        return ("rep", minimum, maximum, greedy != self.swap_greed, operand)

    def _space_then(self, start: int) -> str:
        """Skip spaces inside a counted repetition; the next character (a missing one: unclosed)."""
        while self.peek() is not None and self.peek().isspace():
            self.position += 1
        if self.peek() is None:
            raise self.fail(start, len(self.pattern), "unclosed counted repetition")
        return self.peek()

    def _decimal(self, start: int) -> int:
        self._space_then(start)
        digits_start = self.position
        while (character := self.peek()) is not None and "0" <= character <= "9":
            self.position += 1
        if self.position == digits_start:
            if self.peek() is None:
                raise self.fail(start, len(self.pattern), "unclosed counted repetition")
            raise self.fail(self.position, self.position + 1, "repetition quantifier expects a valid decimal")
        return int(self.pattern[digits_start:self.position])

    def _literal(self, character: str) -> tuple:
        if self.insensitive and len(folded := _fold(((ord(character), ord(character)),))) > 1:
            return ("class", folded)
        return ("lit", character)

    def atom(self, depth: int) -> tuple | None:
        character = self.pattern[self.position]
        start = self.position
        self.position += 1
        if character == "(":
            return self.group(start, depth)
        if character == "[":
            return self.bracket(start, depth)
        if character == ".":
            return ("class", BIG)
        if character in "^$":
            return ("empty",)
        if character == "\\":
            return self.escape(start, in_class=False)
        return self._literal(character)

    def group(self, start: int, depth: int) -> tuple | None:
        if depth >= NEST_LIMIT:
            raise self.fail(start, start + 1, f"exceed the maximum number of nested parentheses/brackets ({NEST_LIMIT})")
        name = None
        if self.peek() == "?":
            lead = self.pattern[self.position + 1:self.position + 3]
            if lead[:1] in ("=", "!") or lead in ("<=", "<!"):
                raise self.fail(start, self.position + 1 + (2 if lead in ("<=", "<!") else 1),
                                "look-around, including look-ahead and look-behind, is not supported")
            if lead[:1] == "P" and lead[1:2] != "<" or lead[:1] == "=":
                raise self.fail(start, start + 3, "unrecognized flag")
            if lead[:1] == "<" or lead == "P<":
                self.position += 2 if lead[:1] == "<" else 3
                name_start = self.position
                end = self.pattern.find(">", self.position)
                if end == -1:
                    raise self.fail(len(self.pattern), len(self.pattern), "unclosed capture group name")
                name = self.pattern[name_start:end]
                if not name:
                    raise self.fail(name_start, name_start, "empty capture group name")
                if name in self.names:
                    first = self.names[name]
                    raise _error(self.pattern, [(first, first + len(name)), (name_start, end)],
                                 "duplicate capture group name")
                self.names[name] = name_start
                self.position = end + 1
            else:
                return self.flags(start, depth)
        saved = (self.insensitive, self.swap_greed, self.extended)
        body = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.fail(start, start + 1, "unclosed group")
        self.position += 1
        self.insensitive, self.swap_greed, self.extended = saved
        return ("group", name, body)

    def flags(self, start: int, depth: int) -> tuple | None:
        self.position += 1
        negate, settings = False, {}
        while (character := self.peek()) not in (":", ")"):
            if character is None:
                raise self.fail(len(self.pattern), len(self.pattern), "expected flag but got end of regex")
            if character == "-":
                negate = True
            elif character in "imsUuRx":
                settings[character] = not negate
            else:
                raise self.fail(self.position, self.position + 1, "unrecognized flag")
            self.position += 1
        self.position += 1
        saved = (self.insensitive, self.swap_greed, self.extended)
        self.insensitive = settings.get("i", self.insensitive)
        self.swap_greed = settings.get("U", self.swap_greed)
        self.extended = settings.get("x", self.extended)
        if character == ")":  # (?flags): applies to the rest of the enclosing group
            return ("flags",)
        body = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.fail(start, start + 1, "unclosed group")
        self.position += 1
        self.insensitive, self.swap_greed, self.extended = saved
        return ("group", None, body)

    def escape(self, start: int, in_class: bool) -> tuple:
        character = self.peek()
        if character is None:
            raise self.fail(start, start + 1, "incomplete escape sequence, reached end of pattern prematurely")
        self.position += 1
        if character in _META or character == " ":
            return self._literal(character)
        if character in _ESCAPES:
            return self._literal(_ESCAPES[character])
        if character in _PERL or character in "pP":
            if character in "pP":
                self._skip_property()
            return ("class", BIG)
        if character in "xuU":
            return self._literal(self._hex(start, character))
        if character.isdigit():
            raise self.fail(start, self.position, "backreferences are not supported")
        if character in _ASSERTIONS:
            if character == "b" and self.peek() == "{":  # inside a class too: `[\b{start}` is unclosed
                self._special_word_boundary(start)
            return ("assertion",) if in_class else ("empty",)
        raise self.fail(start, self.position, "unrecognized escape sequence")

    def _special_word_boundary(self, start: int) -> None:
        """`\\b{start}` and its kin; `\\b{2}` is a repeated `\\b` (the brace is left for the repetition)."""
        following = self.peek(1)
        if following is not None and not (following.isascii() and following.isalpha()):
            return
        end = self.pattern.find("}", self.position)
        if end == -1:
            raise self.fail(start, len(self.pattern), "found either the beginning of a special word boundary or a "
                            "bounded repetition on a \\b with an opening brace, but no closing brace")
        if self.pattern[self.position + 1:end] not in ("start", "end", "start-half", "end-half"):
            raise self.fail(self.position + 1, end, "unrecognized special word boundary assertion, valid choices "
                            "are: start, end, start-half or end-half")
        self.position = end + 1

    def _skip_property(self) -> None:
        if self.peek() == "{":
            self.position = self.pattern.index("}", self.position) + 1
        else:
            self.position += 1

    def _hex(self, start: int, kind: str) -> str:
        if self.peek() == "{":
            end = self.pattern.index("}", self.position)
            digits, self.position = self.pattern[self.position + 1:end], end + 1
        else:
            width = {"x": 2, "u": 4, "U": 8}[kind]
            digits = self.pattern[self.position:self.position + width]
            self.position += width
        try:
            return chr(int(digits, 16))
        except ValueError:
            raise self.fail(start, self.position, "invalid hexadecimal digit") from None

    def bracket(self, start: int, depth: int) -> tuple:
        if depth >= NEST_LIMIT:
            raise self.fail(start, start + 1, f"exceed the maximum number of nested parentheses/brackets ({NEST_LIMIT})")
        negated = self.peek() == "^"
        if negated:
            self.position += 1
        opening_end = self.position + (self.peek() == "]")  # `[`, `[^`, and a leading `]` (a literal) open it
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            character = self.peek()
            if character is None:
                raise self.fail(start, opening_end, "unclosed character class")
            if character == "]" and not first:
                self.position += 1
                break
            first = False
            if character == "[":
                if self.pattern.startswith("[:", self.position) and ":]" in self.pattern[self.position:]:
                    self.position = self.pattern.index(":]", self.position) + 2
                    ranges.extend(BIG)
                    continue
                self.position += 1
                inner = self.bracket(self.position - 1, depth + 1)
                ranges.extend(inner[1])
                continue
            item_start = self.position
            low = self.class_item(item_start)
            ranged = self.peek() == "-" and self.peek(1) not in ("]", None)
            if low is None or low == ASSERTION:  # a Perl class or an assertion inside the brackets
                if ranged:
                    raise self.fail(item_start, self.position, "invalid range boundary, must be a literal")
                if low == ASSERTION:
                    if self.peek() is None:
                        raise self.fail(start, opening_end, "unclosed character class")
                    raise self.fail(item_start, self.position, "invalid escape sequence found in character class")
                ranges.extend(BIG)
                continue
            if ranged:
                self.position += 1
                high_start = self.position
                high = self.class_item(high_start)
                if high is None or high == ASSERTION:
                    raise self.fail(high_start, self.position, "invalid range boundary, must be a literal")
                if high < low:
                    raise self.fail(item_start, self.position,
                                    "invalid character class range, the start must be <= the end")
                ranges.append((low, high))
            else:
                ranges.append((low, low))
        result = normalise_ranges(ranges)
        if self.insensitive:
            result = _fold(result)
        if negated:
            result = BIG if class_size(result) < 2 ** 20 else ()
        return ("class", result)

    def class_item(self, start: int) -> int | None:
        character = self.pattern[self.position]
        self.position += 1
        if character != "\\":
            return ord(character)
        escaped = self.escape(start, in_class=True)
        if escaped[0] == "lit":
            return ord(escaped[1])
        if escaped[0] == "assertion":
            return ASSERTION
        return None  # a Perl or Unicode class


def parse(pattern: str) -> tuple:
    """The pattern's tree, or RustRegexError with regex-syntax's message."""
    parser = _Parser(pattern)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 8 * NEST_LIMIT + 200))  # a few frames per nesting level
    try:
        tree = parser.alternation(0)
    finally:
        sys.setrecursionlimit(limit)
    if parser.position != len(pattern):  # a stray `)` stops the top level
        raise parser.fail(parser.position, parser.position + 1, "unopened group")
    return tree


def group_names(tree: tuple) -> list[str]:
    """Named groups in pattern order (as `GroupInfo::pattern_names` lists them)."""
    kind = tree[0]
    if kind == "group":
        return ([tree[1]] if tree[1] is not None else []) + group_names(tree[2])
    if kind in ("cat", "alt"):
        return [name for node in tree[1] for name in group_names(node)]
    if kind == "rep":
        return group_names(tree[4])
    return []


__all__ = ["BIG", "CLASS_LIMIT", "RustRegexError", "class_size", "group_names", "normalise_ranges", "parse"]
