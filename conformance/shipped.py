"""Where the shipped data lives: the default cases and the contract document.

The repository's top-level `cases/` and `docs/` are their source of truth. A built distribution (wheel,
`pip install .`, pipx) carries a copy of each inside the package (`conformance/shipped_cases`,
`conformance/shipped_docs`: see `[tool.setuptools.package-dir]` in pyproject.toml); a source checkout or an
editable install reads the repository's own.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    """The shipped directory `name` ("cases" or "docs"): the installed copy, else the source checkout's
    (the installed one's path when neither is there, for the error message)."""
    installed, source = PACKAGE_DIR / f"shipped_{name}", PACKAGE_DIR.parent / name
    return source if source.is_dir() and not installed.is_dir() else installed


CASES_DIR = shipped_dir("cases")
DOCS_DIR = shipped_dir("docs")
