"""The fuzz test's values and mutations (:class:`ValueGen`): random leaves and nested
values, topics and patterns good and bad, numbers from the edges of what msgpack and the
node's store hold, and the mutations that make a frame of any socket bad in one place (a
field's type or size, an element removed or added, bit flips, truncation, splices, frames
over the node's limit). All drawn from one seeded ``random.Random``; :class:`.FrameGen`
builds the frames of each socket on them."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import msgpack

from tests.integration.fuzz_common import GUARD, LIMIT, pack
from tests.integration.fuzz_oracle import _hashable

HUGE_INTS = (
    2**64 - 1,
    2**63,
    2**63 - 1,
    -(2**63),
    -(2**63) + 1,
    -1,
    0,
    2**31,
    -(2**31) - 1,
    2**32,
    255,
    256,
    65_536,
    86_400,
    100_001,
)
_WEIRD_FLOATS = (math.inf, -math.inf, math.nan, -0.0, 0.0, 1e308, 5e-324, 86_400.0, 0.5, -1.5)
_SEGMENTS = ("FZ", "fz", "a", "b1", "x_y", "q-1", "\u00e9", "z9", "r", "s", "d")
_BAD_TEXTS = (
    "",
    ".",
    "FZ..a",
    "FZ.",
    "FZ.*",
    "FZ.>",
    "FZ.>.a",
    "*",
    ">",
    "FZ.a*",
    "FZ a",
    "FZ.\t",
    "FZ.\x00",
    "FZ.\x7f",
    "FZ.\x85",
    "FZ.\u3000",
    "$ZB",
    "$ZB.x",
    "$ZB.fz.a",
    "FZ." + "x" * 520,
    ".".join(["FZ"] * 33),
    "\u20ac.\U0001f600",
)
_IDS = ("mutant", "m-2", "fz.orig", "fzorig", "a" * 64, "a" * 65, "-bad", "bad id", "", "x/y")
# msgpack type bytes (nil, never-used, bool, bin, ext, float, ints, str, array, map, fixes)
_MARKERS = bytes.fromhex("c0c1c2c3c4c5c6c7cacbcccfd0d3d4d9dadbdcdddedf909f808fa0ff")


class ValueGen:
    """Random values and mutations, all drawn from one seeded Random."""

    def __init__(self, rng: random.Random, broker_id: str) -> None:
        self.rng = rng
        self.broker_id = broker_id

    # -- values ---------------------------------------------------------------------------

    def rbytes(self, lo: int = 0, hi: int = 64) -> bytes:
        return self.rng.randbytes(self.rng.randint(lo, hi))

    def text(self) -> str:
        r = self.rng.random()
        if r < 0.4:
            return self.topic()
        if r < 0.7:
            return self.rng.choice((*_BAD_TEXTS, *_IDS))
        return "".join(
            chr(self.rng.choice((self.rng.randrange(0x20, 0x7F), self.rng.randrange(0, 0x3000))))
            for _ in range(self.rng.randint(0, 12))
        )

    def topic(self) -> str:
        rng = self.rng
        if rng.random() < 0.12:
            return rng.choice(_BAD_TEXTS)
        head = rng.choice(("FZ", "FZ", "FZ.r", "fz"))
        return ".".join([head, *(rng.choice(_SEGMENTS) for _ in range(rng.randint(1, 3)))])

    def pattern(self) -> str:
        rng = self.rng
        if rng.random() < 0.1:
            return rng.choice(_BAD_TEXTS)
        segs = [rng.choice((*_SEGMENTS, "*")) for _ in range(rng.randint(0, 2))]
        if rng.random() < 0.5:
            segs.append(">")
        return ".".join(["FZ", *segs])

    def broker(self) -> str:
        return self.rng.choice((*_IDS[:4], "fzo2", self.broker_id))

    def leaf(self) -> Any:
        rng = self.rng
        kind = rng.randrange(10)
        if kind == 0:
            return None
        if kind == 1:
            return rng.random() < 0.5
        if kind == 2:
            return rng.randint(-300, 300)
        if kind == 3:
            return rng.choice(HUGE_INTS)
        if kind == 4:
            return rng.choice(_WEIRD_FLOATS)
        if kind == 5:
            return rng.uniform(-1e6, 1e6)
        if kind in (6, 7):
            return self.text()
        if kind == 8:
            return self.rbytes(0, 24)
        return msgpack.ExtType(rng.randrange(0, 128), self.rbytes(0, 12))

    def value(self, depth: int = 0) -> Any:
        rng = self.rng
        r = rng.random()
        if depth >= 3 or r < 0.55:
            return self.leaf()
        if r < 0.8:
            return [self.value(depth + 1) for _ in range(rng.randint(0, 5))]
        keys = (self.text, self.leaf)
        out: dict[Any, Any] = {}
        for _ in range(rng.randint(0, 4)):
            key = rng.choice(keys)()
            if _hashable(key) and not isinstance(key, float):
                out[key] = self.value(depth + 1)
        return out

    def wrong(self, old: Any) -> Any:
        """A value of another type than ``old`` (often a huge int or an odd float)."""
        for _ in range(6):
            new = self.value(1) if self.rng.random() < 0.7 else self.rng.choice(HUGE_INTS)
            if type(new) is not type(old):
                return new
        return None if old is not None else []

    def headers(self) -> dict[str, Any] | None:
        if self.rng.random() < 0.5:
            return None
        return {self.rng.choice(("h", "k", "trace", "")): self.value(1) for _ in range(2)}

    # -- the frames a splice takes a piece of ------------------------------------------

    def publish(self) -> list[Any]:
        return [self.topic(), self.rbytes(), self.rng.choice((0, 1)), self.headers()]

    def control(self) -> list[Any]:
        """A control request, as a value (:class:`.FrameGen` builds them)."""
        raise NotImplementedError

    # -- mutations ------------------------------------------------------------------------

    def mutate_value(self, value: Any, depth: int = 0) -> Any:
        """Change one thing somewhere inside ``value``: a field's type or size, an element
        or key removed or added."""
        rng = self.rng
        if type(value) is list and value and (depth == 0 or rng.random() < 0.7):
            out = list(value)
            r = rng.random()
            i = rng.randrange(len(out))
            if r < 0.55:
                out[i] = self.mutate_value(out[i], depth + 1)
            elif r < 0.7:
                del out[i]
            elif r < 0.85:
                out.insert(rng.randrange(len(out) + 1), self.value(1))
            else:
                out.append(out[i])
            return out
        if type(value) is dict and value and rng.random() < 0.85:
            out_map = dict(value)
            key = rng.choice(list(out_map))
            r = rng.random()
            if r < 0.6:
                out_map[key] = self.mutate_value(out_map[key], depth + 1)
            elif r < 0.8:
                del out_map[key]
            else:
                new_key = self.leaf()
                if _hashable(new_key) and not isinstance(new_key, float):
                    out_map[new_key] = out_map.pop(key)
            return out_map
        return self.extreme(value) if rng.random() < 0.4 else self.wrong(value)

    def extreme(self, old: Any) -> Any:
        """A value of the same type as ``old`` from the edges: huge or negative ints, odd
        floats, bad or long text, long bytes, an array holding anything."""
        rng = self.rng
        if type(old) is bool:
            return not old
        if type(old) is int:
            new = rng.choice((*HUGE_INTS, -old, old + 1))
            return new if -(2**63) <= new < 2**64 else rng.choice(HUGE_INTS)
        if type(old) is float:
            return rng.choice(_WEIRD_FLOATS)
        if type(old) is str:
            return rng.choice((*_BAD_TEXTS, old * rng.randint(2, 40), old[: len(old) // 2]))
        if type(old) is bytes:
            return rng.randbytes(rng.choice((0, 1, 300, 3000)))
        if type(old) is list:
            return [*old, *(self.value(1) for _ in range(rng.randint(1, 3)))]
        return self.wrong(old)

    def retype(self, value: list[Any]) -> list[Any]:
        """The frame with a random type number (or a non-integer) first."""
        rng = self.rng
        first = rng.choice(
            (
                rng.randrange(-3, 40),
                rng.randrange(16, 23),
                rng.choice(HUGE_INTS),
                self.wrong(0),
            )
        )
        return [first, *value[1:]]

    def mutate_bytes(self, frame: bytes) -> bytes:
        rng = self.rng
        data = bytearray(frame)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            r = rng.random()
            if not data:
                data += self.rbytes(1, 8)
            elif r < 0.35:  # bit flips
                for _ in range(rng.randint(1, 4)):
                    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif r < 0.45:
                data[rng.randrange(len(data))] = rng.choice(_MARKERS)
            elif r < 0.6:  # truncation
                del data[rng.randrange(len(data)) :]
            elif r < 0.72:  # extension
                data += rng.choice((b"\x00", b"\xc0", b"\xc1", self.rbytes(1, 32)))
            elif r < 0.82:
                i = rng.randrange(len(data) + 1)
                data[i:i] = self.rbytes(1, 8)
            elif r < 0.9:
                i = rng.randrange(len(data))
                del data[i : i + rng.randint(1, 8)]
            else:  # splice with another frame
                other = pack(self.publish() if rng.random() < 0.5 else self.control())
                cut = rng.randrange(len(data))
                data[cut:] = other[rng.randrange(len(other)) :]
        return bytes(data[:GUARD])

    def oversized(self, base: list[Any]) -> bytes:
        """A frame over the node's limit (never over libzmq's guard), or exactly at it."""
        rng = self.rng
        size = rng.choice((LIMIT + 1, LIMIT + 2, GUARD, GUARD - 1, rng.randint(LIMIT + 1, GUARD)))
        r = rng.random()
        if r < 0.3:
            return rng.randbytes(size)
        if r < 0.6:
            frame = pack(base)
            return (frame + b"\x00" * size)[:size]
        if r < 0.8:
            size = LIMIT  # exactly the limit: must be served like any other frame
        pad = b"p" * max(0, size - len(pack([*base, b""])) - 4)
        frame = pack([*base, pad]) if rng.random() < 0.5 else pack([*base[:-1], pad])
        return frame[:GUARD]

    def fuzz(self, base: Callable[[], list[Any]]) -> bytes | list[bytes]:
        """One fuzzed frame built from ``base`` (never over libzmq's guard, which would
        drop the connection and the frames queued on it); sometimes a multi-part message."""
        frame = self._fuzz(base)
        return frame[:GUARD] if isinstance(frame, bytes) else frame

    def _fuzz(self, base: Callable[[], list[Any]]) -> bytes | list[bytes]:
        rng = self.rng
        r = rng.random()
        if r < 0.1:
            return self.rbytes(0, 300)
        if r < 0.38:
            return self.mutate_bytes(pack(base()))
        if r < 0.66:
            value = self.mutate_value(base())
            if rng.random() < 0.3:
                value = self.mutate_value(value)
            return pack(value)
        if r < 0.73:
            return pack(self.retype(base()))
        if r < 0.8:
            return pack(self.value())
        if r < 0.83:
            return self.mutate_bytes(pack(self.mutate_value(base())))
        if r < 0.95:
            return pack(base())
        if r < 0.98:
            return self.oversized(base())
        return [self.rbytes(0, 40) for _ in range(rng.choice((2, 3, 5)))]
