"""The routing core and the link state machine are sans-IO: they must not import sockets,
threads, clocks or event loops.

The check parses the source with :mod:`ast` (nothing is imported) and follows the package's
own relative and absolute ``zbroker`` imports, so a sans-IO module cannot reach an I/O
module through a helper either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "zbroker"
FORBIDDEN = frozenset({"zmq", "zeroconf", "threading", "socket", "time", "asyncio"})


def _sans_io_files() -> list[Path]:
    files = sorted((PACKAGE_DIR / "routing").rglob("*.py"))
    files += [PACKAGE_DIR / "topics.py", PACKAGE_DIR / "sublist.py"]
    files += [PACKAGE_DIR / "links" / name for name in ("state.py", "handshake.py", "outbox.py")]
    return files


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names of every module ``source`` imports (``from x import y`` adds x and x.y)."""
    tree = ast.parse(source)
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: -(node.level - 1)]
                base = ".".join(base_parts)
                target = f"{base}.{node.module}" if node.module else base
            else:
                assert node.module is not None
                target = node.module
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (getattr(node.func, "id", None) or getattr(node.func, "attr", None))
            in ("__import__", "import_module")
        ):
            for arg in node.args[:1]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.add(arg.value)
                else:
                    names.add("<dynamic import>")
    return names


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (never run)."""
    nodes: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def _forbidden(names: set[str]) -> set[str]:
    bad = {n for n in names if n.split(".")[0] in FORBIDDEN}
    return bad | {n for n in names if n == "<dynamic import>"}


def _file_for(module: str) -> Path | None:
    rel = Path(*module.split("."))
    for candidate in (
        PACKAGE_DIR.parent / rel.with_suffix(".py"),
        PACKAGE_DIR.parent / rel / "__init__.py",
    ):
        if candidate.is_file():
            return candidate
    return None


def _reachable(start: Path) -> dict[str, set[str]]:
    """Every zbroker module reachable from ``start`` and the imports of each."""
    seen: dict[str, set[str]] = {}
    todo = [start]
    while todo:
        path = todo.pop()
        module = _module_name(path)
        if module in seen:
            continue
        names = _imports(path.read_text("utf-8"), module, _is_package(path))
        seen[module] = names
        for name in names:
            # an ancestor package (``from . import x`` names it) runs anyway for any import
            # of its submodules; what matters is the submodule, which is followed as well
            if module == name or module.startswith(name + "."):
                continue
            if name.split(".")[0] == "zbroker":
                found = _file_for(name)
                if found is not None:
                    todo.append(found)
    return seen


def test_the_checked_files_exist() -> None:
    names = {p.relative_to(PACKAGE_DIR).as_posix() for p in _sans_io_files()}
    assert {"routing/__init__.py", "routing/engine.py", "topics.py", "sublist.py"} <= names
    assert {"links/state.py", "links/handshake.py", "links/outbox.py"} <= names
    for path in _sans_io_files():
        assert path.is_file(), path


@pytest.mark.parametrize(
    "path", _sans_io_files(), ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix()
)
def test_module_does_not_import_io(path: Path) -> None:
    module = _module_name(path)
    direct = _forbidden(_imports(path.read_text("utf-8"), module, _is_package(path)))
    assert direct == set(), f"{module} imports {sorted(direct)}"
    for reached, names in _reachable(path).items():
        bad = _forbidden(names)
        assert bad == set(), f"{module} reaches {reached}, which imports {sorted(bad)}"


# -- the checker itself must be able to fail ----------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import zmq", {"zmq"}),
        ("import zmq.asyncio as za", {"zmq.asyncio"}),
        ("import os, socket", {"socket"}),
        ("from time import monotonic", {"time", "time.monotonic"}),
        ("from threading import Lock as L", {"threading", "threading.Lock"}),
        ("import asyncio", {"asyncio"}),
        ("from zeroconf import Zeroconf", {"zeroconf", "zeroconf.Zeroconf"}),
        ("def f():\n    import time\n    return time.time()", {"time"}),
        ("if True:\n    from socket import socket", {"socket", "socket.socket"}),
        ("__import__('socket')", {"socket"}),
        ("import importlib\nimportlib.import_module(name)", {"<dynamic import>"}),
        ("import timeit, sockets, threadingx", set()),  # similar names are fine
        ("from .time import x", set()),  # a sibling module named time is not stdlib time
        ("import dataclasses\nfrom collections import deque", set()),
        ("if TYPE_CHECKING:\n    import zmq", set()),  # type names only: never run
        ("if TYPE_CHECKING:\n    pass\nelse:\n    import zmq", {"zmq"}),
    ],
)
def test_checker_detects_forbidden_imports(source: str, expected: set[str]) -> None:
    assert _forbidden(_imports(source, "zbroker.routing.x", False)) == expected


@pytest.mark.parametrize(
    ("source", "module", "is_package", "expected"),
    [
        ("from ..sublist import Sublist", "zbroker.routing.engine", False, "zbroker.sublist"),
        ("from .engine import X", "zbroker.routing", True, "zbroker.routing.engine"),
        ("from .engine import X", "zbroker.routing.loops", False, "zbroker.routing.engine"),
        ("from . import topics", "zbroker.sublist", False, "zbroker.topics"),
        ("from .topics import match", "zbroker.sublist", False, "zbroker.topics"),
    ],
)
def test_checker_resolves_relative_imports(
    source: str, module: str, is_package: bool, expected: str
) -> None:
    assert expected in _imports(source, module, is_package)


def test_checker_does_not_follow_into_ancestor_packages() -> None:
    # ``from . import topics`` names the package zbroker (whose __init__ imports the
    # socket-using Broker); only the submodule it names must be followed
    names = _imports("from . import topics", "zbroker.sublist", False)
    assert names == {"zbroker", "zbroker.topics"}
    for path in _sans_io_files():
        assert "zbroker" not in _reachable(path)


def test_checker_follows_imports_into_the_package() -> None:
    reached = _reachable(PACKAGE_DIR / "routing" / "engine.py")
    assert "zbroker.sublist" in reached
    assert "zbroker.topics" in reached  # through sublist
    assert "zbroker.errors" in reached  # through topics
