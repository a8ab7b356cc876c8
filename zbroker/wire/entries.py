"""A run's entries written straight into msgpack bytes, without msgpack's Packer.

A node packs the entries ``[payload, fmt, headers, seq, ts]`` it numbered itself: into
MSGR frames at the publisher's node, into delivery frames for its own clients. msgpack's
Packer takes each entry's five objects through its generic dispatch, into its buffer, and
then copies the whole frame out of it. :func:`written` sizes the array first, makes one
bytes object of that size and writes each field into it: one copy of each payload, and
per entry 21 ns against the Packer's 108 at 100 B, 38 against 157 at 1 KiB
(``benchmarks/bench_entries.py``). :func:`numbered` does the same for a client's batch of
one publish run as the frame brought it: each entry's fields copied from the frame's
bytes, its seq and receive time written after them (the publishing node's shortcut, for
a flood's batch it delivers there or holds for a link: :mod:`zbroker.node.shortcut`).

The writer is C (in ``entries.pxd``, which Cython inlines into this module when it is
compiled: no Python source can write into a bytes object). Run from its source, this
module has none, and :func:`written` returns None: the caller packs as it always did. What
the writer returns is byte for byte what packing gives (``tests/test_entries.py``), so a
frame does not depend on whether its sender was compiled.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WRITES", "numbered", "written"]

#: whether :func:`written` writes (this module is the extension built with entries.pxd)
WRITES = not __file__.endswith((".py", ".pyc"))


def written(entries: list[Any]) -> bytes | None:
    """The msgpack array of ``entries``, as packing it gives, if each is a plain
    ``[payload: bytes, fmt: 0 or 1, None, seq: int in 0..2**64-1, ts: float]`` and this
    module is compiled; else None (pack them)."""
    if WRITES:
        return _write(entries)  # type: ignore[name-defined, no-any-return]  # noqa: F821  (entries.pxd's)
    return None


def numbered(
    frame: bytes, spans: list[int], seq: int, ts: bytes, header: bool = True
) -> bytes | None:
    """The msgpack array of a client's publish entries, numbered: for each ``start, end``
    pair of ``spans`` (an entry's three fields, ``payload, fmt, headers``, packed in
    ``frame``: :func:`zbroker.wire.heads.publish_run`), the entry ``[those fields, seq,
    ts]`` with seqs from ``seq`` + 1 on and ``ts`` a float64 as msgpack packs it (9
    bytes); without ``header``, the entries alone (to be joined after one header for
    several batches). None if this module is not compiled (the caller builds the entries
    itself)."""
    if WRITES:
        return _number(frame, spans, seq, ts, header)  # type: ignore[name-defined, no-any-return]  # noqa: F821  (entries.pxd's)
    return None
