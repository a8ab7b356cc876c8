"""Integration tests of one node: topic rules, payloads, headers and message IDs. An
in-thread Broker, real ZeroMQ sockets on 127.0.0.1, real Clients.

How they wait, and how they prove that nothing more arrives: :mod:`.one_node`.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import msgpack
import pytest

from tests.helpers import Collector
from tests.integration.one_node import (
    ClientFactory,
    counters,
    patterns_of,
)
from zbroker import (
    Broker,
    InvalidTopic,
    PayloadError,
    ReservedTopic,
)

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
