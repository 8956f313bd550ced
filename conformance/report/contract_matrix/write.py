"""Both views of a contract matrix written in one go: contract.md and contract.html."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conformance.report.contract_matrix import html as matrix_html
from conformance.report.contract_matrix import markdown as matrix_markdown

MATRIX_FILES = {"markdown": "contract.md", "html": "contract.html"}


def write_contract_reports(out_dir: Path | str, matrix: Mapping[str, Any]) -> dict[str, Path]:
    """contract.md and contract.html of `matrix` in `out_dir`; their paths by kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / name for kind, name in MATRIX_FILES.items()}
    paths["markdown"].write_text(matrix_markdown.render(matrix), encoding="utf-8")
    paths["html"].write_text(matrix_html.render(matrix), encoding="utf-8")
    return paths
