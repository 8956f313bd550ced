"""The one YAML reader of the suite, bounded for untrusted files (checkpoints.yaml, case files, tools.yaml, the
gate's expectations), and `read_text`, the UTF-8 reader of every untrusted text file (a regular file, bounded in
size; its errors name the line).

YAML aliases let a few hundred bytes stand for billions of nodes (an "alias bomb"), and deep nesting makes
recursive code overflow. `parse` composes the node tree (linear in the text: an alias is one shared node),
then measures it before building any Python value: at most MAX_DEPTH levels and MAX_NODES nodes and
MAX_CHARS characters of scalars once every alias is expanded, no alias that contains itself, and every
scalar readable (an integer of 5,000 digits or a 13th month is refused where it is). A refusal is a
`YamlLimitError`, a `yaml.MarkedYAMLError` whose mark is the offending node's line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from conformance.util.files import read_bounded

MAX_DEPTH = 100
MAX_NODES = 100_000
MAX_CHARS = 16_000_000
MAX_FILE_BYTES = 2 * MAX_CHARS  # an input text file (a YAML file, features.txt): more could not be within the bounds

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser when libyaml is there
# Scalars whose construction can fail on a value (a str cannot; `<<` merge keys are handled by their mapping)
_CHECKED_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("int", "float", "timestamp", "binary"))


class UnreadableFile(ValueError):
    """A file that cannot be read as UTF-8 text; the message says why (and where), without the file name."""


def read_text(path: Path, limit: int = MAX_FILE_BYTES, what: str = "an input file") -> str:
    """The UTF-8 text of `path`, a regular file of at most `limit` bytes; UnreadableFile says why not
    ("cannot read: ...", its cause the OSError; or the line and byte that are not UTF-8)."""
    try:
        raw = read_bounded(Path(path), limit, what)
    except OSError as exc:
        raise UnreadableFile(f"cannot read: {exc.strerror or exc}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UnreadableFile(f"line {line}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})") from exc


class YamlLimitError(yaml.MarkedYAMLError):
    """A YAML document beyond the bounds, or with a value that cannot be read; names the line."""

    def __init__(self, problem: str, node: yaml.Node) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)


def parse(text: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (for line numbers and duplicate keys) and the data of one YAML document, bounded;
    raises yaml.YAMLError (YamlLimitError for a bound) with the line of the problem."""
    loader = _LOADER(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # the pure-Python composer recurses once per level
            raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep") from None
        if node is None:
            return None, None
        _measure(node, loader)
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


class YamlFileError(ValueError):
    """A YAML file that cannot be read or parsed: `problem` says why, `line` and `column` (1-based) say
    where when known. The message leaves the file name to the caller."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(problem)
        self.problem, self.line, self.column = problem, line, column


def load_file(path: Path) -> tuple[yaml.Node | None, Any]:
    """`parse(read_text(path))`, every failure a YamlFileError."""
    try:
        text = read_text(path)
    except UnreadableFile as exc:
        raise YamlFileError(str(exc)) from exc
    try:
        return parse(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = " ".join(filter(None, (getattr(exc, "context", None), getattr(exc, "problem", None))))
        if mark is None:
            raise YamlFileError(f"invalid YAML: {' '.join(str(exc).split())}") from exc
        raise YamlFileError(f"invalid YAML: {problem or exc}", mark.line + 1, mark.column + 1) from exc


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _measure(root: yaml.Node, loader: Any) -> None:
    """Refuse a tree beyond the bounds, naming where; iterative, each shared (aliased) node measured once."""
    sizes: dict[int, tuple[int, int, int]] = {}  # id(node) -> (depth, nodes, characters) of its expansion
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            parts = [sizes[id(child)] for child in _children(node)]
            own_chars = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            sizes[key] = (1 + max((p[0] for p in parts), default=0), 1 + sum(p[1] for p in parts),
                          own_chars + sum(p[2] for p in parts))
            open_nodes.discard(key)
            _check(node, sizes[key], sizes, loader)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise YamlLimitError("an alias refers to a node that contains it (a recursive structure)", node)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _check(node: yaml.Node, size: tuple[int, int, int], sizes: dict, loader: Any) -> None:
    depth, nodes, chars = size
    if depth > MAX_DEPTH:
        raise YamlLimitError(f"nested more than {MAX_DEPTH} levels deep", _deepest(node, sizes))
    if nodes > MAX_NODES or chars > MAX_CHARS:
        raise YamlLimitError(
            f"expands to more than {MAX_NODES:,} nodes or {MAX_CHARS:,} characters once its aliases are "
            "followed (an alias bomb?)", node)
    if isinstance(node, yaml.ScalarNode) and node.tag in _CHECKED_SCALAR_TAGS:
        try:
            loader.construct_object(node)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # e.g. an integer of 5,000 digits, a timestamp with month 13
            raise YamlLimitError(f"cannot read the value {node.value[:40]!r}: {exc}", node) from None


def _deepest(node: yaml.Node, sizes: dict) -> yaml.Node:
    """The node MAX_DEPTH levels below `node` on its deepest path (where the nesting goes too far)."""
    for _ in range(MAX_DEPTH):
        children = _children(node)
        if not children:
            break
        node = max(children, key=lambda child: sizes[id(child)][0])
    return node


def duplicate_keys(node: yaml.Node | None, at: tuple[str | int, ...] = ()) -> Iterator[tuple[list[str | int], int]]:
    """(path of the key, 1-based line) for every key that repeats an earlier key of the same mapping,
    which YAML would silently resolve to the last value."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else id(key)
            if name in seen:
                yield [*at, name], key.start_mark.line + 1
            seen.add(name)
            yield from duplicate_keys(value, (*at, name))
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            yield from duplicate_keys(item, (*at, position))
