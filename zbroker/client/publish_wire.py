"""What a client's publisher puts on the wire: a publish frame with headers (checked: they
come from the caller), a batched message as a frame of its own, a batch in the form its
node reads, and a persistent publish's request body (measured against the node's frame
limit). The publisher encodes a message without headers itself (its hot path).

The publisher (:mod:`.publisher`) decides when messages leave and in how many frames;
this module says what those frames are (:mod:`zbroker.wire.frames`: "Client publish",
"Publish batch", "Batch of publish runs").
"""

from __future__ import annotations

from typing import Any

from .. import wire
from ..errors import PayloadError

__all__ = [
    "Entry",
    "batch_frame",
    "entry_frame",
    "frame_of",
    "pairs",
    "persistent_body",
    "runs_of",
    "too_large",
    "with_headers",
]

_packb = wire.packb  # one Packer per thread (wire.codec), not one per call
_array_header = wire.array_header
# isinstance(k, str) without a generator's Python frame per header name
_is_str = str.__instancecheck__

#: a batched message's ``[payload, fmt, headers]`` encoded: its bytes, or for a payload
#: of 256 B or more without headers the parts that make them (header, the payload itself,
#: format and nil), joined only into the batch's frame: a large payload is copied once on
#: its way to the socket, not also into an entry of its own
Entry = bytes | tuple[bytes, bytes, bytes]


def with_headers(topic: str, raw: bytes, fmt: int, headers: Any) -> bytes:
    """A publish frame with headers, which are checked here: they come from the caller."""
    if not isinstance(headers, dict) or not all(map(_is_str, headers)):
        raise PayloadError("headers must be a dict with string keys")
    try:
        return wire.encode_publish(topic, raw, fmt, headers)
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadError(f"headers cannot be encoded with msgpack: {exc}") from exc


def entry_frame(topic: str, entry: Entry) -> bytes:
    """A batched message (``entry``: ``[payload, fmt, headers]`` encoded) as a publish
    frame of its own: ``[topic, payload, fmt, headers]``."""
    return frame_of(b"\x94" + _packb(topic), entry)


def frame_of(head: bytes, entry: Entry) -> bytes:
    """``entry`` as a publish frame of its own on the topic whose frames start with
    ``head`` (``[topic`` encoded: the entry's fields follow, its array header off)."""
    if isinstance(entry, tuple):
        return b"".join((head, entry[0][1:], entry[1], entry[2]))
    return head + entry[1:]


def batch_frame(batch: list[Entry], starts: list[tuple[str, int]], runs: bool) -> bytes:
    """A batch of encoded entries, in runs that start where ``starts`` say (per run its
    topic and first index), as one frame: a batch of runs for a node that reads them
    (``runs``: the entries' bytes joined under their heads, nothing encoded again), else
    a publish batch of publish frames (or the one frame alone)."""
    if not runs:
        frames = [entry_frame(topic, e) for topic, e in pairs(batch, starts)]
        return frames[0] if len(frames) == 1 else _packb(frames)
    parts: list[Any] = [_array_header(len(starts))]
    for topic, start, end in _spans(batch, starts):
        parts.append(b"\x92" + _packb(topic) + _array_header(end - start))
        if isinstance(batch[start], tuple) or isinstance(batch[end - 1], tuple):
            parts += _flat(batch[start:end])  # (large payloads: their entries' parts)
        else:
            parts += batch[start:end]  # (small ones: no look at each entry)
    try:
        return b"".join(parts)
    except TypeError:  # a run of small payloads at its ends held a large one between
        return b"".join(_flat(parts))


def _flat(entries: list[Any]) -> list[bytes]:
    """``entries`` with each entry's parts in its place (:data:`Entry`)."""
    flat: list[bytes] = []
    for entry in entries:
        if isinstance(entry, tuple):
            flat += entry
        else:
            flat.append(entry)
    return flat


def runs_of(pairs: list[tuple[str, Entry]]) -> tuple[list[Entry], list[tuple[str, int]]]:
    """A batch and its runs' starts (see :func:`batch_frame`) of ``(topic, entry)``."""
    starts = [(t, i) for i, (t, _) in enumerate(pairs) if not i or t != pairs[i - 1][0]]
    return [e for _, e in pairs], starts


def pairs(batch: list[Entry], starts: list[tuple[str, int]]) -> list[tuple[str, Entry]]:
    """Each entry of a batch with its run's topic."""
    return [(topic, e) for topic, start, end in _spans(batch, starts) for e in batch[start:end]]


def _spans(batch: list[Entry], starts: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """Per run of a batch: its topic, first index and end."""
    ends = [i for _, i in starts[1:]]
    ends.append(len(batch))
    return [(topic, start, end) for (topic, start), end in zip(starts, ends, strict=True)]


def persistent_body(
    topic: str, raw: bytes, fmt: int, headers: Any, frame_max: int
) -> dict[str, Any]:
    """The body of a persistent publish request (headers checked), refused with
    PayloadError if the request would be over the node's ``frame_max`` (0: not known)."""
    if headers is not None:
        with_headers(topic, raw, fmt, headers)  # checks them
    body = {"topic": topic, "payload": raw, "fmt": fmt, "headers": headers}
    if frame_max and len(raw) + len(topic) > frame_max - 256:
        # near the limit: measure the request as the node will (the largest req id)
        try:
            size = len(wire.encode_control(wire.PUBLISH, 2**32 - 1, body))
        except (TypeError, ValueError, OverflowError) as exc:
            raise PayloadError(f"headers cannot be encoded with msgpack: {exc}") from exc
        if size > frame_max:
            raise PayloadError(too_large(size, frame_max))
    return body


def too_large(size: int, frame_max: int) -> str:
    """Why a message of ``size`` bytes, encoded, cannot be published."""
    return (
        f"message of {size} bytes (topic, payload and headers, encoded) is over the "
        f"node's limit of {frame_max} bytes (its max_frame_bytes)"
    )
