"""Shared by the benchmarks: run every process of a benchmark on one copy of the sources.

``zbroker/`` may change while a benchmark runs (other work in the same checkout). A
benchmark starts processes over a minute or two, and each imports ``zbroker`` when it
starts, so without a copy one run could measure several code states under one digest.
:func:`snapshot_sources` copies ``zbroker/`` and ``cli/`` (installed as ``zbroker.cli``)
to a temporary directory once, at the start, and puts it first on ``sys.path`` and on
``PYTHONPATH``: the benchmark, its multiprocessing children (spawn passes ``sys.path``)
and its subprocesses (``zbroker simulate``) all import that copy, and the digest printed
is the copy's. :func:`end_on_signals` bounds a run: its deadline and SIGTERM end it
through its ``finally`` blocks, which stop every child by PID.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["REPO", "build_copy", "end_on_signals", "snapshot_sources"]

REPO = Path(__file__).resolve().parent.parent


def snapshot_sources(repo: Path = REPO, prepare: Callable[[Path], None] | None = None) -> str:
    """Copy the sources, make every later import of ``zbroker`` use the copy; return its
    directory (removed when this process exits). Call before anything imports zbroker.
    ``prepare``: called with the copy's directory before anything imports from it
    (``trace_pass.py`` stamps and builds its copy there)."""
    if "zbroker" in sys.modules:
        raise RuntimeError("snapshot_sources() must run before zbroker is imported")
    tmp = tempfile.mkdtemp(prefix="zbroker-src-")
    atexit.register(shutil.rmtree, tmp, True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(repo / "zbroker", Path(tmp) / "zbroker", ignore=skip)
    if (repo / "cli").is_dir():
        shutil.copytree(repo / "cli", Path(tmp) / "zbroker" / "cli", ignore=skip)
    if prepare is not None:
        prepare(Path(tmp))
    sys.path.insert(0, tmp)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = tmp if not old else tmp + os.pathsep + old
    import zbroker  # fail now, not in a child, if the copy caught a file mid-edit

    origin = Path(zbroker.__file__ or "").resolve()
    if not origin.is_relative_to(Path(tmp).resolve()):
        raise RuntimeError(f"zbroker imported from {origin}, not from the copy in {tmp}")
    return tmp


def build_copy(tmp: Path, repo: Path = REPO) -> None:
    """Build the compiled modules of a copy that ``prepare`` changed, as ``make build``
    does: the build's own files go beside the copy, and only the modules whose source no
    longer matches its extension's stamp are rebuilt (the changed ones)."""
    shutil.copytree(repo / "cli", tmp / "cli", ignore=shutil.ignore_patterns("__pycache__"))
    # The repo's last build: Cython's C files and setuptools' build tree, whose extensions
    # an in-place build compiles and then copies beside the sources. Copied with their
    # mtimes (as the sources' are), the unchanged modules are up to date for Cython and
    # setuptools alike; without them every module is translated and compiled again.
    built = repo / "build"
    for part in sorted(built.glob("cython")) + sorted(built.glob("lib.*")):
        if not (tmp / "build" / part.name).exists():
            shutil.copytree(part, tmp / "build" / part.name)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(repo / name, tmp / name)
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the copy's build failed: {(done.stderr or done.stdout)[-2000:]}")


def end_on_signals(deadline_s: int | None, what: str = "benchmark") -> None:
    """SIGALRM after ``deadline_s`` raises TimeoutError and SIGTERM KeyboardInterrupt, so a
    run past its deadline, or told to stop, leaves through its ``finally`` blocks (which
    stop its children) instead of dying with them still running. ``None``: no deadline
    (a run whose length its arguments set), only SIGTERM."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{what} exceeded {deadline_s} s")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    if deadline_s is not None:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(deadline_s)
