# cython: boundscheck=False, wraparound=False
# (compiled, byte reads are unchecked: the walk checks every position against the end itself)
"""The head of a lone run: a MSGR frame of one run measured and checked without decoding
it (for the relay's shortcut, :mod:`zbroker.node.shortcut`); and a client's batch of one
publish run, likewise (:func:`publish_run`, for the shortcut at the publishing node).

A link frame of one run is ``[MSGR, [[topic, origin, inc, path, targets, entries]]]``.
:func:`run_head` walks its bytes once: the outer shape, the run's five shared fields (their
bytes are the *head*; the shortcut decodes and checks a head the first time its bytes
come, and the same bytes are the same fields), then every entry ``[payload, fmt,
headers, seq, ts]`` with the checks the node's decode (:func:`.codec.unpack`) and
:func:`.runs.check_runs` make of it:

* payload a bin; fmt the int 0 or 1; headers nil or a map, every string in it valid
  UTF-8 and no key an array or a map (the decode refuses both);
* seq an unsigned int below 2**63; ts a float or an int strictly between -TS_MAX and
  TS_MAX (NaN and the infinities are not);
* nothing after the frame's value.

It also asks what the shortcut needs: the seqs ascend by one. It answers where the
entries' array starts and the first and last seq, or ``(-1, 0, 0)`` for a frame that is
not such a run: the caller then takes it the general way, so a walk that refuses more
than the node's checks (ext types, a fmt or seq packed as another int type, headers
nested deeper than :data:`DEPTH`) costs that frame the shortcut, never a message.

The walk is plain Python that Cython compiles with ``heads.pxd`` (the cursor's state and
steps as C: a byte read is a C array access), or that runs as it is.
"""

from __future__ import annotations

from .frames import MSGR

__all__ = ["COMPILED", "DEPTH", "publish_run", "run_head"]

#: headers nested deeper than this (maps and arrays within maps) are not walked
DEPTH = 8
#: whether this module is the extension built with heads.pxd (from its source, the walk
#: costs about 2 µs an entry, compiled 10 ns: the shortcut walks only short frames then)
COMPILED = not __file__.endswith((".py", ".pyc"))

# (C constants where compiled: heads.pxd declares them)
_DEPTH = DEPTH
_MSGR = MSGR
#: the node's range of an unsigned int (seq, inc): below 2**63
_I64 = 0x8000000000000000
#: a float64 whose bits, sign cleared, are below these is strictly within +-TS_MAX (1e15;
#: NaN's and the infinities' bits are above): tests/test_heads.py walks the neighbours
_TS64 = 0x430C6BF526340000
#: the same for a float32: the bits of the least float32 at or above 1e15
_TS32 = 0x58635FAA
#: TS_MAX as an int (a ts packed as an int is within +-TS_MAX when below this in size)
_TS_INT = 1_000_000_000_000_000
_MAG64 = 0x7FFFFFFFFFFFFFFF
_ALL64 = 0xFFFFFFFFFFFFFFFF
#: a run that is not one: the answer of run_head
_NO = (-1, 0, 0)


class _Cursor:
    """A read position in a frame: ``value`` holds the last count, length or int read."""

    def __init__(self, frame: bytes | memoryview) -> None:
        self.b = frame
        self.pos = 0
        self.end = len(frame)
        self.value = 0

    def byte(self) -> int:
        """The next byte (-1 past the end)."""
        pos = self.pos
        if pos >= self.end:
            return -1
        self.pos = pos + 1
        return self.b[pos]

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

    def over(self, n: int) -> bool:
        """Past the next ``n`` bytes (False: fewer are left)."""
        if self.end - self.pos < n:
            return False
        self.pos += n
        return True

    def count(self, t: int) -> bool:
        """An array's header, of type byte ``t``: its count into ``value``."""
        if 0x90 <= t <= 0x9F:
            self.value = t & 0x0F
            return True
        if t == 0xDC:
            return self.big(2)
        if t == 0xDD:
            return self.big(4)
        return False

    def uint(self, t: int) -> bool:
        """An unsigned int below 2**63 (the node's range), of type byte ``t``: into ``value``."""
        if 0 <= t <= 0x7F:
            self.value = t
            return True
        if t == 0xCC:
            ok = self.big(1)
        elif t == 0xCD:
            ok = self.big(2)
        elif t == 0xCE:
            ok = self.big(4)
        elif t == 0xCF:
            ok = self.big(8)
        else:
            return False
        return ok and self.value < _I64

    def utf8(self, n: int) -> bool:
        """Past a string of ``n`` bytes if they are UTF-8 as Python's strict decoder takes it
        (no overlong forms, no surrogates, nothing above U+10FFFF)."""
        i = self.pos
        end = i + n
        if end > self.end:
            return False
        b = self.b
        while i < end:
            c = b[i]
            if c < 0x80:
                i += 1
                continue
            lo, hi = 0x80, 0xBF
            if 0xC2 <= c <= 0xDF:
                more = 1
            elif 0xE0 <= c <= 0xEF:
                more = 2
                if c == 0xE0:
                    lo = 0xA0
                elif c == 0xED:
                    hi = 0x9F
            elif 0xF0 <= c <= 0xF4:
                more = 3
                if c == 0xF0:
                    lo = 0x90
                elif c == 0xF4:
                    hi = 0x8F
            else:
                return False
            if i + more >= end:
                return False
            d = b[i + 1]
            if d < lo or d > hi:
                return False
            for j in range(i + 2, i + more + 1):
                if b[j] & 0xC0 != 0x80:
                    return False
            i += more + 1
        self.pos = end
        return True

    def items(self, n: int, depth: int, pairs: bool) -> bool:
        """Past ``n`` values (``pairs``: n key-value pairs of a map, no key an array or map)."""
        if depth >= _DEPTH:
            return False
        for _ in range(n):
            if pairs:
                if self.pos >= self.end:
                    return False
                t = self.b[self.pos]
                if 0x80 <= t <= 0x9F or 0xDC <= t <= 0xDF:
                    return False  # (the decode cannot hash it)
                if not self.skip(depth + 1):
                    return False
            if not self.skip(depth + 1):
                return False
        return True

    def text(self, t: int) -> bool:
        """Past a string of type byte ``t`` whose bytes are UTF-8."""
        if 0xA0 <= t <= 0xBF:
            return self.utf8(t & 0x1F)
        if t == 0xD9 or t == 0xDA or t == 0xDB:  # str 8, 16, 32
            return self.big(1 << (t - 0xD9)) and self.utf8(self.value)
        return False

    def skip(self, depth: int) -> bool:
        """Past any one value the node's decode takes, bar ext types."""
        t = self.byte()
        if t < 0:
            return False
        if t <= 0x7F or t >= 0xE0 or t == 0xC0 or t == 0xC2 or t == 0xC3:
            return True
        if 0xA0 <= t <= 0xBF or t == 0xD9 or t == 0xDA or t == 0xDB:
            return self.text(t)
        if 0x90 <= t <= 0x9F:
            return self.items(t & 0x0F, depth, False)
        if 0x80 <= t <= 0x8F:
            return self.items(t & 0x0F, depth, True)
        if t == 0xC4 or t == 0xC5 or t == 0xC6:  # bin 8, 16, 32
            return self.big(1 << (t - 0xC4)) and self.over(self.value)
        if t == 0xCA or t == 0xCB:  # float 32, 64
            return self.over(4 if t == 0xCA else 8)
        if 0xCC <= t <= 0xCF:  # uint 8..64
            return self.over(1 << (t - 0xCC))
        if 0xD0 <= t <= 0xD3:  # int 8..64
            return self.over(1 << (t - 0xD0))
        if t == 0xDC or t == 0xDD:  # array 16, 32
            return self.big(2 if t == 0xDC else 4) and self.items(self.value, depth, False)
        if t == 0xDE or t == 0xDF:  # map 16, 32
            return self.big(2 if t == 0xDE else 4) and self.items(self.value, depth, True)
        return False  # 0xC1 (never used) and the ext types

    def ts(self, t: int) -> bool:
        """Past a ts of type byte ``t``: a float or int strictly within +-TS_MAX."""
        if 0 <= t <= 0x7F or t >= 0xE0:
            return True
        if t == 0xCB:
            return self.big(8) and (self.value & _MAG64) < _TS64
        if t == 0xCA:
            return self.big(4) and (self.value & 0x7FFFFFFF) < _TS32
        if t == 0xCF:
            return self.big(8) and self.value < _TS_INT
        if t == 0xD3:  # int 64: below zero when its top bit is set
            if not self.big(8):
                return False
            if self.value < _I64:
                return self.value < _TS_INT
            return _ALL64 - self.value < _TS_INT - 1
        if 0xCC <= t <= 0xCE:  # uint 8..32: below 2**32
            return self.over(1 << (t - 0xCC))
        if 0xD0 <= t <= 0xD2:  # int 8..32: within +-2**31
            return self.over(1 << (t - 0xD0))
        return False

    def fields(self, names: bool) -> bool:
        """Past an entry's ``payload, fmt, headers``: a bin, 0 or 1, nil or a map whose
        keys are strings if ``names`` (a publish's header names), else any the decode can
        hash."""
        t = self.byte()
        if not (t == 0xC4 or t == 0xC5 or t == 0xC6):
            return False
        if not self.big(1 << (t - 0xC4)) or not self.over(self.value):
            return False
        t = self.byte()
        if t != 0 and t != 1:
            return False
        t = self.byte()
        if t == 0xC0:
            return True
        if 0x80 <= t <= 0x8F:
            n = t & 0x0F
        elif (t == 0xDE or t == 0xDF) and self.big(2 if t == 0xDE else 4):
            n = self.value
        else:
            return False
        if not names:
            return self.items(n, 0, True)
        for _ in range(n):  # noqa: SIM110  (compiled: a C loop, no generator)
            if not self.text(self.byte()) or not self.skip(1):
                return False
        return True

    def entry(self) -> bool:
        """Past a link entry ``[payload, fmt, headers, seq, ts]``: its seq into ``value``."""
        if not self.count(self.byte()) or self.value != 5 or not self.fields(False):
            return False
        if not self.uint(self.byte()):
            return False
        seq = self.value
        if not self.ts(self.byte()):
            return False
        self.value = seq
        return True

    def publish(self) -> tuple[int, list[int]]:
        """See :func:`publish_run`."""
        spans: list[int] = []
        t = self.byte()
        if t == 0x94:  # one publish frame: [topic, payload, fmt, headers]
            if not self.text(self.byte()):
                return -1, []
            at = self.pos
            spans.append(at)
            if not self.fields(True) or self.pos != self.end:
                return -1, []
            spans.append(self.pos)
            return at, spans
        if not self.count(t) or self.value != 1:
            return -1, []
        if not self.count(self.byte()) or self.value != 2:
            return -1, []
        if not self.text(self.byte()):
            return -1, []
        at = self.pos
        if not self.count(self.byte()) or self.value == 0:
            return -1, []
        for _ in range(self.value):
            if not self.count(self.byte()) or self.value != 3:
                return -1, []
            spans.append(self.pos)
            if not self.fields(True):
                return -1, []
            spans.append(self.pos)
        if self.pos != self.end:
            return -1, []
        return at, spans

    def run(self) -> tuple[int, int, int]:
        """See :func:`run_head`."""
        if not self.count(self.byte()) or self.value != 2:
            return _NO
        if not self.uint(self.byte()) or self.value != _MSGR:
            return _NO
        if not self.count(self.byte()) or self.value != 1:
            return _NO
        if not self.count(self.byte()) or self.value != 6:
            return _NO
        for _ in range(5):
            if not self.skip(0):
                return _NO
        at = self.pos
        if not self.count(self.byte()) or self.value == 0:
            return _NO
        n = self.value
        if not self.entry():
            return _NO
        first = last = self.value
        for _ in range(n - 1):
            if not self.entry() or self.value != last + 1:
                return _NO
            last = self.value
        if self.pos != self.end:
            return _NO
        return at, first, last


def publish_run(frame: bytes) -> tuple[int, list[int]]:
    """For a client's publish frame, ``[topic, payload, fmt, headers]``, or batch of one
    publish run, ``[[topic, [[payload, fmt, headers], ...]]]``, whose entries pass the
    publish checks bar the topic's rules (the caller checks the topic once, by the bytes
    before the position returned: the array headers before it and the topic):
    ``(where the topic ends, [start, end, ...] of each entry's three fields, its array's
    header left out)``; else ``(-1, [])``. A view: ``(-1, [])``."""
    if type(frame) is not bytes:
        return -1, []
    return _Cursor(frame).publish()


def run_head(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(where its entries' array starts, first seq, last seq)`` if ``frame`` is a MSGR
    frame of one run whose entries pass the node's checks, with consecutive seqs; else
    ``(-1, 0, 0)``. The bytes before that position are the run's head. A frame read as a
    view of libzmq's message (a flood's large one, :mod:`.reading`) is walked in place."""
    return _Cursor(frame).run()
