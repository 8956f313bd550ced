"""Where the package's own files are: its source root, the JSON Schemas, the gate's shipped expectations,
the default cases and the contract document, and the Node project of the AI SDK client.

The repository's top-level `cases/` and `docs/` are the source of truth of the cases and the contract
document. A built distribution (wheel, `pip install .`, pipx) carries a copy of each inside the package
(`conformance/shipped_cases`, `conformance/shipped_docs`: see `[tool.setuptools.package-dir]` in
pyproject.toml); a source checkout or an editable install reads the repository's own.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

PACKAGE_DIR = Path(str(resources.files("conformance")))
SOURCE_ROOT = PACKAGE_DIR.parent  # what a worker process puts on PYTHONPATH to import this package
SCHEMAS_DIR = PACKAGE_DIR / "schemas"
SHIPPED_EXPECTATIONS_DIR = PACKAGE_DIR / "shipped_expectations"
NODE_PROJECT_DIR = SOURCE_ROOT / "clients" / "node"  # a source checkout's; CONFORMANCE_NODE_PROJECT elsewhere


def shipped_dir(name: str) -> Path:
    """The shipped directory `name` ("cases" or "docs"): the installed copy, else the source checkout's
    (the installed one's path when neither is there, for the error message)."""
    installed, source = PACKAGE_DIR / f"shipped_{name}", SOURCE_ROOT / name
    return source if source.is_dir() and not installed.is_dir() else installed


CASES_DIR = shipped_dir("cases")
DOCS_DIR = shipped_dir("docs")


def load_schema(name: str) -> dict:
    """A JSON Schema shipped in `conformance/schemas/`."""
    return json.loads((SCHEMAS_DIR / name).read_text(encoding="utf-8"))
