"""Delivery frames (node XPUB to client SUB): one envelope, a batch, or a batch of runs,
with its trailer.

``pattern NUL msgpack(envelope | [envelope, ...] | [run, ...]) pattern-seq``; see
:mod:`.frames`. The encoders build the msgpack part; the node adds the pattern prefix and
the trailer.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from .codec import array_header, packb, unpack

#: bytes of a delivery frame read as a view that are copied to find its pattern; a
#: pattern with a selector may be longer (up to MAX_SELECTOR characters of selector):
#: such a frame is copied whole to find it
_PREFIX_LOOK = 4096


def encode_delivery_body(
    topic: str,
    payload: bytes,
    fmt: int,
    headers: dict[str, Any] | None,
    origin: str,
    incarnation: int,
    seq: int,
    ts: float,
) -> bytes:
    """Encode the part of a delivery frame after ``pattern NUL`` (once per message)."""
    return packb([topic, payload, fmt, headers, origin, incarnation, seq, ts])


def encode_delivery_batch(bodies: list[bytes]) -> bytes:
    """The msgpack part of a delivery batch from envelopes already encoded with
    :func:`encode_delivery_body` (a concatenation: nothing is re-encoded)."""
    return array_header(len(bodies)) + b"".join(bodies)


def _split_pattern(frame: bytes | memoryview) -> tuple[str, int]:
    """The pattern a delivery frame starts with, and the index of the NUL ending it."""
    if type(frame) is not bytes:  # a view of a large frame: its start holds the pattern
        head = bytes(frame[:_PREFIX_LOOK])
        frame = head if b"\0" in head else bytes(frame)
    nul = frame.find(b"\0")
    if nul <= 0:
        raise ProtocolError("bad_shape", "delivery frame has no pattern prefix")
    try:
        return frame[:nul].decode("utf-8"), nul
    except UnicodeDecodeError as exc:
        raise ProtocolError("bad_type", "pattern is not UTF-8") from exc


def _check_trailer(frame: bytes | memoryview) -> None:
    """A whole delivery frame holds at least a pattern byte, NUL, and the 8-byte trailer."""
    if len(frame) < 10:
        raise ProtocolError("bad_shape", "delivery frame too short")


def decode_delivery_items(frame: bytes | memoryview) -> tuple[str, int, list[list[Any]], bool]:
    """A whole delivery frame of any form (bytes, or a view of a large one): (pattern,
    pattern sequence of its *first* message, its items, whether they are runs). Items are
    8-element envelopes, or runs
    ``[topic, origin, incarnation, [[payload, fmt, headers, seq, ts], ...]]``."""
    _check_trailer(frame)
    last = int.from_bytes(frame[-8:], "big")
    pattern, nul = _split_pattern(frame)
    value = unpack(memoryview(frame)[nul + 1 : -8])  # (a view: the body is not copied)
    if type(value) is not list or not value:
        raise ProtocolError("bad_shape", "delivery body must be a non-empty array")
    batch = type(value[0]) is list
    if not batch and len(value) == 8:  # one envelope
        return pattern, last, [value], False
    if batch and len(value) == 1:
        # one item: a low rate's frame, checked without the general case's sets (each
        # call a cold pass makes costs it several times what it costs warm)
        item = value[0]
        if len(item) == 8:
            return pattern, last, value, False
        if len(item) == 4:
            entries = item[3]
            if type(entries) is list and len(entries) == 1:
                entry = entries[0]
                if type(entry) is list and len(entry) == 5:
                    return pattern, last, value, True
    items = value if batch else [value]
    if batch and not _arrays(items):  # (a map has a length too)
        raise ProtocolError("bad_shape", "delivery batch must hold arrays")
    lengths = _lengths(items)  # every item's length, at C speed (a call per frame)
    if lengths == _EIGHT:
        return pattern, last - len(items) + 1, items, False
    if batch and lengths == _FOUR:
        return pattern, last - _held(items) + 1, items, True
    raise ProtocolError("bad_shape", "delivery envelope must be an 8-element array")


def decode_delivery_batch(frame: bytes) -> tuple[str, int, list[list[Any]]]:
    """A whole delivery frame of any form: (pattern, pattern sequence of its *first*
    message, the envelopes it holds). Each envelope is an 8-element array (a run's
    messages are spelled out: for readers that want one form)."""
    pattern, first, items, runs = decode_delivery_items(frame)
    if runs:
        items = [
            [topic, *e[:3], origin, inc, *e[3:]]
            for topic, origin, inc, entries in items
            for e in entries
        ]
    return pattern, first, items


def _lengths(items: list[Any]) -> set[int]:
    try:
        return set(map(len, items))
    except TypeError:  # an element with no length
        return set()


def _arrays(items: list[Any]) -> bool:
    """Whether every one of ``items`` (not empty) is an array, at C speed."""
    return set(map(type, items)) == _LIST


def _held(runs: list[list[Any]]) -> int:
    """The messages runs hold (each checked: a non-empty array of 5-element arrays)."""
    n = 0
    for run in runs:
        entries = run[3]
        if type(entries) is not list or not entries or not _arrays(entries):
            raise ProtocolError("bad_shape", "delivery run must hold arrays of entries")
        if _lengths(entries) != _FIVE:
            raise ProtocolError("bad_shape", "delivery run must hold 5-element entries")
        n += len(entries)
    return n


_LIST = {list}
_EIGHT = {8}
_FOUR = {4}
_FIVE = {5}


def decode_delivery_frame(frame: bytes) -> tuple[str, int, list[Any]]:
    """A whole delivery frame: (pattern, pattern sequence, envelope fields)."""
    _check_trailer(frame)
    pattern, fields = decode_delivery(frame[:-8])
    return pattern, int.from_bytes(frame[-8:], "big"), fields


def decode_delivery(frame: bytes) -> tuple[str, list[Any]]:
    """Split ``pattern NUL envelope`` (a delivery frame without its sequence trailer)
    into its pattern and the decoded envelope fields."""
    pattern, nul = _split_pattern(frame)
    fields = unpack(frame[nul + 1 :])
    if type(fields) is not list or len(fields) != 8:
        raise ProtocolError("bad_shape", "delivery envelope must be an 8-element array")
    return pattern, fields
