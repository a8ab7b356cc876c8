"""Entries sent on as they came: a run's entries' bytes kept from the frame that brought
them, and spliced into the frames that take them on.

A relay forwards a run's entries unchanged (:mod:`zbroker.node.relay`): to the next
node in a MSGR run, to the subscribers in a delivery run. Packing them again cost a relay
about as much as unpacking them (0.15-0.2 µs a message). So a large MSGR frame is decoded
with :func:`runs_with_bytes`: each run, ``[topic, origin, inc, path, targets, entries]``,
gets a seventh element, the bytes of its entries array in the frame (a ``memoryview``,
which no msgpack decode yields, so no peer can send one). A run that goes on whole and
unchanged carries those bytes along (its entries list is the same object), and
:func:`spliced` writes the array of such runs by packing only their other fields. The
wire does not change: what leaves is byte for byte what packing the runs would give.

Small frames (a low rate's message or few) and frames of many short runs are decoded as
any frame: per run the decoder makes a few calls more than ``unpackb`` would, which a
long run repays and a short one does not.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .codec import array_header, packb
from .frames import MSGR

__all__ = ["SPLICE_MIN_BYTES", "runs_with_bytes", "spliced"]

#: frames shorter than this are decoded whole (see the module docstring)
SPLICE_MIN_BYTES = 8192
#: ...and so are frames with more runs than one per this many bytes
SPLICE_RUN_BYTES = 2048

_START = bytes((0x92, MSGR))  # [MSGR, ...: a fixarray of 2, then the type
_ERRORS = (ValueError, TypeError, msgpack.UnpackException)
#: the header of a run's array, by the number of its fields before the bytes
_HEADS = {n: bytes((0x90 | n,)) for n in (4, 6)}


def _runs_count(frame: bytes) -> int:
    """The runs array's length from its header (after ``_START``), or -1."""
    b = frame[2]
    if b & 0xF0 == 0x90:
        return b & 0x0F
    if b == 0xDC:
        return int.from_bytes(frame[3:5], "big")
    return -1


def runs_with_bytes(frame: bytes) -> list[Any] | None:
    """A MSGR frame ``[MSGR, runs]`` decoded, each run of six fields with the bytes of its
    entries after them; None if ``frame`` is short, holds many short runs, or is not that
    shape (the caller then decodes it as any frame, and refuses it as that does)."""
    if len(frame) < SPLICE_MIN_BYTES or frame[:2] != _START:
        return None
    n = _runs_count(frame)
    if n < 1 or n * SPLICE_RUN_BYTES > len(frame):
        return None
    u = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(frame))
    u.feed(frame)
    view = memoryview(frame)
    unpack, tell = u.unpack, u.tell
    runs: list[Any] = []
    try:
        u.read_array_header()
        unpack()
        u.read_array_header()
        for _ in range(n):
            if u.read_array_header() != 6:
                return None
            run = [unpack(), unpack(), unpack(), unpack(), unpack()]
            start = tell()
            run.append(unpack())
            run.append(view[start : tell()])
            runs.append(run)
    except _ERRORS:
        return None
    if tell() != len(frame):
        return None  # (trailing bytes: the whole decode refuses them)
    return [MSGR, runs]


def spliced(runs: list[list[Any]], width: int) -> list[bytes | memoryview] | None:
    """The msgpack array of ``runs`` (each of ``width`` fields, its entries last) as parts
    to join, where a run carries its entries' bytes after them (``width + 1`` elements):
    those go in as they are. None if no run does (pack the array as usual)."""
    for run in runs:
        if len(run) > width:
            break
    else:
        return None
    head = _HEADS[width]
    parts: list[bytes | memoryview] = [array_header(len(runs))]
    for run in runs:
        if len(run) > width:
            parts.append(head)
            parts.append(packb(run[: width - 1])[1:])  # (its fields: their array's header off)
            parts.append(run[width])
        else:
            parts.append(packb(run))
    return parts
