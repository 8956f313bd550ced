"""The house rules of ARCHITECTURE.md, checked on the package's own source: imports point down the data
flow only (module-level and function-level alike), no import circle, at most six modules at the top, and
every module named in a string (worker commands, `python -m ...` in docs and scripts) exists."""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from conformance.servers.profiles import PROFILES
from conformance.util.package_paths import PACKAGE_DIR, SOURCE_ROOT

# The stages in the order of the data flow: a module imports only from its own stage or one above it here.
STAGES = ("util", "record", "formats", "servers", "suite", "run", "audit", "compare", "clients", "report",
          "commands")
FRONT_DOORS = {"conformance", "conformance.__main__", "conformance.cli", "conformance.pytest_plugin"}
DATA_PACKAGES = {"schemas", "shipped_expectations", "shipped_cases", "shipped_docs"}


def _dotted(path: Path) -> str:
    parts = ["conformance", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_dotted(path): path for path in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts}


def _resolve(name: str) -> str | None:
    """The package module an imported dotted name stands for (a module, or a name inside one)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    """Every package module `module` imports, wherever the import statement stands."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            target = _resolve(name)
            if target is not None and target != module and not module.startswith(f"{target}."):
                found.add(target)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def stage_of(module: str) -> int:
    """The position of a module's stage in STAGES (front doors after every stage)."""
    if module in FRONT_DOORS:
        return len(STAGES)
    return STAGES.index(module.split(".")[1])


def test_every_module_sits_in_a_stage_or_is_a_front_door() -> None:
    top = sorted(module for module in MODULES if module.count(".") <= 1)
    stray = [m for m in top if m not in FRONT_DOORS and m.split(".")[-1] not in STAGES + tuple(DATA_PACKAGES)]
    assert stray == []
    assert len([p for p in PACKAGE_DIR.glob("*.py")]) <= 6


def test_imports_point_down_the_data_flow() -> None:
    upward = sorted(f"{module} -> {target}" for module, targets in GRAPH.items() for target in targets
                    if stage_of(target) > stage_of(module))
    assert upward == []


def test_no_import_circle() -> None:
    """Tarjan's strongly connected components over the whole graph: none of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert circles == []


_NAMED_MODULE = re.compile(r"(?<![\w./-])(conformance(?:\.[a-z_0-9]+)+)")


def _texts() -> list[Path]:
    folders = ("conformance", "tests", "scripts", "benchmarks", "examples", "docs", "cases", ".ci")
    files = [SOURCE_ROOT / "README.md", SOURCE_ROOT / "ARCHITECTURE.md", SOURCE_ROOT / "pyproject.toml"]
    for folder in folders:
        files += [p for p in (SOURCE_ROOT / folder).rglob("*") if p.is_file() and "node_modules" not in p.parts
                  and "__pycache__" not in p.parts and p.suffix in ("", ".py", ".md", ".yml", ".yaml", ".toml")]
    return [p for p in files if p.exists()]


def named_modules() -> dict[str, set[str]]:
    """Module paths written as text ({dotted name: files}), attribute references trimmed to their module."""
    named: dict[str, set[str]] = {}
    for path in _texts():
        for match in _NAMED_MODULE.finditer(path.read_text(encoding="utf-8", errors="replace")):
            named.setdefault(match.group(1), set()).add(str(path.relative_to(SOURCE_ROOT)))
    return named


def test_every_module_named_in_a_string_exists() -> None:
    """`python -c "from conformance.audit.template_worker import ..."`, `python -m` lines in docs, a
    module named in a docstring: each dotted name is a module of the package or a name defined in one.
    JUnit suite names (`conformance.<profile>`) and the data packages are not modules."""
    missing = {}
    for name, files in named_modules().items():
        module = _resolve(name)
        attribute = name[len(module) + 1:].split(".")[0] if module and module != name else None
        if attribute in DATA_PACKAGES or (module == "conformance" and attribute in PROFILES):
            continue
        if module is None or (attribute and not hasattr(importlib.import_module(module), attribute)):
            missing[name] = sorted(files)
    assert missing == {}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_every_module_imports(module: str) -> None:
    assert importlib.util.find_spec(module) is not None
    importlib.import_module(module)


def test_every_subpackage_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages by hand (the shipped cases and docs are mapped from outside the
    package): a new subpackage missing there would be absent from an installed suite."""
    listed = set(tomllib.loads((SOURCE_ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["packages"])
    packages = {_dotted(path.parent / "__init__.py") for path in PACKAGE_DIR.rglob("__init__.py")
                if not DATA_PACKAGES & set(path.relative_to(PACKAGE_DIR).parts)}
    assert packages - listed == set()
