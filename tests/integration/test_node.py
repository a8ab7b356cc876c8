"""Integration tests of one node: an in-thread Broker, real ZeroMQ sockets on 127.0.0.1,
real Clients (and raw zmq sockets for the garbage test).

Waiting is done on conditions, never on fixed sleeps. To prove that nothing *more* arrives
(exactly-once), a test publishes a final "barrier" message after the ones it counts: the
node processes one publisher's messages in order and sends everything for one client down
one connection in order, so once the barrier arrived every earlier copy (or duplicate) has
arrived too.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from tests.helpers import Collector
from zbroker import (
    AddressInUse,
    Broker,
    BrokerUnreachable,
    Client,
    ClientClosed,
    ConfigError,
    DataDirError,
    InvalidTopic,
    Message,
    PayloadError,
    ReservedTopic,
    ZBrokerError,
    wire,
)
from zbroker.const import LINK_FRAME_SLACK

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait (generous: CI machines are slow)

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def patterns_of(target: Broker | Client) -> set[str]:
    return set(target.status()["subscriptions"]["patterns"])


def counters(target: Broker | Client) -> dict[str, Any]:
    result: dict[str, Any] = target.status()["counters"]
    return result


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


# -- topic rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["$ZB", "$ZB.X", "$ZB.NODE.STATUS"])
def test_publish_to_reserved_topic_raises(
    broker: Broker, client_factory: ClientFactory, topic: str
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(ReservedTopic):
        client.publish(topic, b"x")
    assert counters(broker)["received"] == 0


BAD_TOPICS = [
    "",
    "A..B",
    ".A",
    "A.",
    "A.*",
    "A.>",
    "*",
    ">",
    "A B",
    "A.\x00",
    "A\tB",
    "A.B*",
    "x" * 513,
    ".".join(["s"] * 33),
]


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=lambda t: repr(t)[:20])
def test_publish_to_bad_topic_raises(
    broker: Broker, client_factory: ClientFactory, topic: str
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(InvalidTopic) as info:
        client.publish(topic, b"x")
    assert not isinstance(info.value, ReservedTopic)
    assert str(info.value)  # says what is wrong
    c = counters(broker)
    assert c["received"] == 0 and c["bad_input"] == 0  # refused before the wire


BAD_PATTERNS = ["", "A..B", ".A", "A.", "A.>.B", ">.A", "A.B*", "A*", "A B", "A.\x00", "x" * 513]


@pytest.mark.parametrize("pattern", BAD_PATTERNS, ids=lambda t: repr(t)[:20])
def test_subscribe_to_bad_pattern_raises(
    broker: Broker, client_factory: ClientFactory, pattern: str
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(InvalidTopic):
        client.subscribe(pattern, Collector())
    status = broker.status()
    assert status["subscriptions"]["patterns"] == []
    assert status["counters"]["bad_input"] == 0


def test_client_may_subscribe_to_reserved_namespace(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    sub = client.subscribe("$ZB.>", Collector())
    sub2 = client.subscribe("$ZB.*.X", Collector())
    assert sub.active and sub2.active
    assert sub.pattern == "$ZB.>"
    assert {"$ZB.>", "$ZB.*.X"} <= patterns_of(broker)


# -- payloads, headers, IDs ---------------------------------------------------------------------

PAYLOADS: list[tuple[Any, Any, str]] = [
    (b"raw\x00\xff bytes", b"raw\x00\xff bytes", "bytes"),
    (b"", b"", "bytes"),
    (bytearray(b"bytearray"), b"bytearray", "bytes"),
    (memoryview(b"memoryview"), b"memoryview", "bytes"),
    (
        {"a": [1, 2.5, "x", None, True], "nested": {"n": -1, "b": b"\x00\x01"}},
        {"a": [1, 2.5, "x", None, True], "nested": {"n": -1, "b": b"\x00\x01"}},
        "msgpack",
    ),
    ("a string", "a string", "msgpack"),
    (42, 42, "msgpack"),
    (-(2**63), -(2**63), "msgpack"),
    (3.25, 3.25, "msgpack"),
    ([1, "two", [3]], [1, "two", [3]], "msgpack"),
    ((1, 2), [1, 2], "msgpack"),
    (None, None, "msgpack"),
    (False, False, "msgpack"),
]


@pytest.mark.parametrize(
    ("sent", "expected", "ptype"),
    PAYLOADS,
    ids=[f"{type(p[0]).__name__}-{i}" for i, p in enumerate(PAYLOADS)],
)
def test_payload_round_trip(
    broker: Broker, client_factory: ClientFactory, sent: Any, expected: Any, ptype: str
) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("PL.>", got)
    client.publish("PL.X", sent)
    assert got.wait_for(1)
    msg = got.messages[0]
    assert msg.payload_type == ptype
    assert msg.payload == expected
    assert type(msg.payload) is type(expected)
    if ptype == "bytes":
        assert msg.raw == expected
    else:
        assert msgpack.unpackb(msg.raw, raw=False) == expected


def test_default_payload_is_empty_bytes(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("PL.>", got)
    client.publish("PL.EMPTY")
    assert got.wait_for(1)
    assert got.messages[0].payload == b""
    assert got.messages[0].payload_type == "bytes"
    assert got.messages[0].headers == {}


def test_headers_round_trip(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("HD.*", got)
    headers = {
        "k": "v",
        "n": 7,
        "neg": -3,
        "f": 1.5,
        "b": b"\x00\xff",
        "l": [1, "two"],
        "m": {"x": 1},
        "none": None,
        "t": True,
        "unicode-ключ": "значение",
    }
    client.publish("HD.A", b"1", headers=headers)
    client.publish("HD.B", b"2", headers={})
    client.publish("HD.C", b"3", headers=None)
    assert got.wait_for(3)
    by_topic = {m.topic: m for m in got.messages}
    assert by_topic["HD.A"].headers == headers
    assert by_topic["HD.B"].headers == {}
    assert by_topic["HD.C"].headers == {}


def test_unencodable_payload_or_headers_raise_payload_error(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(PayloadError):
        client.publish("PE.A", object())
    with pytest.raises(PayloadError):
        client.publish("PE.A", b"x", headers={1: "int key"})  # type: ignore[dict-item]
    with pytest.raises(PayloadError):
        client.publish("PE.A", b"x", headers={"k": object()})
    assert counters(broker)["received"] == 0


def test_message_ids(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    assert client.broker_id == broker.broker_id
    got = Collector()
    client.subscribe("ID.>", got)
    t0 = time.time()
    n = 50
    for i in range(n):
        client.publish("ID.A" if i % 2 else "ID.B", i)
    assert got.wait_for(n)
    t1 = time.time()
    ids = [m.id for m in got.messages]
    assert {i.origin for i in ids} == {broker.broker_id}
    assert {i.incarnation for i in ids} == {broker.incarnation}
    seqs = [i.seq for i in ids]
    assert all(b > a for a, b in itertools.pairwise(seqs)), seqs
    assert seqs == list(range(seqs[0], seqs[0] + n))  # nothing else was published
    assert len(set(ids)) == n
    first = ids[0]
    assert str(first) == f"{first.origin}:{first.incarnation}:{first.seq}"
    for m in got.messages:
        assert t0 - 1.0 <= m.timestamp <= t1 + 1.0


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


# -- lifecycle -----------------------------------------------------------------------------------


class _PortBlocker:
    """A listening TCP socket on 127.0.0.1:port (a port "in use")."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, port))
        self.sock.listen(1)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("offset", [0, 1, 2], ids=["control", "publish", "deliver"])
def test_port_in_use_raises_address_in_use_naming_the_port(
    tmp_path: Path, free_port: Callable[[], int], offset: int
) -> None:
    port = free_port()
    blocker = _PortBlocker(port + offset)
    data_dir = tmp_path / "node"
    try:
        broker = Broker(host=HOST, port=port, data_dir=data_dir)
        with pytest.raises(AddressInUse) as info:
            broker.start()
        assert str(port + offset) in str(info.value)
        assert not broker.running
    finally:
        blocker.close()
    # the failed start released the data directory and every port it had bound
    with Broker(host=HOST, port=port, data_dir=data_dir) as again:
        assert again.ports["control"] == port


def test_second_broker_on_same_port_raises_address_in_use(
    broker_factory: BrokerFactory, free_port: Callable[[], int]
) -> None:
    port = free_port()
    first = broker_factory(port=port)
    assert first.ports == {"control": port, "publish": port + 1, "deliver": port + 2}
    with pytest.raises(AddressInUse) as info:
        broker_factory(port=port)
    assert str(port) in str(info.value)
    assert first.running
    assert first.status()["broker_id"] == first.broker_id


def test_two_brokers_on_one_data_dir_raise_data_dir_error(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    data_dir = tmp_path / "shared"
    first = broker_factory(data_dir=data_dir)
    second = Broker(host=HOST, port=0, data_dir=data_dir)
    with pytest.raises(DataDirError) as info:
        second.start()
    assert str(data_dir) in str(info.value)
    assert not second.running
    assert first.running
    first.stop()
    # once the first one is gone the directory is free again
    third = broker_factory(data_dir=data_dir)
    assert third.broker_id == first.broker_id


def test_restart_keeps_broker_id_and_increments_incarnation(
    tmp_path: Path,
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
) -> None:
    data_dir = tmp_path / "persistent"
    seen: list[tuple[str, int]] = []
    ids_per_life: list[set[Any]] = []
    for _ in range(3):
        # an explicit port: a start that fails also uses up an incarnation
        b = broker_factory(data_dir=data_dir, port=free_port())
        seen.append((b.broker_id, b.incarnation))
        client = client_factory(b.endpoint)
        got = Collector()
        client.subscribe("LIFE.>", got)
        for i in range(3):
            client.publish("LIFE.X", i)
        assert got.wait_for(3)
        assert {m.id.incarnation for m in got.messages} == {b.incarnation}
        ids_per_life.append({m.id for m in got.messages})
        client.close()
        b.stop()
    assert len({bid for bid, _ in seen}) == 1
    first_inc = seen[0][1]
    assert [inc for _, inc in seen] == [first_inc, first_inc + 1, first_inc + 2]
    # message IDs never repeat across lives, although each life's sequence restarts
    assert not (ids_per_life[0] & ids_per_life[1]) and not (ids_per_life[1] & ids_per_life[2])


def test_configured_broker_id_is_used_and_persisted(
    tmp_path: Path, broker_factory: BrokerFactory, free_port: Callable[[], int]
) -> None:
    data_dir = tmp_path / "named"
    b = broker_factory(data_dir=data_dir, broker_id="node-alpha", port=free_port())
    assert b.broker_id == "node-alpha"
    b.stop()
    again = broker_factory(data_dir=data_dir, port=free_port())
    assert again.broker_id == "node-alpha"
    assert again.incarnation > b.incarnation


def test_stop_is_bounded_and_idempotent(
    broker_factory: BrokerFactory, client_factory: ClientFactory, free_port: Callable[[], int]
) -> None:
    port = free_port()
    b = broker_factory(port=port)
    client = client_factory(b.endpoint, timeout=1.0)
    client.subscribe("STOP.>", Collector())
    client.publish("STOP.X", b"x")
    t0 = time.monotonic()
    b.stop()
    first = time.monotonic() - t0
    assert first < 3.0, f"stop() took {first:.2f} s"
    assert not b.running
    t0 = time.monotonic()
    b.stop()
    assert time.monotonic() - t0 < 0.5
    with pytest.raises(ZBrokerError):
        b.status()
    # the ports are released: a new node binds the same triple right away
    again = broker_factory(port=port)
    assert again.ports["control"] == port


def test_calls_racing_stop_return_or_say_the_broker_stopped(
    broker_factory: BrokerFactory,
) -> None:
    # status() from a monitoring thread while the program stops the broker: each call
    # answers, or raises ZBrokerError at once; none waits out its timeout or fails on a
    # socket closed under it
    for _ in range(5):
        b = broker_factory()
        outcomes: list[str] = []
        started = threading.Event()

        def poll(
            b: Broker = b, outcomes: list[str] = outcomes, started: threading.Event = started
        ) -> None:
            while True:
                t0 = time.monotonic()
                try:
                    b.status()
                    outcomes.append("answered")
                except ZBrokerError:
                    outcomes.append(f"stopped {time.monotonic() - t0:.1f}")
                    return
                except Exception as exc:  # what the race must not give
                    outcomes.append(f"{type(exc).__name__}: {exc}")
                    return
                finally:
                    started.set()

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        assert started.wait(10)
        b.stop()
        t.join(10)
        assert not t.is_alive()
        last = outcomes[-1]
        assert last.startswith("stopped") and float(last.split()[1]) < 1.0, outcomes
        assert set(outcomes[:-1]) <= {"answered"}, outcomes


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with Broker(host=HOST, port=0, data_dir=tmp_path / "cm") as b:
        assert b.running
        endpoint = b.endpoint
        with Client(endpoint, timeout=10.0) as client:
            assert client.broker_id == b.broker_id
    assert not b.running


def test_client_to_port_without_node_raises_broker_unreachable(
    free_port: Callable[[], int],
) -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(BrokerUnreachable) as info:
        Client(f"tcp://{HOST}:{port}", timeout=0.5)
    elapsed = time.monotonic() - t0
    assert str(port) in str(info.value)
    assert elapsed < 5.0


def test_client_to_port_without_node_fails_within_its_timeout(
    free_port: Callable[[], int],
) -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(BrokerUnreachable):
        Client(f"tcp://{HOST}:{port}", timeout=0.5)
    elapsed = time.monotonic() - t0
    assert elapsed < 0.5 + 0.4, f"BrokerUnreachable after {elapsed:.2f} s for timeout=0.5"


@pytest.mark.parametrize("address", ["foo bar", "tcp://-x:7100", "tcp://[::1:7100"])
def test_client_to_a_bad_address_raises_config_error_at_once(address: str) -> None:
    """A host ZeroMQ refuses hung the constructor for ever (its thread died with a
    socket open, and Context.term waited for it); an unclosed IPv6 bracket raised a bare
    ValueError. (In a thread of its own, so that a hang fails the test instead.)"""
    raised: list[BaseException] = []

    def construct() -> None:
        try:
            Client(address, timeout=0.5).close()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=construct, daemon=True)
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive(), f"Client({address!r}) hung"
    assert len(raised) == 1 and isinstance(raised[0], ConfigError), raised
    assert address in str(raised[0])


@pytest.mark.parametrize(
    "option",
    [
        {"timeout": -1.0},
        {"timeout": float("nan")},
        {"publish_timeout": -1.0},
        {"heartbeat_interval": 0},
        {"hwm": -1},
    ],
    ids=["negative-timeout", "nan-timeout", "negative-publish-timeout", "zero-heartbeat", "hwm"],
)
def test_client_options_out_of_range_raise_config_error(option: dict[str, Any]) -> None:
    # a negative publish_timeout reached ZeroMQ as a LINGER it refuses: a bare ZMQError
    name = next(iter(option))
    with pytest.raises(ConfigError, match=name):
        Client("tcp://127.0.0.1:1", **option)


@pytest.mark.parametrize("busy", [1, 2], ids=["publish-port-taken", "deliver-port-taken"])
def test_port_zero_retries_when_a_neighbour_port_is_taken(
    tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch, busy: int
) -> None:
    taken_base, good_base = free_port(), free_port()
    blocker = _PortBlocker(taken_base + busy)
    # make the node's random choice deterministic: first a base whose neighbour is taken
    # (what happens at random on a busy machine), then a free one
    bases = iter([taken_base, good_base])

    def choose(sock: zmq.Socket[bytes], addr: str, *args: Any, **kwargs: Any) -> int:
        port = next(bases, None)
        if port is None:
            raise zmq.ZMQError(zmq.EADDRINUSE)
        sock.bind(f"{addr}:{port}")
        return port

    monkeypatch.setattr(zmq.Socket, "bind_to_random_port", choose)
    b = Broker(host=HOST, port=0, data_dir=tmp_path / "zero")
    try:
        b.start()
        assert b.ports == {"control": good_base, "publish": good_base + 1, "deliver": good_base + 2}
    finally:
        b.stop()
        blocker.close()


def _stop_orphaned_node(b: Broker) -> None:
    """Best effort: stop a node thread a Broker lost track of (see the xfail below)."""
    from zbroker.node import STOP

    node = getattr(b, "_node", None)
    ctx = getattr(node, "_ctx", None)
    endpoint = getattr(node, "_command_endpoint", None)
    if node is None or ctx is None or endpoint is None or ctx.closed:
        return
    threads = [t for t in threading.enumerate() if t.name == f"zbroker-node-{node.broker_id}"]
    if not any(t.is_alive() for t in threads):
        return
    cmd = ctx.socket(zmq.PAIR)
    cmd.setsockopt(zmq.LINGER, 0)
    cmd.connect(endpoint)
    cmd.send(STOP)
    for t in threads:
        t.join(5.0)
    cmd.close()
    ctx.term()


def test_start_can_be_retried_after_a_failed_start(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    port = free_port()
    before = set(threading.enumerate())
    blocker = _PortBlocker(port)
    b = Broker(host=HOST, port=port, data_dir=tmp_path / "retry")
    try:
        with pytest.raises(AddressInUse):
            b.start()
        blocker.close()
        try:
            b.start()
        except ZBrokerError:
            pass  # refusing a restart would be acceptable; leaking a node is not
        else:
            assert b.running
        b.stop()
        leaked = [
            t
            for t in threading.enumerate()
            if t.name.startswith("zbroker-node-") and t not in before and t.is_alive()
        ]
        assert not leaked, f"node thread(s) still running after stop(): {leaked}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, port))  # the port is free again
    finally:
        blocker.close()
        _stop_orphaned_node(b)
        b.stop()


def test_stalled_subscriber_does_not_cost_healthy_subscribers_messages(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    b = broker_factory(hwm=50)
    release = threading.Event()
    stalled_calls = [0]

    def stalled(msg: Message) -> None:  # blocks the stalled client's thread
        stalled_calls[0] += 1
        release.wait(30)

    slow = client_factory(b.endpoint, hwm=10)
    fast = client_factory(b.endpoint)
    healthy = Collector()
    try:
        slow.subscribe("SLOW.>", stalled)
        fast.subscribe("SLOW.>", healthy)
        payload = b"p" * 65536
        n = 600
        for i in range(n):
            fast.publish("SLOW.X", payload)
            if i % 20 == 19:
                # pace: let the node and the healthy client catch up (a message the node
                # dropped is counted, so this waits for both outcomes)
                def caught_up(k: int = i + 1) -> bool:
                    c = counters(b)
                    dropped: int = c["dropped"].get("subscriber_queue_full", 0)
                    return bool(c["received"] >= k and len(healthy) + dropped >= k)

                assert wait_until(caught_up, WAIT)
        assert wait_until(
            lambda: len(healthy) + counters(b)["dropped"].get("subscriber_queue_full", 0) >= n,
            WAIT,
        )
        assert counters(b)["dropped"].get("subscriber_queue_full", 0) == 0
        assert len(healthy) == n
        # the stalled subscriber lost only its own copies, and the loss is counted: it sees
        # the gaps in the per-pattern sequence and reports them to the node
        release.set()
        assert wait_until(lambda: stalled_calls[0] >= 1, WAIT)
        before = -1
        while stalled_calls[0] != before:  # let it drain what its queues hold
            before = stalled_calls[0]
            time.sleep(0.3)
        fast.publish("SLOW.X", b"barrier")  # reveals drops at the very end too
        assert wait_until(lambda: stalled_calls[0] + slow.missed == n + 1, WAIT)
        assert slow.missed > 0
        assert wait_until(
            lambda: counters(b)["dropped"].get("slow_subscriber", 0) == slow.missed, WAIT
        )
        assert len(healthy) == n + 1
    finally:
        release.set()


def test_publish_batches_lose_nothing_at_close_or_at_the_end_of_a_burst(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """Publishes made in a tight loop travel in publish batches: the batch a burst leaves
    unfilled is sent by the client thread, and close() sends what is still batched."""
    got = Collector()
    sub = client_factory(broker.endpoint)
    sub.subscribe("PB.>", got)
    pub = client_factory(broker.endpoint)
    assert pub.hello["publish_batch"] == broker.config.max_frame_bytes
    for i in range(1_003):  # not a multiple of the batch size: a tail is left over
        pub.publish("PB.TAIL", b"%d" % i)
    assert got.wait_for(1_003)  # nothing published after the burst: the thread sent it
    closing = Client(broker.endpoint)
    for i in range(2_005):
        closing.publish("PB.CLOSE", b"%d" % i)
    closing.close()  # at once: what is batched must still reach the node
    pub.publish("PB.END", b"barrier")
    assert got.wait_topic("PB.END")
    assert got.wait_for(1_003 + 2_005 + 1)
    assert got.payloads("PB.TAIL") == [b"%d" % i for i in range(1_003)]
    assert got.payloads("PB.CLOSE") == [b"%d" % i for i in range(2_005)]
    assert len(got) == 1_003 + 2_005 + 1


def _flood_until_closed(client: Client, start: threading.Barrier, taken: list[int], k: int) -> None:
    """Publish until the client is closed; count in ``taken[k]`` what publish() took."""
    start.wait()
    with contextlib.suppress(ClientClosed):
        while True:
            client.publish("RACE.X", b"x")
            taken[k] += 1


def test_every_publish_that_returned_while_another_thread_closes_is_delivered(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """Publishes racing close() from another thread: one that joined a batch after
    close() had handed the batch to the socket, and before the socket closed, returned
    as taken and was lost with the socket (a few trials in ten lost some). Now each one
    either reaches the node or raises ClientClosed."""
    got = Collector()
    client_factory(broker.endpoint).subscribe("RACE.>", got, initial=False)
    for trial in range(30):
        got.clear()
        closing = Client(broker.endpoint)
        taken = [0, 0, 0]
        start = threading.Barrier(len(taken) + 1)
        threads = [
            threading.Thread(target=_flood_until_closed, args=(closing, start, taken, k))
            for k in range(len(taken))
        ]
        for thread in threads:
            thread.start()
        start.wait()
        time.sleep(0.02)  # (a flood is under way: batches form)
        closing.close()
        for thread in threads:
            thread.join(WAIT)
        assert got.wait_for(sum(taken), WAIT), (trial, sum(taken), len(got))
        assert len(got) == sum(taken)


def test_a_catch_up_publish_left_in_a_batch_wakes_the_client_thread(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """A paced publisher catching up after a late wake-up makes two publishes within
    PUBLISH_LINGER and then pauses: the second waits in a batch nobody fills. The client
    thread sends that tail and disarms its fast polls, so the next pair's batch wakes it
    again (rather than waiting for a 1 ms poll, which was the latency tail of a paced
    publisher). Every message arrives once, in order."""
    got = Collector()
    sub = client_factory(broker.endpoint)
    sub.subscribe("CATCHUP.>", got)
    pub = client_factory(broker.endpoint)
    batched = 0
    for r in range(30):
        time.sleep(0.005)  # a pause: the first publish of the pair leaves alone
        pub.publish("CATCHUP.X", b"%d" % (2 * r))
        pub.publish("CATCHUP.X", b"%d" % (2 * r + 1))
        batched += bool(pub._publisher.batch_state()[0])
        assert got.wait_for(2 * r + 2)
        # read under the publisher's lock: the tail left under it, and the flusher disarmed
        assert not pub._publisher.batch_state()[1], f"round {r}: still armed after its tail left"
    assert batched > 0  # the pairs did use a batch (the second came within the linger)
    assert got.payloads("CATCHUP.X") == [b"%d" % i for i in range(60)]
    assert len(got) == 60


def test_a_burst_is_delivered_in_batch_frames_numbered_per_message(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """What a subscriber's socket receives for a burst: delivery frames holding one or
    several messages of the pattern (wire.decode_delivery_batch), every message once, in
    order, their pattern sequence numbers 1..n without a gap."""
    n = 20_000
    pub = client_factory(broker.endpoint)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 0)  # nothing may be dropped toward this test's socket
    try:
        sub.connect(f"tcp://{HOST}:{broker.ports['deliver']}")
        sub.subscribe(b"BURST.>\0")
        assert wait_until(lambda: "BURST.>" in pub.status()["subscriptions"]["patterns"], WAIT)
        for i in range(n):
            pub.publish("BURST.X", b"%d" % i)
        seqs: list[int] = []
        payloads: list[bytes] = []
        sizes: Counter[int] = Counter()
        deadline = time.monotonic() + WAIT
        while len(payloads) < n and time.monotonic() < deadline:
            if not sub.poll(100):
                continue
            pattern, first, envelopes = wire.decode_delivery_batch(sub.recv())
            assert pattern == "BURST.>"
            seqs.extend(range(first, first + len(envelopes)))
            payloads.extend(e[1] for e in envelopes)
            sizes[len(envelopes)] += 1
        assert payloads == [b"%d" % i for i in range(n)]
        assert seqs == list(range(1, n + 1))
        assert not sub.poll(200)  # nothing more (no duplicate)
        # a burst of 20,000 cannot be handled one message per poll pass
        assert sum(k for k in sizes if k > 1) > 0, sizes
        assert max(sizes) <= wire.DELIVERY_BATCH
    finally:
        sub.close()


def test_a_stalled_subscriber_counts_batches_it_lost_in_messages(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Messages travel in batch frames; a stalled subscriber's queue drops whole
    frames, and the gap it counts (and reports to the node) is in messages, exactly."""
    b = broker_factory(hwm=20)
    release = threading.Event()
    stalled_calls = [0]

    def stalled(msg: Message) -> None:
        stalled_calls[0] += 1
        release.wait(30)

    slow = client_factory(b.endpoint, hwm=5)
    pub = client_factory(b.endpoint)
    try:
        slow.subscribe("SMALL.>", stalled)
        # 4 KB each: 16 to a batch frame, 24 MB in all, more than the socket buffers hold
        n = 6_000
        for i in range(n):
            pub.publish("SMALL.X", b"%d" % i + b"." * 4000)
        assert wait_until(lambda: counters(b)["delivered"] >= n, WAIT)
        release.set()
        before = -1
        while stalled_calls[0] != before:  # let it drain what its queues hold
            before = stalled_calls[0]
            time.sleep(0.3)
        pub.publish("SMALL.X", b"barrier")  # reveals a drop at the very end too
        assert wait_until(lambda: stalled_calls[0] + slow.missed == n + 1, WAIT)
        assert slow.missed > 0
        assert wait_until(
            lambda: counters(b)["dropped"].get("slow_subscriber", 0) == slow.missed, WAIT
        )
    finally:
        release.set()


def test_raw_tcp_junk_is_survived(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Bytes that are not ZeroMQ at all, on every port. libzmq parses a stream that does not
    open with a ZMTP/3 greeting as ZMTP/1.0 (no handshake, no socket type), so some junk may
    reach the node as frames and be counted; the node must keep serving correctly."""
    rng = random.Random(7)
    ports = broker.ports
    for port in ports.values():
        for _ in range(5):
            with socket.create_connection((HOST, port), timeout=5) as raw:
                raw.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2048))))
    # and connections that send half a greeting, then nothing
    stuck = [socket.create_connection((HOST, port), timeout=5) for port in ports.values()]
    try:
        for s in stuck:
            s.sendall(b"\xff\x00\x00")
        client = client_factory(broker.endpoint)
        got = Collector()
        client.subscribe("RAW.>", got)
        for i in range(100):
            client.publish("RAW.X", i)
        client.publish("RAW.END", b"barrier")
        assert got.wait_topic("RAW.END")
        assert got.payloads("RAW.X") == list(range(100))
        assert broker.running
        c = counters(broker)
        assert c["received"] == 101
        assert c["delivered"] == 101
        bad = sum(v for k, v in c["dropped"].items() if k.startswith("bad_input."))
        assert c["bad_input"] == bad
    finally:
        for s in stuck:
            s.close()


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
