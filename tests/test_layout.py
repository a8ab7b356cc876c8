"""The layout's rules, checked on the sources (nothing is imported):

* the kernel (``zbroker/node/``) imports no feature; a feature imports no other feature
  (shared machinery, such as the credit window, is a module of its own);
* no file in ``zbroker/``, ``cli/``, ``tests/``, ``benchmarks/`` or ``examples/`` is over 400
  lines, no function over 60 (a test or a benchmark is read as often as the code it measures);
* every module opens with a docstring saying what it owns;
* no test, benchmark or example imports a ``conftest`` module: pytest imports each as a
  module of its own, so an import makes a second copy with its own state (two registries
  of handed-out ports could hand out the same port).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_sansio import _imports, _is_package, _module_name

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "zbroker"
FEATURES = "zbroker.features"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources() -> list[Path]:
    dirs = [PACKAGE_DIR, *(ROOT / d for d in ("cli", "tests", "benchmarks", "examples"))]
    return sorted(p for d in dirs for p in d.rglob("*.py"))


def _feature_of(module: str) -> str | None:
    """``zbroker.features.X...`` -> ``X``; None for anything else."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and ".".join(parts[:2]) == FEATURES else None


def _zbroker_imports(path: Path) -> set[str]:
    module = _module_name(path)
    return {
        n
        for n in _imports(path.read_text("utf-8"), module, _is_package(path))
        if n.startswith("zbroker")
    }


def test_the_kernel_imports_no_feature() -> None:
    kernel = sorted((PACKAGE_DIR / "node").rglob("*.py"))
    assert kernel, "zbroker/node/ is missing"
    for path in kernel:
        bad = {n for n in _zbroker_imports(path) if n.startswith(FEATURES)}
        assert bad == set(), f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_features_import_no_other_feature() -> None:
    paths = sorted((PACKAGE_DIR / "features").rglob("*.py"))
    assert len({_feature_of(_module_name(p)) for p in paths} - {None}) >= 5
    for path in paths:
        own = _feature_of(_module_name(path))
        if own is None:
            continue
        others = {f for n in _zbroker_imports(path) if (f := _feature_of(n)) not in (None, own)}
        assert others == set(), f"{path.relative_to(ROOT)} imports features {sorted(others)}"


def test_links_import_no_feature() -> None:
    for path in sorted((PACKAGE_DIR / "links").rglob("*.py")):
        bad = {n for n in _zbroker_imports(path) if n.startswith(FEATURES)}
        assert bad == set(), f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_module_size_and_docstring(path: Path) -> None:
    source = path.read_text("utf-8")
    lines = len(source.splitlines())
    assert lines <= MAX_FILE_LINES, f"{lines} lines: split it by concept"
    tree = ast.parse(source)
    if source.strip():
        assert ast.get_docstring(tree), "a module opens with a docstring saying what it owns"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _conftest_imports(source: str) -> list[str]:
    """The ``conftest`` modules a source imports (``import``/``from ... import``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [n for n in names if n.split(".")[-1] == "conftest"]
    return found


def test_nothing_imports_a_conftest() -> None:
    bad = {
        p.relative_to(ROOT).as_posix(): found
        for p in _sources()
        if (found := _conftest_imports(p.read_text("utf-8")))
    }
    assert bad == {}, "import the helper from the module that owns it (tests.ports, ...)"


def test_the_checks_can_fail() -> None:
    assert _conftest_imports("from tests.conftest import free_port") == ["tests.conftest"]
    assert _conftest_imports("import conftest") == ["conftest"]
    assert _conftest_imports("from tests.ports import free_port") == []
    assert _feature_of("zbroker.features.durables.pump") == "durables"
    assert _feature_of("zbroker.features") is None
    assert _feature_of("zbroker.node.kernel") is None
