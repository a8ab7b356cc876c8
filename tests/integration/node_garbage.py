"""The garbage :mod:`.test_node_garbage` sends to every socket of one node, and what the node
must count for it: malformed frames on the control ROUTER, the publish PULL and the deliver
XPUB (random bytes, bad msgpack, wrong shapes and types, unknown ops, extra parts, bad
topics and patterns, frames over the node's limit), frames of exactly the limit (served),
and sockets of the wrong type (refused by libzmq, never seen by the node).

Bad frames are counted by reason in ``exact``; frames that are bad for sure but whose
reason (not_msgpack, bad_shape or bad_type) is a codec detail count in ``loose_bad``."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import zmq

from tests.integration.fuzz_common import pack
from tests.integration.one_node import HOST
from zbroker import Broker, wire
from zbroker.const import LINK_FRAME_SLACK

_ARRAY_MARKERS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}

#: subscription keys a SUB sends that the node must count, and why
BAD_SUB_KEYS = {
    b"garbage-without-nul": "bad_subscription",
    b"": "bad_subscription",  # subscribe-to-everything
    b"G.A": "bad_subscription",  # a valid pattern, but no NUL
    b"\x00": "bad_pattern",  # empty pattern
    b"G..A\x00": "bad_pattern",
    b"G.>.A\x00": "bad_pattern",
    b"G.A*\x00": "bad_pattern",
    b"G A\x00": "bad_pattern",
    b"\xff\xfe\x00": "bad_pattern",  # not UTF-8
}

#: control requests (as values) of a wrong shape or type
BAD_CONTROL_VALUES: tuple[object, ...] = (
    "HELLO",
    None,
    7,
    {"op": 1},
    [],
    [1, 2],
    [1, 2, {}, 4],
    ["1", 1, {}],
    [1, "x", {}],
    [1, 1, []],
    [1.0, 1, {}],
)

#: publish frames (as values) of a wrong shape or type
BAD_PUBLISH_VALUES: tuple[object, ...] = (
    [],
    ["G.A", b"x", 0],
    ["G.A", b"x", 0, None, 1],
    {"topic": "G.A"},
    "G.A",
    None,
    [1, b"x", 0, None],
    ["G.A", "text, not bytes", 0, None],
    ["G.A", b"x", 2, None],
    ["G.A", b"x", True, None],
    ["G.A", b"x", 0.0, None],
    ["G.A", b"x", 0, [1]],
    ["G.A", b"x", 0, {b"bytes key": 1}],
)

#: topics a publish may not carry
BAD_TOPICS = (
    "",
    "G..A",
    "G.*",
    "G.>",
    "G A",
    "G.A\x00",
    "G.\x7f",
    "$ZB",
    "$ZB.X",
    "G." + "x" * 520,
    ".".join(["G"] * 33),
)


def _random_non_array_frames(rng: random.Random, count: int) -> list[bytes]:
    """Random frames that cannot decode to a msgpack array, so no node may accept them."""
    frames: list[bytes] = []
    while len(frames) < count:
        frame = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300)))
        if frame[0] not in _ARRAY_MARKERS:
            frames.append(frame)
    return frames


def _padded(build: Callable[[bytes], bytes], size: int) -> bytes:
    """A frame from ``build(pad)`` of exactly ``size`` bytes."""
    estimate = max(0, size - len(build(b"")))
    for n in range(estimate, max(-1, estimate - 16), -1):  # msgpack length headers grow
        frame = build(b"x" * n)
        if len(frame) == size:
            return frame
    raise AssertionError(f"cannot pad to exactly {size} bytes")


class Garbage:
    """Raw sockets to one node (``limit``: its max_frame_bytes), the garbage sent through
    them, and the bad input the node must count for it."""

    def __init__(self, b: Broker, limit: int) -> None:
        self.ports = b.ports
        self.limit = limit
        self.rng = random.Random(0x5EED)
        self.exact: Counter[str] = Counter()
        self.loose_bad = 0
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sockets: list[zmq.Socket[bytes]] = []

    @property
    def total(self) -> int:
        """Every bad frame sent so far."""
        return sum(self.exact.values()) + self.loose_bad

    def connect(self, kind: int, port: int) -> zmq.Socket[bytes]:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://{HOST}:{port}")
        self.sockets.append(s)
        return s

    def close(self) -> None:
        for s in self.sockets:
            s.close(linger=0)
        self.ctx.term()

    def control(self) -> zmq.Socket[bytes]:
        """Garbage on the control ROUTER; returns the DEALER that sent a HELLO of exactly
        the limit (it must be answered)."""
        rng, exact, limit = self.rng, self.exact, self.limit
        dealer = self.connect(zmq.DEALER, self.ports["control"])
        for frame in _random_non_array_frames(rng, 25):
            dealer.send(frame)
            self.loose_bad += 1
        for frame in (
            b"",
            b"\xc1",
            b"\xc1" + bytes(rng.getrandbits(8) for _ in range(100)),
            wire.encode_control(wire.HELLO, 1, {}) + b"\x00",  # trailing bytes
        ):
            dealer.send(frame)
            exact["not_msgpack"] += 1
        for value in BAD_CONTROL_VALUES:
            dealer.send(pack(value))
            self.loose_bad += 1
        for op in (0, -1, wire.ERROR, 1000, 2**40):  # never a request or link type
            dealer.send(pack([op, 1, {}]))
            exact["unknown_op"] += 1
        for parts in (
            [b"a", b"b"],
            [wire.encode_control(wire.HELLO, 2, {}), b""],
            [b"x"] * 5,
            [b"", b""],
        ):
            dealer.send_multipart(parts)
            exact["bad_frame_count"] += 1
        dealer.send(
            _padded(lambda pad: wire.encode_control(wire.HELLO, 3, {"pad": pad}), limit + 1)
        )
        # the largest frame libzmq lets through: over even a link frame's allowance
        dealer.send(b"\xc1" * (4 * limit + LINK_FRAME_SLACK))
        exact["oversized"] += 2
        # the frame limit is inclusive: exactly max_frame_bytes is served
        edge_dealer = self.connect(zmq.DEALER, self.ports["control"])
        edge_dealer.send(
            _padded(lambda pad: wire.encode_control(wire.HELLO, 77, {"pad": pad}), limit)
        )
        # over libzmq's own guard (MAXMSGSIZE = 4 x limit + LINK_FRAME_SLACK): the
        # connection is dropped by libzmq, the node never sees the frame: not counted
        guard = b"\xc1" * (4 * limit + LINK_FRAME_SLACK + 1)
        self.connect(zmq.DEALER, self.ports["control"]).send(guard)
        return edge_dealer

    def publish(self) -> None:
        """Garbage on the publish PULL, and one publish of exactly the limit (G.EDGE)."""
        exact, limit = self.exact, self.limit
        push = self.connect(zmq.PUSH, self.ports["publish"])
        for frame in _random_non_array_frames(self.rng, 25):
            push.send(frame)
            self.loose_bad += 1
        for frame in (
            b"",
            b"\xc1\xc1",
            wire.encode_publish("G.A", b"x", 0, None) + b"\x00",
        ):
            push.send(frame)
            exact["not_msgpack"] += 1
        push.send(pack(["G.A", b"x", 0, {1: "header name not a string"}]))
        self.loose_bad += 1
        push.send_multipart([b"\xc1", b"\xc1\xc1"])  # each part is a frame on a PULL
        exact["not_msgpack"] += 2
        for value in BAD_PUBLISH_VALUES:
            push.send(pack(value))
            self.loose_bad += 1
        for topic in BAD_TOPICS:
            push.send(wire.encode_publish(topic, b"x", 0, None))
            exact["bad_topic"] += 1
        push.send(_padded(lambda pad: wire.encode_publish("G.BIG", pad, 0, None), limit + 1))
        push.send(b"\xc1" * (4 * limit))
        exact["oversized"] += 2
        # exactly max_frame_bytes is accepted and delivered
        push.send(_padded(lambda pad: wire.encode_publish("G.EDGE", pad, 0, None), limit))
        guard = b"\xc1" * (4 * limit + 1)  # libzmq's guard
        self.connect(zmq.PUSH, self.ports["publish"]).send(guard)

    def deliver(self) -> tuple[list[zmq.Socket[bytes]], Counter[str]]:
        """Garbage on the deliver XPUB: the subscribers that sent it, and the bad input
        their unsubscribes add when they close (as malformed as their subscribes)."""
        garbage_sub = self.connect(zmq.SUB, self.ports["deliver"])
        for key, reason in BAD_SUB_KEYS.items():
            garbage_sub.subscribe(key)
            self.exact[reason] += 1
        # XSUB can send what a SUB never would: non-(un)subscribe messages, raw subscribes
        xsub = self.connect(zmq.XSUB, self.ports["deliver"])
        xsub.send(b"\x05not a subscription")
        xsub.send(b"")
        self.exact["bad_subscription"] += 2
        xsub.send(b"\x01G..B\x00")
        self.exact["bad_pattern"] += 1
        return [garbage_sub, xsub], Counter(BAD_SUB_KEYS.values()) + Counter(bad_pattern=1)

    def wrong_socket_types(self) -> None:
        """The wrong socket type: refused by libzmq's ZMTP handshake, never seen."""
        ports = self.ports
        self.connect(zmq.PUSH, ports["control"]).send(wire.encode_control(wire.HELLO, 1, {}))
        self.connect(zmq.DEALER, ports["publish"]).send(wire.encode_publish("G.A", b"x", 0, None))
        self.connect(zmq.PUB, ports["deliver"]).send(b"\x01G.A\x00")
