"""Integration tests of one node: delivery and status. An in-thread Broker, real ZeroMQ
sockets on 127.0.0.1, real Clients.

How they wait, and how they prove that nothing more arrives: :mod:`.one_node`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.one_node import (
    HOST,
    WAIT,
    ClientFactory,
    WaitUntil,
    counters,
    patterns_of,
)
from zbroker import (
    Broker,
    Client,
    ClientClosed,
    Message,
    wire,
)

# -- delivery --------------------------------------------------------------------------------


def test_exactly_once_in_publish_order(broker: Broker, client_factory: ClientFactory) -> None:
    publisher = client_factory(broker.endpoint)
    subscriber = client_factory(broker.endpoint)
    got = Collector()
    subscriber.subscribe("SEQ.>", got)
    n = 1000
    for i in range(n):
        publisher.publish("SEQ.DATA", f"{i:06d}".encode())
    publisher.publish("SEQ.END", b"barrier")
    assert got.wait_topic("SEQ.END"), f"barrier not delivered; got {len(got)} messages"
    assert got.payloads("SEQ.DATA") == [f"{i:06d}".encode() for i in range(n)]
    assert got.topics() == {"SEQ.DATA": n, "SEQ.END": 1}
    c = counters(broker)
    assert c["received"] == n + 1
    assert c["delivered"] == n + 1
    assert c["bad_input"] == 0


def test_payloads_at_every_bin_header_size_arrive_whole(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """The client writes a payload's bin header itself (bin 8, 16, 32): each size
    crossing arrives byte for byte, alone and in a batch, and the node refuses none."""
    publisher = client_factory(broker.endpoint)
    subscriber = client_factory(broker.endpoint)
    got = Collector()
    subscriber.subscribe("BIN.>", got)
    sizes = [0, 1, 255, 256, 65535, 65536, 70000]
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes * 3)]
    for p in payloads:
        publisher.publish("BIN.DATA", p)
    publisher.publish("BIN.END", b"barrier")
    assert got.wait_topic("BIN.END"), f"barrier not delivered; got {len(got)} messages"
    assert got.payloads("BIN.DATA") == payloads
    assert counters(broker)["bad_input"] == 0


def test_publisher_and_subscriber_on_one_client(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("SELF.*", got)
    for i in range(100):
        client.publish("SELF.A", i)
    client.publish("SELF.END", "barrier")
    assert got.wait_topic("SELF.END")
    assert got.payloads("SELF.A") == list(range(100))
    assert len(got) == 101


def test_overlapping_patterns_one_copy_per_subscription(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    wide, narrow = Collector(), Collector()
    client.subscribe("OV.>", wide)
    client.subscribe("OV.*.X", narrow)
    for i in range(30):
        client.publish("OV.A.X", i)  # both patterns
    for i in range(20):
        client.publish("OV.A.Y", i)  # only OV.>
    for i in range(10):
        client.publish("OV.B", i)  # only OV.>
    client.publish("NOBODY.X", b"unmatched")
    client.publish("OV.END.X", b"barrier")  # both patterns
    assert wide.wait_topic("OV.END.X")
    assert narrow.wait_topic("OV.END.X")
    assert wide.topics() == {"OV.A.X": 30, "OV.A.Y": 20, "OV.B": 10, "OV.END.X": 1}
    assert narrow.topics() == {"OV.A.X": 30, "OV.END.X": 1}
    assert {m.pattern for m in wide.messages} == {"OV.>"}
    assert {m.pattern for m in narrow.messages} == {"OV.*.X"}
    assert wide.payloads("OV.A.X") == list(range(30))
    assert narrow.payloads("OV.A.X") == list(range(30))
    # the two copies of one message are the same message: same ID
    assert [m.id for m in wide.messages if m.topic == "OV.A.X"] == [
        m.id for m in narrow.messages if m.topic == "OV.A.X"
    ]
    c = counters(broker)
    assert c["received"] == 30 + 20 + 10 + 1 + 1
    assert c["delivered"] == 2 * 30 + 20 + 10 + 2
    assert patterns_of(broker) == {"OV.>", "OV.*.X"}


def test_two_subscriptions_on_one_pattern_each_called_once(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    first, second, barrier = Collector(), Collector(), Collector()
    sub1 = client.subscribe("DUP.>", first)
    sub2 = client.subscribe("DUP.>", second)
    client.subscribe("DUPBAR", barrier)
    for i in range(25):
        client.publish("DUP.X", i)
    client.publish("DUPBAR", b"1")
    assert barrier.wait_for(1)
    assert first.payloads("DUP.X") == list(range(25))
    assert second.payloads("DUP.X") == list(range(25))
    # the node sends one copy per pattern, the client hands it to both callbacks
    assert counters(broker)["delivered"] == 25 + 1
    assert patterns_of(broker) == {"DUP.>", "DUPBAR"}

    sub1.unsubscribe()
    assert not sub1.active and sub2.active
    for i in range(10):
        client.publish("DUP.X", 100 + i)
    client.publish("DUPBAR", b"2")
    assert barrier.wait_for(2)
    assert len(first) == 25
    assert second.payloads("DUP.X") == list(range(25)) + [100 + i for i in range(10)]
    assert "DUP.>" in patterns_of(broker)  # still wanted by sub2

    sub2.unsubscribe()
    assert wait_until(lambda: "DUP.>" not in patterns_of(broker), WAIT)
    for i in range(5):
        client.publish("DUP.X", 200 + i)
    client.publish("DUPBAR", b"3")
    assert barrier.wait_for(3)
    assert len(first) == 25
    assert len(second) == 35
    c = counters(broker)
    assert c["received"] == 25 + 10 + 5 + 3
    assert c["delivered"] == 25 + 10 + 3


def test_unsubscribe_stops_delivery(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    publisher = client_factory(broker.endpoint)
    subscriber = client_factory(broker.endpoint)
    got, barrier = Collector(), Collector()
    sub = subscriber.subscribe("UN.>", got)
    subscriber.subscribe("UNBAR", barrier)
    assert patterns_of(broker) == {"UN.>", "UNBAR"}
    n = 40
    for i in range(n):
        publisher.publish("UN.A", i)
    publisher.publish("UNBAR", b"1")
    assert barrier.wait_for(1)
    assert got.payloads("UN.A") == list(range(n))

    sub.unsubscribe()
    sub.unsubscribe()  # idempotent
    assert not sub.active
    assert wait_until(lambda: patterns_of(broker) == {"UNBAR"}, WAIT)
    for i in range(n):
        publisher.publish("UN.A", n + i)
    publisher.publish("UNBAR", b"2")
    assert barrier.wait_for(2)
    assert len(got) == n
    c = counters(broker)
    assert c["received"] == 2 * n + 2
    # the node itself stopped sending: only the first n and the two barriers went out
    assert c["delivered"] == n + 2


def test_client_close_removes_its_interest(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    first = client_factory(broker.endpoint)
    second = client_factory(broker.endpoint)
    first.subscribe("CL.A.>", Collector())
    second.subscribe("CL.A.>", Collector())
    second.subscribe("CL.B", Collector())
    assert patterns_of(broker) == {"CL.A.>", "CL.B"}
    second.close()
    assert wait_until(lambda: patterns_of(broker) == {"CL.A.>"}, WAIT), patterns_of(broker)
    # first still has CL.A.> and still receives it
    got = Collector()
    first.subscribe("CL.A.>", got)
    first.publish("CL.A.X", b"still here")
    assert got.wait_for(1)
    first.close()
    assert wait_until(lambda: patterns_of(broker) == set(), WAIT), patterns_of(broker)
    assert broker.status()["subscriptions"]["count"] == 0


def test_closed_client_refuses_work(broker: Broker) -> None:
    client = Client(broker.endpoint, timeout=10.0)
    client.close()
    client.close()  # idempotent
    with pytest.raises(ClientClosed):
        client.publish("A.B", b"x")
    with pytest.raises(ClientClosed):
        client.subscribe("A.>", Collector())


def test_calls_waiting_when_the_client_closes_fail_at_once_with_client_closed(
    broker: Broker,
) -> None:
    """A call waiting for a node that is gone, when another thread closes the client,
    raised BrokerUnreachable ("the node did not answer") only once its whole timeout
    had passed."""
    client = Client(broker.endpoint, timeout=60.0, publish_timeout=60.0)
    broker.stop()  # nothing answers from now on
    calls: dict[str, Callable[[], Any]] = {
        "request": client.status,
        "subscribe": lambda: client.subscribe("W.>", Collector(), initial=False),
        "snapshot subscribe": lambda: client.subscribe("S.>", Collector()),
        "durable": lambda: client.subscribe("D.>", Collector(), durable="d1"),
        "persistent": lambda: client.publish("P.X", b"x", confirm=True),
    }
    raised: dict[str, BaseException] = {}

    def call(name: str) -> None:
        try:
            calls[name]()
        except BaseException as exc:
            raised[name] = exc

    threads = [threading.Thread(target=call, args=(name,), daemon=True) for name in calls]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # (they are waiting by now; one that is not yet fails the same way)
    t0 = time.monotonic()
    client.close()
    for thread in threads:
        thread.join(20.0)
    assert time.monotonic() - t0 < 20.0
    assert {name: type(exc) for name, exc in raised.items()} == dict.fromkeys(calls, ClientClosed)


def test_close_from_a_callback_stops_the_client_and_delivers_nothing_more(
    broker: Broker,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """close() from a callback (the client thread) raised RuntimeError ("cannot join
    current thread"), left the context and the user end of its channel open, and the
    rest of the frame's messages still reached the callbacks."""
    client = Client(broker.endpoint, timeout=10.0)
    calls: list[Message] = []
    errors: list[BaseException] = []

    def close_on_first(msg: Message) -> None:
        calls.append(msg)
        try:
            client.close()
        except BaseException as exc:
            errors.append(exc)

    client.subscribe("CB.>", close_on_first, initial=False)
    other = Collector()  # (the same pattern: it gets the message being delivered, only)
    client.subscribe("CB.>", other, initial=False)
    publisher = client_factory(broker.endpoint)
    for i in range(50):  # a burst: batches of several messages per delivery frame
        publisher.publish("CB.X", str(i).encode())
    # the client's connection is gone: the node no longer has its interest
    assert wait_until(lambda: "CB.>" not in patterns_of(broker), WAIT)
    assert errors == []
    assert [m.payload for m in calls] == [b"0"]
    assert other.payloads() == [b"0"]
    assert "raised" not in caplog.text
    with pytest.raises(ClientClosed):
        client.publish("CB.X", b"after")
    client.close()  # (idempotent)


# -- status ------------------------------------------------------------------------------------


def test_status_counters_are_exact(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = client_factory(broker.endpoint)
    b = client_factory(broker.endpoint)
    got_a, got_b = Collector(), Collector()
    a.subscribe("C.>", got_a)
    b.subscribe("C.A", got_b)
    for _ in range(10):
        a.publish("C.A", b"x")  # both patterns
    for _ in range(5):
        b.publish("C.B", b"y")  # C.> only
    for _ in range(3):
        a.publish("ELSEWHERE.X", b"z")  # nobody
    assert got_a.wait_for(15) and got_b.wait_for(10)
    # the ELSEWHERE publishes deliver nothing to wait for, and came fast enough to travel
    # in a publish batch (whose tail the client thread sends within about a millisecond)
    assert wait_until(lambda: broker.status()["counters"]["received"] >= 18, WAIT)

    status = broker.status()
    c = status["counters"]
    assert c["received"] == 18
    assert c["delivered"] == 25
    assert c["bad_input"] == 0
    assert c["dropped"] == {}
    assert status["broker_id"] == broker.broker_id
    assert status["incarnation"] == broker.incarnation
    assert status["subscriptions"] == {"count": 2, "patterns": ["C.>", "C.A"]}
    ports = broker.ports
    assert status["endpoints"] == {
        name: f"tcp://{HOST}:{ports[name]}" for name in ("control", "publish", "deliver")
    }
    assert status["uptime"] >= 0
    # the same status over the wire
    remote = a.status()
    assert remote["broker_id"] == broker.broker_id
    assert remote["counters"]["received"] == 18
    assert remote["counters"]["delivered"] == 25
    assert a.request(wire.PING) == {"incarnation": broker.incarnation}
    hello = a.request(wire.HELLO)
    assert hello["broker_id"] == broker.broker_id
    assert hello["ports"] == ports


def test_messages_iterator_with_timeout(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    received: list[Message] = []
    finished = threading.Event()

    def consume() -> None:
        try:
            for msg in client.messages("IT.>", timeout=1.0):
                received.append(msg)
        finally:
            finished.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    assert wait_until(lambda: "IT.>" in patterns_of(broker), WAIT)
    for i in range(20):
        client.publish("IT.X", i)
    assert finished.wait(WAIT), "messages() did not stop after its timeout"
    t.join(5)
    assert [m.payload for m in received] == list(range(20))
    # closing the iterator ended the subscription
    assert wait_until(lambda: "IT.>" not in patterns_of(broker), WAIT)


def test_messages_iterator_times_out_when_idle(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    t0 = time.monotonic()
    assert list(client.messages("IDLE.>", timeout=0.3)) == []
    elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 10.0
