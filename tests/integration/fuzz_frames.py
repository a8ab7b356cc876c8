"""The fuzz test's frames (:class:`FrameGen`): random, mutated and oversized frames for
every socket of the node, all drawn from one seeded ``random.Random``."""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable
from typing import Any

import msgpack

from tests.integration.fuzz_common import GUARD, LIMIT, pack
from tests.integration.fuzz_oracle import _hashable, as_runs
from zbroker import wire
from zbroker.const import PROTOCOL_VERSION

_HUGE_INTS = (
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
_OPS = tuple(sorted(wire.OPS))
# STATUS and PEERS are the expensive requests (a status lists every durable subscription):
# rarer, so the run stays short
_OP_WEIGHT = {wire.STATUS: 1, wire.PEERS: 1, wire.DELIVER: 1, wire.ERROR: 1, wire.PUBLISH: 8}
_OP_WEIGHTS = tuple(_OP_WEIGHT.get(op, 3) for op in _OPS)
# msgpack type bytes (nil, never-used, bool, bin, ext, float, ints, str, array, map, fixes)
_MARKERS = bytes.fromhex("c0c1c2c3c4c5c6c7cacbcccfd0d3d4d9dadbdcdddedf909f808fa0ff")


class FrameGen:
    """Random, mutated and oversized frames, all drawn from one seeded Random."""

    def __init__(
        self,
        rng: random.Random,
        broker_id: str,
        staged: Callable[[str], tuple[int, int] | None] = lambda token: None,
    ) -> None:
        self.rng = rng
        self.broker_id = broker_id
        self.staged = staged  # (rows, chunks) the node holds under a token, per the oracle
        self.seq = itertools.count(1)
        self.lseq = itertools.count(1)  # PMSGS link sequence (mostly in order)

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
            return rng.choice(_HUGE_INTS)
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
            new = self.value(1) if self.rng.random() < 0.7 else self.rng.choice(_HUGE_INTS)
            if type(new) is not type(old):
                return new
        return None if old is not None else []

    def headers(self) -> dict[str, Any] | None:
        if self.rng.random() < 0.5:
            return None
        return {self.rng.choice(("h", "k", "trace", "")): self.value(1) for _ in range(2)}

    # -- valid frames (as values) ----------------------------------------------------------

    def publish(self) -> list[Any]:
        return [self.topic(), self.rbytes(), self.rng.choice((0, 1)), self.headers()]

    def publish_batch(self) -> bytes:
        """A publish batch of valid, fuzzed and non-bin elements (or a mutated one)."""
        rng = self.rng
        elements: list[Any] = []
        for _ in range(rng.choice((1, 2, 3, 15, 16, 40))):
            r = rng.random()
            if r < 0.6:
                elements.append(pack(self.publish()))
            elif r < 0.9:
                fuzzed = self.fuzz(self.publish)
                elements.append(fuzzed[0] if isinstance(fuzzed, list) and fuzzed else fuzzed)
            else:
                elements.append(self.value())
        if type(elements[0]) is not bytes:
            elements[0] = pack(self.publish())  # a batch starts with a bin
        frame = pack(elements)
        return self.mutate_bytes(frame)[:GUARD] if rng.random() < 0.2 else frame[:GUARD]

    def publish_runs(self) -> bytes:
        """A batch of publish runs, valid or with a run, a topic, an entry or an entry's
        field fuzzed (or a mutated one)."""
        rng = self.rng
        runs: list[Any] = []
        for _ in range(rng.choice((1, 2, 4, 9))):
            entries: list[Any] = [self.publish()[1:] for _ in range(rng.choice((0, 1, 3, 20)))]
            run: Any = [self.topic(), entries]
            r = rng.random()
            if r < 0.1:
                run = self.value()
            elif r < 0.2:
                run[0] = self.wrong(run[0])
            elif r < 0.3 and entries:
                entries[rng.randrange(len(entries))] = self.value()
            elif r < 0.4 and entries:
                e = entries[rng.randrange(len(entries))]
                i = rng.randrange(3)
                e[i] = self.wrong(e[i])
            runs.append(run)
        if type(runs[0]) is not list:
            runs[0] = [self.topic(), []]  # a batch of runs starts with an array
        frame = pack(runs)
        return self.mutate_bytes(frame)[:GUARD] if rng.random() < 0.2 else frame[:GUARD]

    def control(self) -> list[Any]:
        rng = self.rng
        op = rng.choices(_OPS, _OP_WEIGHTS)[0]
        name = f"fzd-{rng.randrange(6)}"
        body: dict[str, Any]
        if op == wire.ROUTES:
            body = {"pattern": self.pattern()} if rng.random() < 0.7 else {}
        elif op == wire.PUBLISH:
            topic, payload, fmt, headers = self.publish()
            body = {"topic": topic, "payload": payload, "fmt": fmt, "headers": headers}
        elif op == wire.READ:
            body = {"pattern": self.pattern(), "start": rng.randrange(0, 50), "limit": 20}
            if rng.random() < 0.5:
                body["end"] = rng.randrange(0, 2000)
        elif op == wire.DURABLE_OPEN:
            body = {
                "name": name,
                "pattern": rng.choice(("FZ.d.>", "FZ.r.>", "FZ.*")),
                "credit": rng.randint(1, 50),
                "max_msgs": rng.choice((0, 10, 100)),
            }
            if rng.random() < 0.3:  # valid, invalid, or not a string at all
                body["selector"] = rng.choice(("qty > 1", "qty >> 1", "", self.text()))
            elif rng.random() < 0.05:
                body["selector"] = self.value()
        elif op == wire.DURABLE_ACK:
            body = {"name": name, "upto": rng.randrange(0, 100)}
        elif op in (wire.DURABLE_CLOSE, wire.DURABLE_DELETE):
            body = {"name": name}
        elif op == wire.DELIVER:
            body = {"name": name, "q": 1, "redelivered": False, "msg": self.publish()}
        elif op == wire.ERROR:
            body = {"message": self.text()}
        elif op in (wire.HELLO, wire.STATUS, wire.PING, wire.PEERS):
            body = {}
        elif op == wire.STAGE:
            token = f"fzt-{rng.randrange(5)}"
            state = self.staged(token)
            body = {
                "token": token,
                # mostly the chunk the node expects next; sometimes a repeat or a gap
                "part": (state[1] if state else 0) + rng.choice((0, 0, 0, -1, 1)),
                "rows": [self.publish() for _ in range(rng.randint(0, 3))],
            }
            if rng.random() < 0.3:
                body["group"] = f"fzg-{rng.randrange(2)}"
        elif op == wire.STAGE_COMMIT:
            tokens = [f"fzt-{rng.randrange(5)}" for _ in range(rng.randint(0, 2))]
            body = {
                "tokens": [
                    # mostly the count the node holds (a commit that applies); else any
                    [t, (self.staged(t) or (0, 0))[0] if rng.random() < 0.7 else rng.randint(0, 6)]
                    for t in tokens
                ]
            }
            if rng.random() < 0.5:
                body["writer"] = f"fzw-{rng.randrange(2)}"
                body["batch"] = rng.randrange(4)
            if rng.random() < 0.3:
                body["group"] = f"fzg-{rng.randrange(2)}"
        elif op == wire.STAGE_ABORT:
            body = {"tokens": [f"fzt-{rng.randrange(5)}" for _ in range(rng.randint(0, 2))]}
        else:  # an op this generator has no template for (GAPS: {pattern: missed})
            body = {self.pattern(): rng.choice((1, 5, *_HUGE_INTS)) for _ in range(2)}
        return [op, rng.randrange(0, 2**32), body]

    def hello(self) -> list[Any]:
        rng = self.rng
        info = {
            "id": rng.choice(("mutant", "m-2", "fzo2")),
            "incarnation": rng.randrange(1, 1000),
            "group": "default",
            "version": PROTOCOL_VERSION,
            "name": rng.choice(("mx", "my")),
            "duplex": rng.random() < 0.5,
            "ttl": rng.randint(1, 8),
            "conduit": rng.random() < 0.3,
            "include": rng.choice(([], ["FZ.>"])),
            "exclude": rng.choice(([], ["FZ.x.>"])),
            "static": rng.choice(([], ["FZ.s.>"])),
            "heartbeat_interval": 0.5,
            "heartbeat_timeout": rng.choice((1.0, 2.0)),
        }
        if rng.random() < 0.5:  # (absent: a node from before the field)
            info["max_frame_bytes"] = rng.choice((4096, LIMIT, 1 << 30))
        return [wire.LINK_HELLO, info]

    def msgs_entry(self) -> list[Any]:
        rng = self.rng
        topic, payload, fmt, headers = self.publish()
        origin = self.broker()
        path = rng.choice(([origin], [origin, "fzo2"], [origin, self.broker_id], []))
        targets = rng.choice((None, None, [origin], [], ["fzo2", origin]))
        seq = next(self.seq) if rng.random() < 0.8 else rng.randrange(1, 1000)
        inc = rng.randrange(1, 4)
        return [topic, payload, fmt, headers, origin, inc, seq, time.time(), path, targets]

    def link(self) -> list[Any]:
        rng = self.rng
        kind = rng.choices(
            ("msgs", "msgr", "advert", "hb", "welcome", "other", "pmsgs", "pack"),
            (20, 30, 30, 12, 8, 10, 15, 4),
        )[0]
        if kind == "msgs":
            return [wire.MSGS, [self.msgs_entry() for _ in range(rng.randint(1, 6))]]
        if kind == "msgr":  # runs: a flood's messages share their run's fields
            entries = [self.msgs_entry() for _ in range(rng.randint(1, 8))]
            if rng.random() < 0.6:  # (mostly one origin's run on one topic and path)
                for m in entries[1:]:
                    m[0], m[4], m[5], m[8], m[9] = entries[0][0], *entries[0][4:6], *entries[0][8:]
            return [wire.MSGR, as_runs(entries)]
        if kind == "pmsgs":
            entries = []
            for _ in range(rng.randint(1, 6)):
                lseq = next(self.lseq) if rng.random() < 0.9 else rng.randrange(1, 1000)
                entries.append([lseq, *self.msgs_entry(), rng.randrange(1, 1 << 20)])
            return [wire.PMSGS, rng.choice((7, 7, 7, 8)), rng.choice((1, 1, 1, 50)), entries]
        if kind == "pack":
            return [wire.PACK, rng.randrange(0, 9), rng.randrange(0, 1000)]
        if kind == "advert":
            entries = [
                [self.pattern(), self.broker(), rng.choice((None, ["fzo2"], [self.broker()]))]
                for _ in range(rng.randint(0, 5))
            ]
            return [wire.ADVERT, rng.random() < 0.3, entries]
        if kind == "hb":
            return [wire.HEARTBEAT]
        if kind == "welcome":
            info = {"id": "fzo2", "incarnation": 1, "group": "default", "version": 1}
            return [wire.LINK_WELCOME, info]
        return rng.choice(
            (
                [wire.LINK_REFUSE, {"reason": self.text(), "retry": rng.random() < 0.5}],
                [wire.BYE, {"reason": self.text()}],
                self.hello(),
            )
        )

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
            new = rng.choice((*_HUGE_INTS, -old, old + 1))
            return new if -(2**63) <= new < 2**64 else rng.choice(_HUGE_INTS)
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
                rng.choice(_HUGE_INTS),
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

    def subscription_key(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            key = self.pattern().encode() + b"\0"
        elif r < 0.6:
            key = self.mutate_bytes(self.pattern().encode() + b"\0")
        elif r < 0.75:
            key = self.pattern().encode()  # no NUL terminator
        elif r < 0.85:
            key = self.rbytes(0, 40)
        elif r < 0.9:
            key = wire.SYNC_PREFIX + self.rbytes(1, 12)
        else:
            key = rng.randbytes(rng.choice((1, 60, 600, 3000))) + b"\0"
        return key

    def user_message(self) -> bytes:
        """A message an XSUB sends up that is neither a subscribe nor an unsubscribe."""
        data = self.rbytes(0, 80)
        if data and data[0] in (0, 1):
            data = bytes([self.rng.randrange(2, 256)]) + data[1:]
        return data
