"""A contract matrix written in one go: the record itself (contract.json) and its views, contract.md and contract.html."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conformance.report.contract_matrix import html as matrix_html
from conformance.report.contract_matrix import markdown as matrix_markdown
from conformance.util.files import write_atomically

MATRIX_FILES = {"json": "contract.json", "markdown": "contract.md", "html": "contract.html"}


def write_contract_reports(out_dir: Path | str, matrix: Mapping[str, Any]) -> dict[str, Path]:
    """contract.json, contract.md and contract.html of `matrix` in `out_dir`; their paths by kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / name for kind, name in MATRIX_FILES.items()}
    write_atomically(paths["json"], json.dumps(matrix, indent=1, ensure_ascii=False) + "\n")
    write_atomically(paths["markdown"], matrix_markdown.render(matrix))
    write_atomically(paths["html"], matrix_html.render(matrix))
    return paths
