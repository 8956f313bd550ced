"""What vLLM 0.32's Rust frontend makes of a `response_template` regex, without Rust.

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
- `literal_prefixes(tree)` is the extractor (limits: 10 class characters, 10 repetitions, 100 bytes
  per literal, 250 literals) followed by the frontend's own check (every literal's valid UTF-8 prefix
  non-empty): `None` is the frontend's "must start with a literal prefix".

Not mirrored (documented limits of the prediction): a DFA over 16 MiB ("cannot be matched
incrementally"), `(?x)` comments, class set operations, Unicode property names the crate does not
know, and the multi-line layout of errors in patterns that contain a newline.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

CLASS_LIMIT, REPEAT_LIMIT, LITERAL_LIMIT, TOTAL_LIMIT = 10, 10, 100, 250
NEST_LIMIT = 250  # regex-syntax's default nest limit
BIG = ((0, sys.maxunicode),)  # a class too large to enumerate: only its size matters


class RustRegexError(ValueError):
    """The pattern is not valid Rust regex syntax; `str(error)` is regex-syntax's own text."""


# --- the tree ------------------------------------------------------------------------------------------
# ("lit", char) · ("class", ranges) · ("empty",) · ("rep", min, max|None, greedy, node) · ("cat", nodes)
# · ("alt", nodes) · ("group", name|None, node)


def _error(pattern: str, start: int, end: int, message: str) -> RustRegexError:
    carets = "^" * max(1, end - start)
    return RustRegexError(f"regex parse error:\n    {pattern}\n    {' ' * start}{carets}\nerror: {message}")


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
    if _size(ranges) > CLASS_LIMIT:  # already past what the extractor enumerates: folding only adds
        return ranges
    codes = {code for start, end in ranges for code in range(start, end + 1)}
    for code in list(codes):
        codes |= {ord(variant) for variant in _case_variants().get(chr(code), ())}
    return _normalise([(code, code) for code in codes])


def _normalise(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((start, end) for start, end in merged)


def _size(ranges: tuple[tuple[int, int], ...]) -> int:
    return sum(end - start + 1 for start, end in ranges)


@dataclass
class _Parser:
    pattern: str
    position: int = 0
    insensitive: bool = False
    swap_greed: bool = False

    def peek(self, offset: int = 0) -> str | None:
        index = self.position + offset
        return self.pattern[index] if index < len(self.pattern) else None

    def fail(self, start: int, end: int, message: str) -> RustRegexError:
        return _error(self.pattern, start, end, message)

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
            start = self.position
            if character in "*+?{":
                if character == "{" and not self._counted_ahead():
                    self.position += 1
                    items.append(self._literal("{"))
                    continue
                if not items or items[-1][0] == "flags":
                    raise self.fail(start, start + 1, "repetition operator missing expression")
                items[-1] = self.repetition(items[-1], start)
                continue
            item = self.atom(depth)
            if item is not None:
                items.append(item)
        items = [item for item in items if item[0] != "flags"]
        return items[0] if len(items) == 1 else ("cat", items)

    def _counted_ahead(self) -> bool:
        end = self.pattern.find("}", self.position)
        body = self.pattern[self.position + 1:end] if end != -1 else ""
        return end != -1 and bool(body) and all(c.isdigit() or c in ", " for c in body)

    def repetition(self, operand: tuple, start: int) -> tuple:
        character = self.pattern[self.position]
        self.position += 1
        if character == "{":
            end = self.pattern.index("}", self.position)
            low, _, high = self.pattern[self.position:end].replace(" ", "").partition(",")
            self.position = end + 1
            minimum = int(low) if low else 0
            maximum = minimum if "," not in self.pattern[start:end] else (int(high) if high else None)
            if maximum is not None and minimum > maximum:
                raise self.fail(start, end + 1, "invalid repetition count range, the start must be <= the end")
        else:
            minimum, maximum = {"*": (0, None), "+": (1, None), "?": (0, 1)}[character]
        greedy = True
        if self.peek() == "?":
            self.position += 1
            greedy = False
        return ("rep", minimum, maximum, greedy != self.swap_greed, operand)

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
                self.position = end + 1
            else:
                return self.flags(start, depth)
        saved = (self.insensitive, self.swap_greed)
        body = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.fail(start, start + 1, "unclosed group")
        self.position += 1
        self.insensitive, self.swap_greed = saved
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
        saved = (self.insensitive, self.swap_greed)
        self.insensitive = settings.get("i", self.insensitive)
        self.swap_greed = settings.get("U", self.swap_greed)
        if character == ")":  # (?flags): applies to the rest of the enclosing group
            return ("flags",)
        body = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.fail(start, start + 1, "unclosed group")
        self.position += 1
        self.insensitive, self.swap_greed = saved
        return ("group", None, body)

    def escape(self, start: int, in_class: bool) -> tuple:
        character = self.peek()
        if character is None:
            raise self.fail(start, start + 1, "incomplete escape sequence, reached end of pattern prematurely")
        self.position += 1
        if character in _META or (character in "<>" and in_class) or character == " ":
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
        if character in _ASSERTIONS and not in_class:
            return ("empty",)
        raise self.fail(start, self.position, "unrecognized escape sequence")

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
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            character = self.peek()
            if character is None:
                raise self.fail(start, start + 1, "unclosed character class")
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
            if low is None:  # a Perl class inside the brackets
                ranges.extend(BIG)
                continue
            if self.peek() == "-" and self.peek(1) not in ("]", None):
                self.position += 1
                high = self.class_item(self.position)
                if high is None or high < low:
                    raise self.fail(item_start, self.position,
                                    "invalid character class range, the start must be <= the end")
                ranges.append((low, high))
            else:
                ranges.append((low, low))
        result = _normalise(ranges)
        if self.insensitive:
            result = _fold(result)
        if negated:
            result = BIG if _size(result) < 2 ** 20 else ()
        return ("class", result)

    def class_item(self, start: int) -> int | None:
        character = self.pattern[self.position]
        self.position += 1
        if character != "\\":
            return ord(character)
        escaped = self.escape(start, in_class=True)
        if escaped[0] == "lit":
            return ord(escaped[1])
        if escaped[0] == "class" and escaped[1] == BIG:
            return None
        return ord(self.pattern[self.position - 1])


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


# --- the literal extractor (regex_syntax::hir::literal, prefix kind) ----------------------------------
# A sequence is None (infinite) or a list of [bytes, exact] literals.


def _dedup(literals: list) -> list:
    out: list = []
    for literal in literals:
        if out and out[-1][0] == literal[0]:
            if out[-1][1] != literal[1]:
                out[-1] = [literal[0], False]
            continue
        out.append(list(literal))
    return out


def _keep_first(sequence: list | None, length: int) -> list | None:
    if sequence is None:
        return None
    return [[text[:length], exact and len(text) <= length] for text, exact in sequence]


def _inexact(sequence: list | None) -> list | None:
    return None if sequence is None else [[text, False] for text, _ in sequence]


def _all_inexact(sequence: list | None) -> bool:
    return sequence is None or all(not exact for _, exact in sequence)


def _union(first: list | None, second: list | None) -> list | None:
    if first is not None and second is not None and len(first) + len(second) > TOTAL_LIMIT:
        first, second = _dedup(_keep_first(first, 4)), _dedup(_keep_first(second, 4))
        if len(first) + len(second) > TOTAL_LIMIT:
            second = None
    if second is None or first is None:
        return None
    return _dedup(first + second)


def _cross(first: list | None, second: list | None) -> list | None:
    if first is not None and second is not None and len(first) * len(second) > TOTAL_LIMIT:
        second = None
    if second is None:
        if first is not None and first and min(len(text) for text, _ in first) == 0:
            return None
        return _keep_first(_inexact(first), LITERAL_LIMIT)
    if first is None:
        return None
    crossed = []
    for text, exact in first:
        if not exact:
            crossed.append([text, exact])
            continue
        crossed += [[text + other, other_exact] for other, other_exact in second]
    return _keep_first(_dedup(crossed), LITERAL_LIMIT)


def _extract(tree: tuple) -> list | None:
    kind = tree[0]
    if kind == "empty":
        return [[b"", True]]
    if kind == "lit":
        return [[tree[1].encode(), True]]
    if kind == "class":
        if _size(tree[1]) > CLASS_LIMIT:
            return None
        return [[chr(code).encode(), True] for start, end in tree[1] for code in range(start, end + 1)]
    if kind == "group":
        return _extract(tree[2])
    if kind == "cat":
        sequence: list | None = [[b"", True]]
        for node in tree[1]:
            if _all_inexact(sequence):
                break
            sequence = _cross(sequence, _extract(node))
        return sequence
    if kind == "alt":
        sequence = []
        for node in tree[1]:
            if sequence is None:
                break
            sequence = _union(sequence, _extract(node))
        return sequence
    _, minimum, maximum, greedy, operand = tree
    inner = _extract(operand)
    if minimum == 0:
        if maximum != 1:
            inner = _inexact(inner)
        empty = [[b"", True]]
        return _union(inner, empty) if greedy else _union(empty, inner)
    sequence = [[b"", True]]
    for _ in range(min(minimum, REPEAT_LIMIT)):
        if _all_inexact(sequence):
            break
        sequence = _cross(sequence, None if inner is None else [list(literal) for literal in inner])
    if maximum != minimum or minimum > REPEAT_LIMIT:
        sequence = _inexact(sequence)
    return sequence


def literal_prefixes(tree: tuple) -> list[str] | None:
    """The literals one of which starts every match, as the frontend keeps them; None when the pattern
    has no finite set of non-empty ones (the frontend's "must start with a literal prefix")."""
    sequence = _extract(_simplify(tree))
    if sequence is None:
        return None
    prefixes: list[str] = []
    for text, _ in sequence:
        valid = text.decode("utf-8", errors="ignore") if _valid_prefix(text) else ""
        if not valid:
            return None
        if valid not in prefixes:
            prefixes.append(valid)
    return prefixes or None


def _valid_prefix(text: bytes) -> bool:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start > 0
    return True


def _simplify(tree: tuple) -> tuple:
    """HIR's construction rules that change extraction: an alternation of single characters is one class."""
    kind = tree[0]
    if kind == "group":
        return ("group", tree[1], _simplify(tree[2]))
    if kind == "rep":
        return (*tree[:4], _simplify(tree[4]))
    if kind == "cat":
        return ("cat", [_simplify(node) for node in tree[1]])
    if kind == "alt":
        branches = [_simplify(node) for node in tree[1]]
        if all(branch[0] in ("lit", "class") for branch in branches):
            ranges = [item for branch in branches
                      for item in (((ord(branch[1]),) * 2,) if branch[0] == "lit" else branch[1])]
            return ("class", _normalise(ranges))
        return ("alt", branches)
    return tree


__all__ = ["RustRegexError", "group_names", "literal_prefixes", "parse"]
