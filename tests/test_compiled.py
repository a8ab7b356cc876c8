"""The compiled modules and their pure-Python fallback (zbroker/_compiled.py, setup.py).

Which path a run takes is decided at import, so each case looks in a fresh interpreter.
The suite itself runs on both: ``make test`` runs it compiled, then again its
end-to-end part with ``ZBROKER_PURE_PYTHON=1``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

import zbroker
from zbroker import _compiled

ROOT = Path(zbroker.__file__).resolve().parent
PROBE = (
    "import importlib, json, zbroker\n"
    "from zbroker import _compiled as c\n"
    "for n in c.COMPILED: importlib.import_module(n)\n"
    "print(json.dumps({'loaded': c.loaded(), 'file': zbroker.__file__}))\n"
)


def _loaded(pure: str | None, path: Path | None = None) -> dict[str, bool]:
    """``loaded()`` in a fresh interpreter (``path``: zbroker imported from there)."""
    result: dict[str, bool] = _probe(pure, path)["loaded"]
    return result


def _probe(pure: str | None, path: Path | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != _compiled.ENV}
    if pure is not None:
        env[_compiled.ENV] = pure
    if path is not None:
        env["PYTHONPATH"] = str(path)
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=path or ROOT.parent,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _source(name: str, root: Path = ROOT.parent) -> Path:
    return root / (name.replace(".", "/") + ".py")


def test_every_listed_module_exists_as_a_python_source() -> None:
    # the fallback is the source itself: each listed module must have one
    for name in _compiled.COMPILED:
        assert _source(name).is_file(), name


def test_pure_python_imports_every_listed_module_from_its_source() -> None:
    loaded = _loaded("1")
    assert sorted(loaded) == sorted(_compiled.COMPILED)
    assert not any(loaded.values()), loaded


def test_a_module_runs_compiled_exactly_when_built_from_its_source() -> None:
    loaded = _loaded(None)
    assert loaded == {n: _compiled.built_from(_source(n)) is True for n in _compiled.COMPILED}
    assert _loaded("0") == loaded  # "0" does not ask for the sources


@pytest.mark.skipif(
    not os.environ.get("ZBROKER_REQUIRE_COMPILED"),
    reason="ZBROKER_REQUIRE_COMPILED not set (CI sets it: there the build must compile)",
)
def test_the_build_compiled_every_listed_module() -> None:
    assert all(_loaded(None).values())


def _package(tmp_path: Path, stamp: str | None) -> tuple[_compiled._SourceFinder, Path]:
    """A package with one module, an "extension" beside it and (unless None) a stamp."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    source = pkg / "mod.py"
    source.write_text("X = 1\n")
    (pkg / ("mod" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"not real")
    if stamp is not None:
        (pkg / ("mod" + _compiled.STAMP)).write_text(stamp + "\n")
    finder = _compiled._SourceFinder(pure=False)
    finder.names = frozenset({"pkg.mod"})
    return finder, source


def test_an_extension_not_built_from_its_source_is_not_used(tmp_path: Path) -> None:
    # the stamp names another source (an edit since the build): the source runs
    finder, source = _package(tmp_path, hashlib.sha256(b"X = 0\n").hexdigest())
    spec = finder.find_spec("pkg.mod", [str(source.parent)])
    assert spec is not None and spec.origin == str(source)
    assert _compiled.built_from(source) is False
    # whatever the files' times say: content decides
    old = time.time() - 100
    os.utime(source, (old, old))
    assert finder.find_spec("pkg.mod", [str(source.parent)]) is not None


def test_a_pxd_companion_is_part_of_what_an_extension_is_built_from(tmp_path: Path) -> None:
    # Cython compiles a module's .pxd into it (wire/entries.pxd holds C code): an edit of
    # the .pxd alone makes the extension stale as an edit of the .py does
    finder, source = _package(tmp_path, hashlib.sha256(b"X = 1\n").hexdigest())
    companion = source.with_suffix(".pxd")
    companion.write_text("cdef int Y\n")
    assert _compiled.built_from(source) is False
    spec = finder.find_spec("pkg.mod", [str(source.parent)])
    assert spec is not None and spec.origin == str(source)
    both = hashlib.sha256(b"X = 1\n" + b"cdef int Y\n").hexdigest()
    assert _compiled.digest(source) == both
    (source.parent / ("mod" + _compiled.STAMP)).write_text(both + "\n")
    assert _compiled.built_from(source) is True
    assert finder.find_spec("pkg.mod", [str(source.parent)]) is None


def test_an_extension_with_no_stamp_is_not_used(tmp_path: Path) -> None:
    finder, source = _package(tmp_path, None)
    spec = finder.find_spec("pkg.mod", [str(source.parent)])
    assert spec is not None and spec.origin == str(source)


def test_an_extension_built_from_its_source_is_left_to_the_path_finders(
    tmp_path: Path,
) -> None:
    finder, source = _package(tmp_path, hashlib.sha256(b"X = 1\n").hexdigest())
    assert _compiled.built_from(source) is True
    assert finder.find_spec("pkg.mod", [str(source.parent)]) is None  # (they prefer it)
    # ZBROKER_PURE_PYTHON takes the source all the same
    finder.pure = True
    spec = finder.find_spec("pkg.mod", [str(source.parent)])
    assert spec is not None and spec.origin == str(source)
    # names not listed are never its business
    assert finder.find_spec("pkg.other", [str(source.parent)]) is None


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("ZBROKER_REQUIRE_COMPILED") and shutil.which("gcc") is None,
    reason="no C compiler here to build a wheel with (CI has one and requires it)",
)
# pip builds all the compiled modules from nothing in an isolated environment: over the
# suite's 180 s on a loaded 2-core machine (it took 215 s beside other tests), so the
# test gets the build's own bound
@pytest.mark.timeout(900)
def test_a_wheel_install_runs_its_modules_compiled(tmp_path: Path) -> None:
    # a wheel's files land with times in any order (an install writes them as it goes):
    # what it runs must still be its extensions, and an edited module its source
    tree = tmp_path / "tree"
    tree.mkdir()
    for part in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT.parent / part, tree / part)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*" + _compiled.STAMP)
    shutil.copytree(ROOT, tree / "zbroker", ignore=ignore)
    shutil.copytree(ROOT.parent / "cli", tree / "cli", ignore=ignore)
    # (pip's own build: an isolated environment with the build requirements, as a user's)
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k != _compiled.ENV}  # (else: no build)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(tree)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = dist.glob("zbroker-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)  # (times: now, in archive order)
    assert _probe(None, site)["file"].startswith(str(site))  # (the wheel's, not this tree)
    assert all(_loaded(None, site).values())
    edited = _source("zbroker.node.relay", site)
    edited.write_text(edited.read_text() + "# edited after the build\n")
    loaded = _loaded(None, site)
    assert [n for n, compiled in loaded.items() if not compiled] == ["zbroker.node.relay"]
