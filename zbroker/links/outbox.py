"""Cutting link frames for the peer's limit (sans-IO).

The next node refuses (counts and drops) any frame over its ``max_frame_bytes`` plus
``LINK_FRAME_SLACK``, so a frame that holds too much is lost whole. A MSGS frame is cut at
``LINK_BATCH`` messages or before the message whose payload would take it past the link's
``batch_bytes``; a frame that headers or long paths still took past the limit is halved;
one message that fits no frame is reported as too large. ADVERT entries are cut the same
way by their encoded size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..const import LINK_BATCH

__all__ = ["ADVERT_BATCH", "advert_chunks", "cut_msgs"]

#: entries per ADVERT frame at most: a receiver handles a frame's entries in one go, and
#: counts them against its read budget per pass, so a long table costs several passes
ADVERT_BATCH = 2048

#: encode(chunk) -> frame bytes
Encode = Callable[[list[Any]], bytes]


def cut_msgs(
    box: list[Any], most: int, limit: int, encode: Encode
) -> Iterator[tuple[bytes, list[Any]]]:
    """Frames for the messages of ``box``: ``(frame, its messages)``. A frame longer than
    ``limit`` holds one message too large for any frame the peer takes: the caller drops
    it (counted)."""
    for start in range(0, len(box), LINK_BATCH):
        chunk = box[start : start + LINK_BATCH]
        # small messages (the common case) need no look at each one: the first and last
        # payloads tell whether the chunk may be large
        if (len(chunk[0][1]) + len(chunk[-1][1])) * len(chunk) > 2 * most:
            yield from _by_bytes(chunk, most, limit, encode)
        else:
            yield from _encode(chunk, most, limit, encode)


def _by_bytes(
    chunk: list[Any], most: int, limit: int, encode: Encode
) -> Iterator[tuple[bytes, list[Any]]]:
    """Cut before the message whose payload would take the frame past ``most`` bytes (a
    larger message travels alone)."""
    total = len(chunk)
    start = 0
    while start < total:
        end = total
        size = 0
        for i in range(start, total):
            size += len(chunk[i][1])
            if size > most and i > start:
                end = i
                break
        yield from _encode(chunk[start:end], 0, limit, encode)
        start = end


def _encode(
    chunk: list[Any], most: int, limit: int, encode: Encode
) -> Iterator[tuple[bytes, list[Any]]]:
    """One frame; if headers or long paths took it past ``limit``: cut by payload bytes
    (``most``, when not done yet), else in halves."""
    frame = encode(chunk)
    if len(frame) <= limit:
        yield frame, chunk
    elif most and len(chunk) > 1:
        yield from _by_bytes(chunk, most, limit, encode)
    elif len(chunk) > 1:
        half = len(chunk) // 2
        yield from _encode(chunk[:half], 0, limit, encode)
        yield from _encode(chunk[half:], 0, limit, encode)
    else:
        yield frame, chunk


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
        if len(e) > 4:  # selectors (engine rule 7)
            n += sum(len(t) + 3 for t in e[4])
        if chunk and (size + n > most or len(chunk) >= ADVERT_BATCH):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(e)
        size += n
    chunks.append(chunk)  # an empty full table is a frame too: it clears the receiver's
    return chunks
