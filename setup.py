"""Build step for zbroker's compiled modules; everything else is in pyproject.toml.

The modules named in ``zbroker/_compiled.py`` are compiled with Cython (pure-Python
mode: the ``.py`` files unchanged) into extension modules beside their sources, when
Cython and a working C compiler are there. When either is missing, or a module fails to
compile, the build says so and goes on: zbroker runs the same from its Python sources.
``ZBROKER_PURE_PYTHON=1`` at install time skips the build altogether.

Editable installs (``pip install -e``, as ``make`` does) put the extensions in the source
tree; ``make build`` (``python setup.py build_ext --inplace``) rebuilds them after an edit,
and until then the edited source is what runs (``zbroker/_compiled.py``).
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent

#: Cython directives: Python semantics exactly (annotations are not C types; bounds and
#: wraparound checks stay on), only the interpreter's dispatch is compiled away
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}
#: modules translated and compiled at once (one per core)
JOBS = os.cpu_count() or 1


def compiled_names() -> list[str]:
    """``COMPILED`` from zbroker/_compiled.py, read as text (zbroker is not importable
    while it is being built)."""
    tree = ast.parse((HERE / "zbroker" / "_compiled.py").read_text())
    for node in tree.body:
        names = [getattr(t, "id", None) for t in getattr(node, "targets", ())]
        if isinstance(node, ast.Assign) and names == ["COMPILED"]:
            return list(ast.literal_eval(node.value))
    raise RuntimeError("zbroker/_compiled.py has no COMPILED tuple")


def _say(text: str) -> None:
    print(f"zbroker build: {text}", file=sys.stderr)


def extensions() -> list[Any]:
    """The Cython extensions to build, or none (pure Python) when that is asked for or
    Cython is not installed."""
    if os.environ.get("ZBROKER_PURE_PYTHON", "") not in ("", "0"):
        _say("ZBROKER_PURE_PYTHON is set: no compiled modules")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _say("Cython is not installed: zbroker runs from its Python sources")
        return []
    # (-Wno-array-bounds: CPython's own headers trip gcc's check in generated code)
    exts = [
        Extension(n, [n.replace(".", "/") + ".py"], extra_compile_args=["-Wno-array-bounds"])
        for n in compiled_names()
    ]
    result: list[Any] = cythonize(
        exts,
        compiler_directives=DIRECTIVES,
        build_dir="build/cython",
        quiet=True,
        nthreads=JOBS,
    )
    return result


class OptionalBuildExt(build_ext):  # type: ignore[misc]  # (setuptools: untyped)
    """build_ext that never fails the install: a module that does not compile (no C
    compiler, no Python headers) is left to run from its source."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any build failure means: run from the sources
            _say(f"compiled modules not built ({exc}); zbroker runs from its Python sources")

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # (no compiler, no headers, a Cython error)
            _say(f"{ext.name} not compiled ({exc}); it runs from its Python source")


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
    options={"build_ext": {"parallel": JOBS}},
)
