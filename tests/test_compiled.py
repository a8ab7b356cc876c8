"""The compiled modules and their pure-Python fallback (zbroker/_compiled.py, setup.py).

Which path a run takes is decided at import, so each case looks in a fresh interpreter.
The suite itself runs on both: ``make test`` runs it compiled, then again its
end-to-end part with ``ZBROKER_PURE_PYTHON=1``.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import zbroker
from zbroker import _compiled

ROOT = Path(zbroker.__file__).resolve().parent
PROBE = (
    "import importlib, json, zbroker\n"
    "from zbroker import _compiled as c\n"
    "for n in c.COMPILED: importlib.import_module(n)\n"
    "print(json.dumps(c.loaded()))\n"
)


def _loaded(pure: str | None) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if k != _compiled.ENV}
    if pure is not None:
        env[_compiled.ENV] = pure
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, bool] = json.loads(out.stdout)
    return result


def _built(name: str) -> bool:
    """Whether ``name`` has a current extension beside its source."""
    source = ROOT.parent / (name.replace(".", "/") + ".py")
    return any(
        p.is_file() and p.stat().st_mtime >= source.stat().st_mtime
        for p in (source.with_name(source.stem + s) for s in importlib.machinery.EXTENSION_SUFFIXES)
    )


def test_every_listed_module_exists_as_a_python_source() -> None:
    # the fallback is the source itself: each listed module must have one
    for name in _compiled.COMPILED:
        assert (ROOT.parent / (name.replace(".", "/") + ".py")).is_file(), name


def test_pure_python_imports_every_listed_module_from_its_source() -> None:
    loaded = _loaded("1")
    assert sorted(loaded) == sorted(_compiled.COMPILED)
    assert not any(loaded.values()), loaded


def test_a_module_runs_compiled_exactly_when_a_current_extension_is_built() -> None:
    loaded = _loaded(None)
    assert loaded == {name: _built(name) for name in _compiled.COMPILED}
    assert _loaded("0") == loaded  # "0" does not ask for the sources


@pytest.mark.skipif(
    not os.environ.get("ZBROKER_REQUIRE_COMPILED"),
    reason="ZBROKER_REQUIRE_COMPILED not set (CI sets it: there the build must compile)",
)
def test_the_build_compiled_every_listed_module() -> None:
    assert all(_loaded(None).values())


def test_an_extension_older_than_its_source_is_not_used(tmp_path: Path) -> None:
    # a package with one listed-style module, its "extension" a file older than the source:
    # the finder must hand back the source (an edit shows at once, before the next build)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    source = pkg / "mod.py"
    source.write_text("X = 1\n")
    ext = pkg / ("mod" + importlib.machinery.EXTENSION_SUFFIXES[0])
    ext.write_bytes(b"not a real extension")
    old = time.time() - 100
    os.utime(ext, (old, old))
    finder = _compiled._SourceFinder(pure=False)
    finder.names = frozenset({"pkg.mod"})
    spec = finder.find_spec("pkg.mod", [str(pkg)])
    assert spec is not None and spec.origin == str(source)
    # a current extension is left to the path finders (which prefer it)
    os.utime(ext, None)
    os.utime(source, (old, old))
    assert finder.find_spec("pkg.mod", [str(pkg)]) is None
    # and ZBROKER_PURE_PYTHON takes the source whatever the extension's age
    finder.pure = True
    spec = finder.find_spec("pkg.mod", [str(pkg)])
    assert spec is not None and spec.origin == str(source)
    # names not listed are never its business
    assert finder.find_spec("pkg.other", [str(pkg)]) is None
