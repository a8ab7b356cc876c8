"""Entries sent on as they came: a run's entries' bytes kept from the frame that brought
them, and spliced into the frames that take them on.

A relay forwards a run's entries unchanged (:mod:`zbroker.node.relay`): to the next
node in a MSGR run, to the subscribers in a delivery run. Packing them again cost a relay
about as much as unpacking them (0.13-0.2 µs a message). So when a MSGR frame holds one
run (a flood of one topic from one origin: what a frame mostly is) of many entries,
:func:`keep_run_bytes` gives the decoded run, ``[topic, origin, inc, path, targets,
entries]``, a seventh element: the bytes of its entries array in the frame (a
``memoryview``, which no msgpack decode yields, so no peer can send one). A run that goes
on whole and unchanged carries those bytes along (its entries list is the same object),
and :func:`spliced` writes the array of such runs by packing only their other fields.
A run the node numbered itself (a client's publishes, at the publisher's node) has no
such bytes, but where the writer of :mod:`.entries` is compiled its entries are written
into bytes directly, and join the frame the same way. The wire does not change: what
leaves is byte for byte what packing the runs would give.

Where the entries start is known without parsing them: a one-run frame is ``[MSGR,
[[fields..., entries]]]``, so they follow the four array and type bytes and the run's five
other fields, whose bytes are checked to be what packing those fields gives (a sender
that packed them otherwise keeps its frame packed again). A frame of several runs would
need every run's length: it is decoded as before.
"""

from __future__ import annotations

from typing import Any

from .codec import array_header, packb
from .entries import WRITES, written
from .frames import MSGR

__all__ = [
    "MSGR_HEAD",
    "ONE_RUN",
    "SPLICE_MIN_BYTES",
    "SPLICE_MIN_ENTRIES",
    "WRITE_MIN_ENTRIES",
    "keep_run_bytes",
    "spliced",
    "spliced_msgr",
]

#: runs of fewer entries keep nothing: keeping and splicing cost a few µs per frame more
#: than packing, which a run this long repays (``bench_runs.py --messages 32``: 1.26x at
#: 100 B, 1.27x at 1 KiB, a relay's decode and send-on per message)
SPLICE_MIN_ENTRIES = 32
#: a run of fewer entries is packed with its fields in one call rather than written
#: (:mod:`.entries`): below this the calls cost more than the writer saves
#: (``bench_entries.py``, a MSGR frame of one run at 100 B: 4 entries 1.03 µs packed
#: against 1.31 spliced, 8 entries 1.48 against 1.39, 32 entries 4.1 against 2.1)
WRITE_MIN_ENTRIES = 8
#: (frames shorter than this cannot hold so many: not looked at)
SPLICE_MIN_BYTES = 1024
#: a MSGR frame starts with these: array of 2, MSGR (its runs' array follows)
MSGR_HEAD = bytes((0x92, MSGR))
#: a one-run MSGR frame starts with these: then array of 1, array of 6
ONE_RUN = MSGR_HEAD + bytes((0x91, 0x96))
_FIELDS_AT = len(ONE_RUN)
#: the header of a run's array, by the number of its fields before the bytes
_HEADS = {n: bytes((0x90 | n,)) for n in (4, 6)}


def keep_run_bytes(value: list[Any], frame: bytes | memoryview) -> None:
    """``value``, ``frame`` decoded, if ``frame`` starts with :data:`ONE_RUN`: its run
    gets the bytes of its entries (the frame's tail) after its six fields, if the fields
    before them are packed as packing them gives."""
    run = value[1][0]
    if type(run[5]) is not list or len(run[5]) < SPLICE_MIN_ENTRIES:
        return
    try:
        fields = packb(run[:5])[1:]  # (their array's header off)
    except (TypeError, ValueError, OverflowError):
        return
    end = _FIELDS_AT + len(fields)
    if frame[_FIELDS_AT:end] == fields:
        run.append(memoryview(frame)[end:])


def spliced_msgr(runs: list[list[Any]]) -> bytes | None:
    """The MSGR frame of link ``runs`` (``[topic, origin, inc, path, targets, entries]``)
    if some run carries its entries' bytes, else None (pack the frame as usual)."""
    parts = spliced(runs, 6)
    return None if parts is None else b"".join([MSGR_HEAD, *parts])


def spliced(runs: list[list[Any]], width: int) -> list[bytes | memoryview] | None:
    """The msgpack array of ``runs`` (each of ``width`` fields, its entries last) as parts
    to join: a run that carries its entries' bytes after them (``width + 1`` elements) has
    those joined in as they are, one of at least WRITE_MIN_ENTRIES entries has them written
    (:func:`.entries.written`, where compiled), the others are packed. None if no run
    carries or gets its entries' bytes (pack the array as usual: one call)."""
    for run in runs:
        if len(run) > width or (WRITES and len(run[width - 1]) >= WRITE_MIN_ENTRIES):
            break
    else:
        return None
    head = _HEADS[width]
    parts: list[bytes | memoryview] = [array_header(len(runs))]
    for run in runs:
        if len(run) > width:
            body: bytes | memoryview | None = run[width]
        elif WRITES and len(run[width - 1]) >= WRITE_MIN_ENTRIES:
            body = written(run[width - 1])  # (None: an entry with headers; packed)
        else:
            body = None
        if body is None:
            parts.append(packb(run))
        else:
            parts.append(head)
            parts.append(packb(run[: width - 1])[1:])  # (its fields: their array's header off)
            parts.append(body)
    return parts
