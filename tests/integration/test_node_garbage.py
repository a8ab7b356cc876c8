"""Integration tests of one node against garbage: malformed frames of every kind on every
socket are counted and survived, and the node keeps serving. An in-thread Broker, real
ZeroMQ sockets on 127.0.0.1, raw zmq sockets and real Clients.

How they wait, and how they prove that nothing more arrives: :mod:`.one_node`; the garbage
and what it must count: :mod:`.node_garbage`.
"""

from __future__ import annotations

from typing import Any

import pytest
import zmq

from tests.helpers import Collector
from tests.integration.node_garbage import Garbage
from tests.integration.one_node import (
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    counters,
    patterns_of,
)
from zbroker import Broker, Client, PayloadError, wire


def _recv_within(sock: zmq.Socket[bytes], timeout: float) -> bytes | None:
    if sock.poll(int(timeout * 1000), zmq.POLLIN):
        return sock.recv()
    return None


def _assert_served_as_before(b: Broker, good: Client, got: Collector, limit: int) -> int:
    """The node is unharmed: a normal client still gets exactly what it should (and the
    publish of exactly the limit); returns how many it published."""
    assert b.running
    n = 200
    for i in range(n):
        good.publish("G.OK", i)
    good.publish("G.END", b"barrier")
    assert got.wait_topic("G.END")
    assert got.topics() == {"G.EDGE": 1, "G.OK": n, "G.END": 1}
    assert got.payloads("G.OK") == list(range(n))
    assert len(got.payloads("G.EDGE")[0]) > limit - 64
    return n


def _assert_counted(b: Broker, garbage: Garbage, n: int) -> None:
    """Every bad frame counted once, under its reason; the good ones received."""
    exact, total = garbage.exact, garbage.total
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
    loose = sum(dropped.get(f"bad_input.{r}", 0) for r in ("not_msgpack", "bad_shape", "bad_type"))
    assert loose == exact["not_msgpack"] + garbage.loose_bad, dropped
    assert dropped.get("bad_input.not_msgpack", 0) >= exact["not_msgpack"]


def test_garbage_on_every_socket_is_counted_and_survived(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    limit = 4096
    b = broker_factory(max_frame_bytes=limit)
    good = client_factory(b.endpoint)
    got = Collector()
    good.subscribe("G.>", got)
    garbage = Garbage(b, limit)
    try:
        edge_dealer = garbage.control()
        garbage.publish()
        subscribers, unsubscribes_on_close = garbage.deliver()
        garbage.wrong_socket_types()
        total = garbage.total

        # the boundary-size HELLO is answered
        reply = _recv_within(edge_dealer, WAIT)
        assert reply is not None, "no reply to a control request of exactly max_frame_bytes"
        op, req_id, body = wire.decode_control(reply)
        assert (op, req_id, body["broker_id"]) == (wire.HELLO, 77, b.broker_id)

        assert wait_until(lambda: counters(b)["bad_input"] >= total, WAIT), (
            f"bad_input {counters(b)['bad_input']} never reached {total}"
        )
        assert wait_until(lambda: counters(b)["received"] >= 1, WAIT)
        n = _assert_served_as_before(b, good, got, limit)
        _assert_counted(b, garbage, n)

        # ---- closing the garbage subscribers makes the XPUB report their unsubscribes, which
        # are exactly as malformed as the subscribes were
        for s in subscribers:
            s.close(linger=0)
        more = sum(unsubscribes_on_close.values())
        assert wait_until(lambda: counters(b)["bad_input"] >= total + more, WAIT)
        good.publish("G.AFTER", b"x")
        assert got.wait_topic("G.AFTER")
        c = counters(b)
        assert c["bad_input"] == total + more
        for reason, count in unsubscribes_on_close.items():
            assert c["dropped"][f"bad_input.{reason}"] == garbage.exact[reason] + count
        assert patterns_of(b) == {"G.>"}
    finally:
        garbage.close()


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
