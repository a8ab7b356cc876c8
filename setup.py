"""Build step for zbroker's compiled modules; everything else is in pyproject.toml.

The modules named in ``zbroker/_compiled.py`` are compiled with Cython (pure-Python
mode: the ``.py`` files unchanged) into extension modules beside their sources, when
Cython and a working C compiler are there. When either is missing, or a module fails to
translate or compile, the build says so and goes on: zbroker runs the same from its Python
sources. ``ZBROKER_PURE_PYTHON=1`` at install time skips the build altogether.

Beside each extension the build writes the sha256 of the source it was built from
(``<module>.source-sha256``): zbroker runs an extension only while its source still
matches (``zbroker/_compiled.py``). Editable installs (``pip install -e``, as ``make``
does) put the extensions in the source tree; ``make build`` (``python setup.py build_ext
--inplace``) rebuilds them after an edit, and until then the edited source is what runs.

Cython is a build requirement (pyproject.toml), fetched by pip like setuptools; where it
cannot be had, ``pip install --no-build-isolation .`` with setuptools installed builds
nothing and installs the sources.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent

#: Cython directives: Python semantics exactly (annotations are not C types; bounds and
#: wraparound checks stay on), only the interpreter's dispatch is compiled away
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}
#: modules translated and compiled at once (one per core)
JOBS = os.cpu_count() or 1
#: gcc and clang: CPython's own headers trip the array-bounds check in generated code
UNIX_FLAGS = ["-Wno-array-bounds"]


def _rules() -> ModuleType:
    """zbroker/_compiled.py loaded by its path (zbroker is not importable while it is being
    built): the modules to compile, the stamp's rule, ZBROKER_PURE_PYTHON. (Loading it puts
    its finder on this process's import path too; the build imports no zbroker module.)"""
    spec = importlib.util.spec_from_file_location("zbroker_build", HERE / "zbroker/_compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RULES = _rules()


def _say(text: str) -> None:
    print(f"zbroker build: {text}", file=sys.stderr)


def _source(name: str) -> Path:
    return HERE / (name.replace(".", "/") + ".py")


def _stamped(source: Path, folder: Path) -> bool:
    """Whether ``folder`` holds a build of ``source`` as it is now (its stamp matches).
    Where not, the module is translated and compiled again whatever the files' times say:
    a source copied in with an old time must not keep an extension built from another."""
    return bool(RULES.stamped(source, folder))


def extensions() -> list[Any]:
    """The Cython extensions to build, or none (pure Python) when that is asked for or
    Cython is not installed. A module Cython cannot translate is left out, and said."""
    if RULES.pure_python():
        _say(f"{RULES.ENV} is set: no compiled modules")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _say("Cython is not installed: zbroker runs from its Python sources")
        return []
    names: list[str] = list(RULES.COMPILED)
    exts = [Extension(n, [str(_source(n).relative_to(HERE))]) for n in names]
    options: dict[str, Any] = {
        "compiler_directives": DIRECTIVES,
        "build_dir": "build/cython",
        "quiet": True,
    }
    stale = [e for e in exts if not _stamped(_source(e.name), _source(e.name).parent)]
    current = [e for e in exts if e not in stale]
    try:
        result: list[Any] = cythonize(stale, nthreads=JOBS, force=True, **options)
        result += cythonize(current, nthreads=JOBS, **options)
        return result
    except Exception:  # one module at a time, to leave out only what fails
        result = []
        for ext in exts:
            try:
                result += cythonize([ext], force=ext in stale, **options)
            except Exception as exc:  # a Cython error: that module runs from its source
                _say(f"{ext.name} not translated ({exc}); it runs from its Python source")
        return result


class OptionalBuildExt(build_ext):  # type: ignore[misc]  # (setuptools: untyped)
    """build_ext that never fails the install: a module that does not compile (no C
    compiler, no Python headers) is left to run from its source. Each extension built
    gets its source's sha256 beside it."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any build failure means: run from the sources
            _say(f"compiled modules not built ({exc}); zbroker runs from its Python sources")

    def build_extension(self, ext: Any) -> None:
        if self.compiler.compiler_type == "unix":
            ext.extra_compile_args = [*ext.extra_compile_args, *UNIX_FLAGS]
        built, source = Path(self.get_ext_fullpath(ext.name)), _source(ext.name)
        if not _stamped(source, built.parent):
            # (no extension, no skipping as "up to date" by time: see _stamped; extensions
            # build in parallel threads, so this, not the shared force flag)
            built.unlink(missing_ok=True)
        try:
            super().build_extension(ext)
        except Exception as exc:  # (no compiler, no headers, a C error)
            _say(f"{ext.name} not compiled ({exc}); it runs from its Python source")
            return
        (built.parent / (source.stem + RULES.STAMP)).write_text(RULES.digest(source) + "\n")

    def copy_extensions_to_source(self) -> None:
        """In place, setuptools builds into build/ and then copies each extension beside
        its source: the stamps go with them (and a module not built loses its stamp)."""
        super().copy_extensions_to_source()
        for ext in self.extensions:
            source = _source(ext.name)
            name = source.stem + RULES.STAMP
            stamp = Path(self.build_lib, *ext.name.split(".")[:-1], name)
            if stamp.is_file():
                (source.parent / name).write_text(stamp.read_text())
            else:
                (source.parent / name).unlink(missing_ok=True)


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
    options={"build_ext": {"parallel": JOBS}},
)
