# cython: boundscheck=False, wraparound=False
# (compiled, byte reads are unchecked: the read checks every position against the end itself)
"""A delivery frame of one message, read by its bytes (for the subscriber's low rate).

At a low rate each delivery frame holds one message: ``pattern NUL`` then the msgpack
of one run of one entry, ``[[topic, origin, inc, [[payload, fmt, headers, seq, ts]]]]``,
then the 8-byte pattern sequence. The general decode
(:func:`.delivery.decode_delivery_items`, then the client's
:func:`~zbroker.client.messages.messages_from_runs`) makes a dozen calls for it, and on a
cold cache (the client thread has waited half a millisecond while other processes ran)
they cost several times what they cost warm. :func:`lone_delivery` reads such a frame in
one pass instead, and only the common spelling of it: topic and origin strings, inc and
seq unsigned ints, a bin payload of fmt 0 (bytes), no headers, a float64 ts, nothing
after the ts. Anything else (headers, a msgpack payload, another spelling, a
frame that is not one) answers None, and the caller takes the general decode: the two
give the same message for every frame this one reads (``tests/test_lone.py``).

Plain Python that Cython compiles with ``lone.pxd`` (the reads as C); from its source it
is slower than the general decode, so the subscriber uses it only compiled
(:data:`COMPILED`).
"""

from __future__ import annotations

import struct

__all__ = ["COMPILED", "Lone", "lone_delivery"]

#: whether this module is the extension built with lone.pxd
COMPILED = not __file__.endswith((".py", ".pyc"))

#: (pattern, pattern sequence, topic, origin, incarnation, payload, seq, ts)
Lone = tuple[str, int, str, str, int, bytes, int, float]

_F64 = struct.Struct(">d")


class _Reader:
    """A read position in a delivery frame's body; ``at`` and ``value`` hold the last
    string's or bin's start and length, or the last int."""

    def __init__(self, frame: bytes, pos: int, end: int) -> None:
        self.frame = frame  # (compiled, ``b`` points into it: kept while the reader is)
        self.b = frame
        self.pos = pos
        self.end = end
        self.at = 0
        self.value = 0

    def big(self, k: int) -> bool:
        """The next ``k`` bytes as a big-endian unsigned int, into ``value``."""
        pos = self.pos
        if self.end - pos < k:
            return False
        b = self.b
        v = 0
        for i in range(pos, pos + k):
            v = (v << 8) | b[i]
        self.value = v
        self.pos = pos + k
        return True

    def sized(self, small: int, first: int) -> bool:
        """A str (``first`` 0xD9) or bin (0xC4) of 8, 16 or 32-bit length, or with
        ``small`` a fixstr: its bytes' start into ``at``, its length into ``value``."""
        if self.pos >= self.end:
            return False
        t = self.b[self.pos]
        self.pos += 1
        if small and 0xA0 <= t <= 0xBF:
            self.value = t & 0x1F
        elif not (first <= t <= first + 2 and self.big(1 << (t - first))):
            return False
        self.at = self.pos
        if self.end - self.pos < self.value:
            return False
        self.pos += self.value
        return True

    def uint(self) -> bool:
        """An unsigned int (a positive fixint or uint 8 to 64), into ``value``."""
        if self.pos >= self.end:
            return False
        t = self.b[self.pos]
        self.pos += 1
        if t <= 0x7F:
            self.value = t
            return True
        return 0xCC <= t <= 0xCF and self.big(1 << (t - 0xCC))

    def expect(self, a: int, b: int) -> bool:
        """The next two bytes are ``a`` and ``b``."""
        pos = self.pos
        if self.end - pos < 2 or self.b[pos] != a or self.b[pos + 1] != b:
            return False
        self.pos = pos + 2
        return True


def lone_delivery(frame: bytes) -> Lone | None:
    """The one message of a delivery frame spelt as the module docstring says, with the
    frame's pattern and sequence; None for any other frame."""
    end = len(frame) - 8
    r = _Reader(frame, 0, end)
    b = r.b
    nul = 0
    while nul < end and b[nul] != 0:
        nul += 1
    if nul == 0 or nul >= end:
        return None
    r.pos = nul + 1
    if not r.expect(0x91, 0x94) or not r.sized(1, 0xD9):
        return None
    topic_at, topic_n = r.at, r.value
    if not r.sized(1, 0xD9):
        return None
    origin_at, origin_n = r.at, r.value
    if not r.uint():
        return None
    inc = r.value
    if not r.expect(0x91, 0x95) or not r.sized(0, 0xC4):
        return None
    payload_at, payload_n = r.at, r.value
    # fmt 0 (bytes) and no headers: anything else is the general decode's
    if not r.expect(0x00, 0xC0) or not r.uint():
        return None
    seq = r.value
    if r.pos != end - 9 or b[r.pos] != 0xCB:
        return None
    ts: float = _F64.unpack_from(frame, r.pos + 1)[0]
    r.pos, r.end = end, end + 8
    r.big(8)  # the pattern sequence (8 bytes are there: the frame is longer than end)
    try:
        pattern = frame[:nul].decode("utf-8")
        topic = frame[topic_at : topic_at + topic_n].decode("utf-8")
        origin = frame[origin_at : origin_at + origin_n].decode("utf-8")
    except UnicodeDecodeError:
        return None
    payload = frame[payload_at : payload_at + payload_n]
    return pattern, r.value, topic, origin, inc, payload, seq, ts
