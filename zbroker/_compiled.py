"""Which modules of the message path are compiled, and the switch back to their source.

The modules in :data:`COMPILED` are plain Python, and zbroker is complete without any
build step. When Cython and a C compiler are there at install time, ``setup.py`` compiles
each of them (unchanged: Cython's pure-Python mode) into an extension module beside its
source, which Python's import then prefers; that removes the interpreter's dispatch from
the per-message loops (publisher, relay, delivery, subscriber) and nothing else changes.
A module may have a ``.pxd`` companion (``client/publisher.pxd``) that Cython reads
beside it: C types for a class's state and a function's arguments, where attribute
lookups were the cost. Only the extension sees it; the source runs as it is.

Importing this module (``zbroker/__init__.py`` does so first) runs :func:`install`, which
puts a finder ahead of the path finders that imports a listed module from its ``.py``
source instead when

* ``ZBROKER_PURE_PYTHON`` is set to anything but ``""`` or ``0``: the pure-Python path on
  demand, which the test suite runs as well (the fallback must keep working), or
* the extension was not built from the source beside it: the build writes the source's
  sha256 beside each extension (``<module>.source-sha256``), and a source that no longer
  matches it (an edit, before the next ``make build``) runs instead of the stale
  extension. Content, not modification times: an install or a copy sets times in any
  order.

``setup.py`` loads this file by its path (zbroker is not importable while it is being
built) for :data:`COMPILED` and the stamp's rule (:func:`stamped`), so this module imports
only the standard library.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = [
    "COMPILED",
    "ENV",
    "STAMP",
    "built_from",
    "digest",
    "install",
    "loaded",
    "pure_python",
    "stamped",
]

#: the modules compiled when the build can: each one's per-message loops
COMPILED = (
    "zbroker.wire.codec",
    "zbroker.wire.delivery",
    "zbroker.wire.link",
    "zbroker.wire.publish",
    "zbroker.wire.runs",
    "zbroker.wire.entries",
    "zbroker.wire.heads",
    "zbroker.wire.lone",
    "zbroker.routing.dedupe",
    "zbroker.routing.engine",
    "zbroker.links.flush",
    "zbroker.links.outbox",
    "zbroker.links.table",
    "zbroker.node.delivery",
    "zbroker.node.kernel",
    "zbroker.node.pipeline",
    "zbroker.node.publishes",
    "zbroker.node.relay",
    "zbroker.node.selected",
    "zbroker.node.shortcut",
    "zbroker.client.messages",
    "zbroker.client.publisher",
    "zbroker.client.publish_wire",
    "zbroker.client.subscriber",
    "zbroker.client.thread",
)
#: set (not "" or "0") to import every module of COMPILED from its Python source
ENV = "ZBROKER_PURE_PYTHON"
#: beside each built extension, ``<module>`` + this: the sha256 of the source it was built
#: from (written by setup.py)
STAMP = ".source-sha256"


def pure_python() -> bool:
    """Whether ``ZBROKER_PURE_PYTHON`` asks for the Python sources."""
    return os.environ.get(ENV, "") not in ("", "0")


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds a module of COMPILED as its ``.py`` source when it should not be the
    extension; otherwise leaves it to the path finders (which prefer the extension)."""

    def __init__(self, pure: bool) -> None:
        self.pure = pure
        self.names = frozenset(COMPILED)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:
            source = Path(folder, leaf + ".py")
            if source.is_file():
                if self.pure or built_from(source) is False:
                    return importlib.util.spec_from_file_location(fullname, source)
                return None
        return None


def built_from(source: Path) -> bool | None:
    """Whether the extension beside ``source`` was built from it (its stamp holds the
    source's sha256): True, False (a stale extension, or one with no stamp), or None
    when there is no extension (the path finders then take the source anyway)."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    if not any(source.with_name(source.stem + s).is_file() for s in suffixes):
        return None
    return stamped(source, source.parent)


def digest(source: Path) -> str:
    """What a stamp holds: the sha256 of ``source``, in hex, and of its ``.pxd`` companion
    after it where there is one (Cython compiles both into the extension: an edit of
    either makes the build stale)."""
    h = hashlib.sha256(source.read_bytes())
    companion = source.with_suffix(".pxd")
    if companion.is_file():
        h.update(companion.read_bytes())
    return h.hexdigest()


def stamped(source: Path, folder: Path) -> bool:
    """Whether ``folder`` holds the stamp of ``source`` as it is now (False: a stamp of
    another source, or none)."""
    try:
        return (folder / (source.stem + STAMP)).read_text().strip() == digest(source)
    except OSError:
        return False


def install() -> None:
    """Put the source finder first on ``sys.meta_path`` (once, even if this module is
    reloaded: the class is told by name)."""
    mine = (__name__, _SourceFinder.__qualname__)
    if not any((type(f).__module__, type(f).__qualname__) == mine for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder(pure_python()))


def loaded() -> dict[str, bool]:
    """Per module of COMPILED imported so far: True when it runs as an extension."""
    return {
        name: isinstance(
            getattr(sys.modules[name], "__loader__", None), importlib.machinery.ExtensionFileLoader
        )
        for name in COMPILED
        if name in sys.modules
    }


install()
