"""Process-wide settings for a process whose job is to move messages.

Python's cyclic garbage collector runs a young-generation collection every 700 net
container allocations, and every so often a full one that walks every tracked object in
the process. A node's hot path allocates short-lived lists by the thousand (a link frame
of 512 messages is 512 lists until it has been routed), so under load it collected
hundreds of times a second, and each full collection also walked everything the process
created at start-up (modules, classes, functions) that will never be garbage. Measured on
a 3-node chain (docs/performance.md): the nodes spent about a tenth of a flood in the
collector, with single full collections of 20-40 ms.

:func:`tune_gc` moves what exists at start-up out of the collector's view
(:func:`gc.freeze`) and raises the young generation's threshold, so collections happen
when the heap really grows, not on churn that reference counting frees anyway. Cycles are
still collected. ``zbroker start`` calls it once the node is up; a program that embeds a
:class:`~zbroker.Broker` (or a busy client) may call it itself: it changes the whole
process, so the library never does that on its own.
"""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["DEFAULT_GC_YOUNG_THRESHOLD", "gc_status", "tune_gc"]

#: net allocations of container objects between two young collections (Python's is 700)
DEFAULT_GC_YOUNG_THRESHOLD = 100_000


def tune_gc(young_threshold: int = DEFAULT_GC_YOUNG_THRESHOLD) -> None:
    """Freeze the objects that exist now and collect the young generation only after
    ``young_threshold`` net allocations. The older generations keep their thresholds."""
    if young_threshold < 1:
        raise ValueError(f"young_threshold must be at least 1, not {young_threshold}")
    gc.collect()  # what is garbage now should not be frozen for good
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, older, oldest)


def gc_status() -> dict[str, Any]:
    """The collector's settings and work so far, for ``Broker.status()``."""
    return {
        "enabled": gc.isenabled(),
        "threshold": list(gc.get_threshold()),
        "frozen": gc.get_freeze_count(),
        "collections": [s["collections"] for s in gc.get_stats()],
    }
