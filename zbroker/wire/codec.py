"""The msgpack layer under every frame: packing, unpacking into ProtocolError, array headers.

Every decoder of the protocol unpacks through :func:`unpack`, so a frame that is not one
msgpack value fails the same way everywhere (reason ``not_msgpack``). Encoders pack with
:func:`packb`, which keeps one msgpack Packer per thread: ``msgpack.packb`` builds a
Packer per call, and with it a 256 KiB buffer (grown by copying for a larger frame) that
is freed again at once. For a node's link and delivery frames that churn of large blocks
made the allocator hand memory back to the kernel and fault it in again, page by page,
frame after frame.
"""

from __future__ import annotations

import threading
from typing import Any

import msgpack

from ..errors import ProtocolError

_unpackb = msgpack.unpackb
_ExtraData = msgpack.ExtraData
_UnpackErrors = (ValueError, msgpack.UnpackException, TypeError)


#: what a frame with bytes after its value is refused for
TRAILING = "trailing bytes after the msgpack value"

#: a thread's Packer is replaced after packing more than this: a buffer grown for one
#: large value is not kept for good (one per thread that packs)
KEEP_PACKER_BYTES = 1 << 20


class _Packers(threading.local):
    """The calling thread's Packer (a Packer is not safe to share between threads; pack
    calls nothing back, so one thread never re-enters its own)."""

    def __init__(self) -> None:
        self.pack = msgpack.Packer().pack


_packers = _Packers()


def packb(value: Any) -> bytes:
    """``value`` packed as msgpack (as ``msgpack.packb``, without a Packer per call)."""
    mine = _packers
    out: bytes = mine.pack(value)
    if len(out) > KEEP_PACKER_BYTES:
        mine.pack = msgpack.Packer().pack
    return out


def unpack(frame: bytes | memoryview) -> Any:
    """The one msgpack value ``frame`` holds (raises ProtocolError ``not_msgpack``)."""
    try:
        # strict_map_key=False: header values may hold maps with non-string keys; the
        # decoders check the keys that must be strings (header names) themselves.
        return _unpackb(frame, raw=False, strict_map_key=False)
    except _ExtraData as exc:
        raise ProtocolError("not_msgpack", TRAILING) from exc
    except _UnpackErrors as exc:
        raise ProtocolError("not_msgpack", str(exc)) from exc


def array_header(n: int) -> bytes:
    """msgpack's header of an array of ``n`` elements (what precedes them)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


#: msgpack's bin 8 headers, by length: a publish's payload header without a Packer
BIN8_HEADERS = tuple(bytes((0xC4, n)) for n in range(256))


def bin_header(n: int) -> bytes:
    """msgpack's header of a bin of ``n`` bytes (what ``packb`` writes before them).

    A publish needs only this header before its payload: no pack call at all (a call
    costs more than the header for a small value)."""
    if n < 256:
        return BIN8_HEADERS[n]
    if n < 1 << 16:
        return b"\xc5" + n.to_bytes(2, "big")
    if n < 1 << 32:
        return b"\xc6" + n.to_bytes(4, "big")
    raise ValueError("bytes object is too large")


def str_list(value: Any, what: str) -> tuple[str, ...]:
    """``value`` as a tuple of strings (raises ProtocolError ``bad_type`` if it is not a
    msgpack array of strings; ``what`` names the field in the message)."""
    if type(value) is not list or not all(type(v) is str for v in value):
        raise ProtocolError("bad_type", f"{what} must be an array of strings")
    return tuple(value)
