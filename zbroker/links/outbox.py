"""Cutting link frames for the peer's limit (sans-IO).

The next node refuses (counts and drops) any frame over its ``max_frame_bytes`` plus
``LINK_FRAME_SLACK``, so a frame that holds too much is lost whole. A MSGR frame is cut at
``LINK_BATCH`` messages or before the message whose payload would take it past the link's
``batch_bytes``; a run that fits a frame by itself starts the next frame rather than
being split where one ends (the next node can splice a frame of one run), and so does a
run relayed whole with its entries' bytes (spliced, never packed again); a longer run is
split where frames end. A frame that headers or long paths still took past the limit is
halved; one message that fits no frame is reported as too large. ADVERT entries are cut
the same way by their encoded size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..const import LINK_BATCH, LINK_FRAME_SLACK

__all__ = ["ADVERT_BATCH", "advert_chunks", "cut_runs", "queued"]

#: entries per ADVERT frame at most: a receiver handles a frame's entries in one go, and
#: counts them against its read budget per pass, so a long table costs several passes
ADVERT_BATCH = 2048

#: encode(chunk) -> frame bytes
Encode = Callable[[list[Any]], bytes]


def queued(box: list[Any]) -> int:
    """The messages an outbox holds (its runs' entries)."""
    return sum([len(run[5]) for run in box])


def cut_runs(
    box: list[Any], most: int, limit: int, encode: Encode
) -> Iterator[tuple[bytes, int, str]]:
    """Frames for the MSGR runs of ``box`` (``[topic, origin, inc, path, targets,
    entries]``): ``(frame, messages it holds, its first topic)``, in order. A frame longer
    than ``limit`` holds one message too large for any frame the peer takes: the caller
    drops it (counted)."""
    for chunk, n in _pieces(box, most, False):
        yield from _encode(chunk, n, limit, encode, most)


def _pieces(box: list[Any], most: int, exact: bool) -> Iterator[tuple[list[Any], int]]:
    """The runs of ``box`` cut into frames of at most LINK_BATCH messages and ``most``
    payload bytes (a larger message travels alone). A run that fits a frame by itself but
    not what is left of the current one starts the next frame whole; a longer one is split
    where frames end, unless it carries its entries' bytes (relayed whole:
    :mod:`zbroker.wire.splice`) and they are within ``most`` + LINK_FRAME_SLACK. Small
    messages (the common case) need no look at each one unless ``exact`` (a frame came out
    past the peer's limit: every run is cut by its payloads): the first and last payloads
    of a stretch tell whether it may be large."""
    chunk: list[Any] = []
    n = size = 0
    for run in box:
        entries = run[5]
        total = len(entries)
        spliced = 0 if exact else _spliced_size(run, total, most)
        if chunk and not exact and 0 < total <= LINK_BATCH:
            # a run that fits a frame by itself (its ends' payloads say) but not the rest of
            # this one starts the next frame whole: a node's link runs end where its
            # frames do (node/publishes.py), and a piece of the next run in each frame
            # would leave it two runs, which the next node can only decode and pack again
            whole = spliced or (len(entries[0][0]) + len(entries[-1][0])) * total // 2
            if (spliced or whole <= most) and (n + total > LINK_BATCH or size + whole > most):
                yield chunk, n
                chunk, n, size = [], 0, 0
        if spliced:
            chunk.append(run)
            n += total
            size += spliced
            if n >= LINK_BATCH or size >= most:
                yield chunk, n
                chunk, n, size = [], 0, 0
            continue
        start = 0
        while start < total:
            end = min(total, start + LINK_BATCH - n)
            guess = (len(entries[start][0]) + len(entries[end - 1][0])) * (end - start) // 2
            if exact or size + guess > most:
                end, size = _by_bytes(entries, start, end, size, most, n == 0)
            else:
                size += guess
            if end > start:
                chunk.append(run if start == 0 and end == total else [*run[:5], entries[start:end]])
                n += end - start
                start = end
            if start < total:  # the frame is full (by count or by bytes)
                yield chunk, n
                chunk, n, size = [], 0, 0
    if chunk:
        yield chunk, n


def _spliced_size(run: list[Any], total: int, most: int) -> int:
    """The size of a run that carries its entries' bytes (relayed whole: joined as it came;
    cut, both pieces would be packed again) and so is never cut: its bytes' length, if it
    holds at most LINK_BATCH messages and its bytes are within ``most`` plus
    LINK_FRAME_SLACK (the fields and headers of a run the previous node cut at ``most``
    payload bytes; within the peer's limit, as ``most`` is at most the peer's
    max_frame_bytes and its limit is that plus LINK_FRAME_SLACK); else 0."""
    if len(run) != 7 or total > LINK_BATCH:
        return 0
    size = len(run[6])
    return size if size <= most + LINK_FRAME_SLACK else 0


def _by_bytes(
    entries: list[Any], start: int, end: int, size: int, most: int, empty: bool
) -> tuple[int, int]:
    """Where a frame holding ``size`` payload bytes (``empty``: no message yet) ends in
    ``entries[start:end]``, and its size then."""
    i = start
    while i < end:
        b = len(entries[i][0])
        if size + b > most and not (empty and i == start):
            break
        size += b
        i += 1
    return i, size


def _encode(
    chunk: list[Any], n: int, limit: int, encode: Encode, most: int
) -> Iterator[tuple[bytes, int, str]]:
    """One frame; if it is past ``limit``: cut by each payload's bytes (``most``, when not
    done yet: the first and last payloads misled), else (headers or long paths took it
    there) in halves."""
    frame = encode(chunk)
    if len(frame) <= limit or n < 2:
        yield frame, n, chunk[0][0]
        return
    if most:
        for piece, k in _pieces(chunk, most, True):
            yield from _encode(piece, k, limit, encode, 0)
        return
    half = n // 2
    first: list[Any] = []
    second: list[Any] = []
    taken = 0
    for run in chunk:
        k = len(run[5])
        if taken >= half:
            second.append(run)
        elif taken + k <= half:
            first.append(run)
        else:
            cut = half - taken
            first.append([*run[:5], run[5][:cut]])
            second.append([*run[:5], run[5][cut:]])
        taken += k
    yield from _encode(first, half, limit, encode, 0)
    yield from _encode(second, n - half, limit, encode, 0)


def advert_chunks(entries: list[list[Any]], most: int) -> list[list[list[Any]]]:
    """ADVERT entries cut into frames of about ``most`` bytes and at most ADVERT_BATCH
    entries: an interest table of tens of thousands of entries (a link's first, full
    advertisement) would otherwise be one frame over the receiver's max_frame_bytes,
    refused whole, or one long pass at the receiver."""
    chunks: list[list[list[Any]]] = []
    chunk: list[list[Any]] = []
    size = 0
    for e in entries:
        path = e[2]
        n = len(e[0]) + len(e[1]) + 8 + (sum(len(b) + 2 for b in path) if path else 0)
        if len(e) > 4 and e[4] is not None:  # selectors (engine rule 7)
            n += sum(len(t) + 3 for t in e[4])
        if chunk and (size + n > most or len(chunk) >= ADVERT_BATCH):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(e)
        size += n
    chunks.append(chunk)  # an empty full table is a frame too: it clears the receiver's
    return chunks
