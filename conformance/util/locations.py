"""Where a value is, for messages a person reads: a JSON path written as `expect.hf.tool_calls[0]`,
and the line of the YAML node at a path."""

from __future__ import annotations

from collections.abc import Sequence

import yaml


def format_path(path: Sequence[str | int]) -> str:
    """A JSON path as a person reads it: `expect.hf.message.tool_calls[0]`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def node_line(node: yaml.Node | None, path: list[str | int]) -> int | None:
    """1-based line of the YAML node at `path` (or of its deepest existing ancestor)."""
    if node is None:
        return None
    for part in path:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((value for key, value in node.value if key.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node = child
    return node.start_mark.line + 1
