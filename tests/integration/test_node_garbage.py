"""Integration tests of one node against garbage: malformed frames of every kind on every
socket are counted and survived, and the node keeps serving. An in-thread Broker, real
ZeroMQ sockets on 127.0.0.1, raw zmq sockets and real Clients.

How they wait, and how they prove that nothing more arrives: :mod:`.one_node`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import zmq

from tests.helpers import Collector
from tests.integration.one_node import (
    HOST,
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    counters,
    patterns_of,
)
from zbroker import (
    Broker,
    PayloadError,
    wire,
)
from zbroker.const import LINK_FRAME_SLACK

# -- garbage ---------------------------------------------------------------------------------------

_ARRAY_MARKERS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


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


def _recv_within(sock: zmq.Socket[bytes], timeout: float) -> bytes | None:
    if sock.poll(int(timeout * 1000), zmq.POLLIN):
        return sock.recv()
    return None


def test_garbage_on_every_socket_is_counted_and_survived(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    limit = 4096
    b = broker_factory(max_frame_bytes=limit)
    ports = b.ports
    good = client_factory(b.endpoint)
    got = Collector()
    good.subscribe("G.>", got)

    packb = msgpack.packb
    rng = random.Random(0x5EED)
    # Bad frames the node must count, by reason. Frames that are bad for sure but whose
    # reason (not_msgpack, bad_shape or bad_type) is a codec detail count as `loose_bad`.
    exact: Counter[str] = Counter()
    loose_bad = 0

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sockets: list[zmq.Socket[bytes]] = []

    def connect(kind: int, port: int) -> zmq.Socket[bytes]:
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://{HOST}:{port}")
        sockets.append(s)
        return s

    try:
        # ---- control ROUTER (PORT) --------------------------------------------------------
        dealer = connect(zmq.DEALER, ports["control"])
        for frame in _random_non_array_frames(rng, 25):
            dealer.send(frame)
            loose_bad += 1
        for frame in (
            b"",
            b"\xc1",
            b"\xc1" + bytes(rng.getrandbits(8) for _ in range(100)),
            wire.encode_control(wire.HELLO, 1, {}) + b"\x00",  # trailing bytes
        ):
            dealer.send(frame)
            exact["not_msgpack"] += 1
        for frame in (
            packb("HELLO"),
            packb(None),
            packb(7),
            packb({"op": 1}),
            packb([]),
            packb([1, 2]),
            packb([1, 2, {}, 4]),
            packb(["1", 1, {}]),
            packb([1, "x", {}]),
            packb([1, 1, []]),
            packb([1.0, 1, {}]),
        ):
            dealer.send(frame)
            loose_bad += 1
        for op in (0, -1, wire.ERROR, 1000, 2**40):  # never a request or link type
            dealer.send(packb([op, 1, {}]))
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
        edge_dealer = connect(zmq.DEALER, ports["control"])
        edge_dealer.send(
            _padded(lambda pad: wire.encode_control(wire.HELLO, 77, {"pad": pad}), limit)
        )
        # over libzmq's own guard (MAXMSGSIZE = 4 x limit + LINK_FRAME_SLACK): the
        # connection is dropped by libzmq, the node never sees the frame: not counted
        connect(zmq.DEALER, ports["control"]).send(b"\xc1" * (4 * limit + LINK_FRAME_SLACK + 1))

        # ---- publish PULL (PORT+1) ---------------------------------------------------------
        push = connect(zmq.PUSH, ports["publish"])
        for frame in _random_non_array_frames(rng, 25):
            push.send(frame)
            loose_bad += 1
        for frame in (
            b"",
            b"\xc1\xc1",
            wire.encode_publish("G.A", b"x", 0, None) + b"\x00",
        ):
            push.send(frame)
            exact["not_msgpack"] += 1
        push.send(packb(["G.A", b"x", 0, {1: "header name not a string"}]))
        loose_bad += 1
        push.send_multipart([b"\xc1", b"\xc1\xc1"])  # each part is a frame on a PULL
        exact["not_msgpack"] += 2
        for value in (
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
        ):
            push.send(packb(value))
            loose_bad += 1
        for topic in (
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
        ):
            push.send(wire.encode_publish(topic, b"x", 0, None))
            exact["bad_topic"] += 1
        push.send(_padded(lambda pad: wire.encode_publish("G.BIG", pad, 0, None), limit + 1))
        push.send(b"\xc1" * (4 * limit))
        exact["oversized"] += 2
        # exactly max_frame_bytes is accepted and delivered
        push.send(_padded(lambda pad: wire.encode_publish("G.EDGE", pad, 0, None), limit))
        connect(zmq.PUSH, ports["publish"]).send(b"\xc1" * (4 * limit + 1))  # libzmq's guard

        # ---- deliver XPUB (PORT+2) ---------------------------------------------------------
        bad_sub_keys = {
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
        garbage_sub = connect(zmq.SUB, ports["deliver"])
        for key, reason in bad_sub_keys.items():
            garbage_sub.subscribe(key)
            exact[reason] += 1
        # XSUB can send what a SUB never would: non-(un)subscribe messages, raw subscribes
        xsub = connect(zmq.XSUB, ports["deliver"])
        xsub.send(b"\x05not a subscription")
        xsub.send(b"")
        exact["bad_subscription"] += 2
        xsub.send(b"\x01G..B\x00")
        exact["bad_pattern"] += 1
        unsubscribes_on_close = Counter(bad_sub_keys.values()) + Counter(bad_pattern=1)

        # ---- the wrong socket type: refused by libzmq's ZMTP handshake, never seen --------
        connect(zmq.PUSH, ports["control"]).send(wire.encode_control(wire.HELLO, 1, {}))
        connect(zmq.DEALER, ports["publish"]).send(wire.encode_publish("G.A", b"x", 0, None))
        connect(zmq.PUB, ports["deliver"]).send(b"\x01G.A\x00")

        total = sum(exact.values()) + loose_bad

        # the boundary-size HELLO is answered
        reply = _recv_within(edge_dealer, WAIT)
        assert reply is not None, "no reply to a control request of exactly max_frame_bytes"
        op, req_id, body = wire.decode_control(reply)
        assert (op, req_id, body["broker_id"]) == (wire.HELLO, 77, b.broker_id)

        assert wait_until(lambda: counters(b)["bad_input"] >= total, WAIT), (
            f"bad_input {counters(b)['bad_input']} never reached {total}"
        )
        assert wait_until(lambda: counters(b)["received"] >= 1, WAIT)

        # ---- the node is unharmed: a normal client still gets exactly what it should ------
        assert b.running
        n = 200
        for i in range(n):
            good.publish("G.OK", i)
        good.publish("G.END", b"barrier")
        assert got.wait_topic("G.END")
        assert got.topics() == {"G.EDGE": 1, "G.OK": n, "G.END": 1}
        assert got.payloads("G.OK") == list(range(n))
        assert len(got.payloads("G.EDGE")[0]) > limit - 64

        status = b.status()
        c = status["counters"]
        assert c["bad_input"] == total, c
        assert c["received"] == n + 2
        assert c["delivered"] == n + 2
        assert status["subscriptions"]["patterns"] == ["G.>"]
        dropped = c["dropped"]
        assert dropped, "no drop reasons recorded"
        assert all(k.startswith("bad_input.") for k in dropped), dropped
        assert sum(dropped.values()) == total
        for reason in (
            "bad_frame_count",
            "oversized",
            "unknown_op",
            "bad_topic",
            "bad_subscription",
            "bad_pattern",
        ):
            assert dropped.get(f"bad_input.{reason}") == exact[reason], (reason, dropped)
        loose = sum(
            dropped.get(f"bad_input.{r}", 0) for r in ("not_msgpack", "bad_shape", "bad_type")
        )
        assert loose == exact["not_msgpack"] + loose_bad, dropped
        assert dropped.get("bad_input.not_msgpack", 0) >= exact["not_msgpack"]

        # ---- closing the garbage subscribers makes the XPUB report their unsubscribes, which
        # are exactly as malformed as the subscribes were
        garbage_sub.close(linger=0)
        xsub.close(linger=0)
        more = sum(unsubscribes_on_close.values())
        assert wait_until(lambda: counters(b)["bad_input"] >= total + more, WAIT)
        good.publish("G.AFTER", b"x")
        assert got.wait_topic("G.AFTER")
        c = counters(b)
        assert c["bad_input"] == total + more
        for reason, count in unsubscribes_on_close.items():
            assert c["dropped"][f"bad_input.{reason}"] == exact[reason] + count
        assert patterns_of(b) == {"G.>"}
    finally:
        for s in sockets:
            s.close(linger=0)
        ctx.term()


def test_a_publish_over_the_nodes_frame_limit_is_refused_by_the_client(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """The node announces its max_frame_bytes in its HELLO reply; a publish it would count
    and drop raises PayloadError in the publisher instead, for both kinds of publish, and
    one of exactly the limit is taken."""
    b = broker_factory(max_frame_bytes=4096)
    client = client_factory(b.endpoint)
    got = Collector()
    client.subscribe("LIM.>", got)
    with pytest.raises(PayloadError, match="over the node's limit of 4096 bytes"):
        client.publish("LIM.X", b"x" * 4096)
    with pytest.raises(PayloadError, match="over the node's limit of 4096 bytes"):
        client.publish("LIM.X", b"x" * 4085, headers={"h": "v"})
    with pytest.raises(PayloadError, match="over the node's limit of 4096 bytes"):
        client.publish("LIM.X", b"x" * 4090, persistent=True, confirm=True)
    # [topic, payload, fmt, nil]: 1 + 6 (fixstr "LIM.X") + 3 (bin 16) + 4084 + 2 = 4096
    assert len(wire.encode_publish("LIM.X", b"y" * 4084, 0, None)) == 4096
    client.publish("LIM.X", b"y" * 4084)
    client.publish("LIM.X", b"z" * 3000, persistent=True, confirm=True)
    client.publish("LIM.END", b"")
    assert got.wait_topic("LIM.END")
    assert [len(p) for p in got.payloads("LIM.X")] == [4084, 3000]
    c = counters(b)
    assert c["bad_input"] == 0 and c["received"] == 3, c


@pytest.mark.parametrize("callback", [None, "handler", 5])
def test_subscribe_with_a_callback_that_cannot_be_called_is_a_type_error(
    broker: Broker, client_factory: ClientFactory, callback: Any
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(TypeError, match="callback must be callable"):
        client.subscribe("T.>", callback)
    inbox = Collector()  # nothing of the refused one is left behind
    client.subscribe("T.>", inbox)
    client.publish("T.1", 1)
    assert inbox.wait_for(1)
    assert inbox.payloads() == [1]
