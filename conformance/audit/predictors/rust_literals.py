"""The literal prefixes vLLM 0.32's Rust frontend requires of a delimiter pattern.

A mirror of `regex_syntax::hir::literal::Extractor` (prefix kind, default limits: 10 class characters,
10 repetitions, 100 bytes per literal, 250 literals) over a `rust_regex.parse` tree, after the HIR
construction rules that change its result (an alternation of single characters is one class; a
zero-width operand repeats at most once; `{0}` and `{1}` disappear), followed by the frontend's own
check in `StreamingPattern::new` (rust/src/parser/src/unified/hf/pattern.rs, `literal_prefixes`):
every literal's valid UTF-8 prefix must be non-empty.
A sequence is None (infinite) or a list of [bytes, exact] literals.
"""

from __future__ import annotations

from conformance.audit.predictors.rust_regex import CLASS_LIMIT, class_size, normalise_ranges

REPEAT_LIMIT, LITERAL_LIMIT, TOTAL_LIMIT = 10, 100, 250


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
        if class_size(tree[1]) > CLASS_LIMIT:
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


def _max_len(tree: tuple) -> int | None:
    """The longest match in characters (None: unbounded); only whether it is 0 matters."""
    kind = tree[0]
    if kind == "empty":
        return 0
    if kind in ("lit", "class"):
        return 1
    if kind == "group":
        return _max_len(tree[2])
    if kind == "rep":
        inner = _max_len(tree[4])
        return 0 if inner == 0 else None if inner is None or tree[2] is None else inner * tree[2]
    lengths = [_max_len(node) for node in tree[1]]
    if None in lengths:
        return None
    return sum(lengths) if kind == "cat" else max(lengths, default=0)


def _simplify(tree: tuple) -> tuple:
    """HIR's construction rules that change extraction: an alternation of single characters is one class."""
    kind = tree[0]
    if kind == "group":
        return ("group", tree[1], _simplify(tree[2]))
    if kind == "rep":  # Hir::repetition: a zero-width operand repeats at most once; {0} and {1} disappear
        _, minimum, maximum, greedy, operand = tree
        operand = _simplify(operand)
        if _max_len(operand) == 0:
            minimum, maximum = min(minimum, 1), 1 if maximum is None else min(maximum, 1)
        if minimum == maximum == 0:
            return ("empty",)
        if minimum == maximum == 1:
            return operand
        return ("rep", minimum, maximum, greedy, operand)
    if kind == "cat":
        return ("cat", [_simplify(node) for node in tree[1]])
    if kind == "alt":
        branches = [_simplify(node) for node in tree[1]]
        if all(branch[0] in ("lit", "class") for branch in branches):
            ranges = [item for branch in branches
                      for item in (((ord(branch[1]),) * 2,) if branch[0] == "lit" else branch[1])]
            return ("class", normalise_ranges(ranges))
        return ("alt", branches)
    return tree


__all__ = ["literal_prefixes"]
