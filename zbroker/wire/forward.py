"""Store-and-forward link frames: PMSGS (queued persistent messages) and PACK (their
cumulative acknowledgement).

Layouts and the meaning of epoch, base, lseq and pseq are in :mod:`.frames`. A PMSGS entry
is a MSGS entry (:func:`~.link.check_link_msg`) between its lseq and its pseq, optionally
followed by the ``[producer, pseq]`` of an idempotent publish.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from .codec import array_header, packb
from .frames import PMSGS
from .link import check_link_msg


def encode_pmsgs(epoch: int, base: int, entries: list[bytes]) -> bytes:
    """A PMSGS frame from entries already msgpack-encoded (each is encoded once, when it is
    queued, and kept in that form in memory and in the store)."""
    head: bytes = packb(PMSGS) + packb(epoch) + packb(base)
    return b"\x94" + head + array_header(len(entries)) + b"".join(entries)


def decode_pmsgs(value: list[Any]) -> tuple[int, int, list[Any]]:
    """Check a PMSGS frame's array; return (epoch, base, entries). Entries are checked one
    by one with :func:`check_pmsgs_entry` (a bad one is skipped, the rest are taken)."""
    if (
        len(value) != 4
        or type(value[1]) is not int
        or type(value[2]) is not int
        or type(value[3]) is not list
    ):
        raise ProtocolError("bad_shape", "PMSGS must be [25, epoch, base, entries]")
    if not 0 <= value[1] < 1 << 63 or not 1 <= value[2] < 1 << 63:
        raise ProtocolError("bad_value", "PMSGS epoch or base out of range")
    return value[1], value[2], value[3]


def check_pmsgs_entry(m: Any, topics: set[str] | None = None) -> int:
    """Type-check one PMSGS entry; return its lseq (raises ProtocolError). The lseq is
    checked first and alone, so a receiver can still account for an entry whose other
    fields are bad (see :func:`pmsgs_lseq`). ``topics``: as for
    :func:`~.link.check_link_msg`."""
    lseq = pmsgs_lseq(m)
    check_link_msg(m[1:11], topics)
    pseq = m[11]
    if type(pseq) is not int or not 0 <= pseq < 1 << 63:
        raise ProtocolError("bad_type", "PMSGS pseq must be a non-negative integer")
    if len(m) == 13:
        check_producer(m[12])
    return lseq


def check_producer(value: Any) -> None:
    """Check an idempotent publish's ``[producer, pseq]`` (raises ProtocolError)."""
    if (
        type(value) is not list
        or len(value) != 2
        or type(value[0]) is not int
        or type(value[1]) is not int
        or not 1 <= value[0] < 1 << 63
        or not 1 <= value[1] < 1 << 63
    ):
        raise ProtocolError("bad_type", "producer must be [producer, pseq], integers in 1..2^63-1")


def pmsgs_lseq(m: Any) -> int:
    """The link sequence of a PMSGS entry (raises ProtocolError if it has none)."""
    if type(m) is not list or not 12 <= len(m) <= 13:
        raise ProtocolError("bad_shape", "PMSGS entry must be a 12- or 13-element array")
    lseq = m[0]
    if type(lseq) is not int or not 1 <= lseq < 1 << 63:
        raise ProtocolError("bad_type", "PMSGS lseq must be a positive integer")
    return lseq


def decode_pack(value: list[Any]) -> tuple[int, int]:
    """Check a PACK frame's array; return (epoch, upto)."""
    if (
        len(value) != 3
        or type(value[1]) is not int
        or type(value[2]) is not int
        or not 0 <= value[1] < 1 << 63
        or not 0 <= value[2] < 1 << 63
    ):
        raise ProtocolError("bad_shape", "PACK must be [26, epoch, upto] (non-negative ints)")
    return value[1], value[2]
