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

:func:`tune_malloc` does the same for the C allocator (glibc's). A node's frames are
blocks of a few hundred KiB (a link frame of 256 KiB of payloads, libzmq's buffer for each
one received, the delivery frames), allocated and freed by the thousand a second, by two
threads (the node's and libzmq's I/O thread). glibc sizes its thresholds from what was
freed last: a block of 128 KiB or more may be mapped and unmapped per allocation, and a
free area of twice that at the top of a heap is handed back to the kernel, so under a
flood the same memory was returned and faulted in again, page by page (measured: a page
fault for every 3-5 messages of 1 KiB at each node of a chain). Fixed thresholds keep
those blocks in the heap: allocations up to :data:`DEFAULT_MMAP_THRESHOLD` come from the
heap, and a heap keeps up to :data:`DEFAULT_TRIM_THRESHOLD` free at its top before it
returns memory (what a node held at its peak stays resident up to that much per arena).
"""

from __future__ import annotations

import ctypes
import gc
import sys
from typing import Any

__all__ = [
    "DEFAULT_GC_YOUNG_THRESHOLD",
    "DEFAULT_MMAP_THRESHOLD",
    "DEFAULT_TRIM_THRESHOLD",
    "gc_status",
    "malloc_status",
    "tune_gc",
    "tune_malloc",
]

#: net allocations of container objects between two young collections (Python's is 700)
DEFAULT_GC_YOUNG_THRESHOLD = 100_000
#: blocks at least this large are mapped on their own (glibc's start is 128 KiB, moved by
#: what is freed); above the default ``limits.max_frame_bytes`` of 1 MiB
DEFAULT_MMAP_THRESHOLD = 4 << 20
#: free memory a heap keeps at its top before it gives some back to the kernel
DEFAULT_TRIM_THRESHOLD = 32 << 20
#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc refuses a larger mmap threshold (HEAP_MAX_SIZE / 2 on 64-bit)
_MMAP_THRESHOLD_MAX = 32 << 20

_malloc_tuned: dict[str, int] = {}


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


def tune_malloc(
    mmap_threshold: int = DEFAULT_MMAP_THRESHOLD, trim_threshold: int = DEFAULT_TRIM_THRESHOLD
) -> bool:
    """Fix glibc's mmap and trim thresholds for this process (``mallopt``); False where
    the C library is not glibc or refuses a value (then :func:`malloc_status` says
    untuned)."""
    if not 0 < mmap_threshold <= _MMAP_THRESHOLD_MAX:
        raise ValueError(
            f"mmap_threshold must be 1..{_MMAP_THRESHOLD_MAX} bytes, not {mmap_threshold}"
        )
    if not 0 < trim_threshold < 1 << 31:
        raise ValueError(f"trim_threshold must be 1..{(1 << 31) - 1} bytes, not {trim_threshold}")
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    if mallopt(_M_MMAP_THRESHOLD, mmap_threshold) != 1:
        return False
    if mallopt(_M_TRIM_THRESHOLD, trim_threshold) != 1:
        return False
    _malloc_tuned.update(mmap_threshold=mmap_threshold, trim_threshold=trim_threshold)
    return True


def _glibc_mallopt() -> Any:
    """glibc's ``mallopt``, or None (another C library: musl's takes and ignores it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    if not hasattr(libc, "gnu_get_libc_version"):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def malloc_status() -> dict[str, Any]:
    """What :func:`tune_malloc` set in this process (``tuned`` False: glibc's own)."""
    return {"tuned": bool(_malloc_tuned), **_malloc_tuned}
