"""Persistent publishes (confirmed, delivered once, live or retained; bad topics refused by
the client and by the node) and READ requests the node refuses (:mod:`.retention`)."""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.retention import (
    GRACE,
    WAIT,
    BrokerFactory,
    ClientFactory,
    retaining,
)
from zbroker import (
    InvalidTopic,
    RequestError,
    ReservedTopic,
    wire,
)
from zbroker.config import RetainRule

# -- persistent publish ---------------------------------------------------------------------------


def test_persistent_publish_returns_a_future(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule("F.>"))
    client = client_factory(broker.endpoint)
    futures = [client.publish("F.X", i, persistent=True) for i in range(20)]
    assert all(isinstance(f, Future) for f in futures)
    results = [f.result(WAIT) for f in futures]
    inc = broker.incarnation
    assert results == [{"id": ["R", inc, i + 1], "retained_seq": i + 1} for i in range(20)]
    # confirm=True alone implies persistent
    assert client.publish("F.Y", b"c", confirm=True) == {"id": ["R", inc, 21], "retained_seq": 21}
    assert client.publish("F.Z", b"p", persistent=True, confirm=True) == {
        "id": ["R", inc, 22],
        "retained_seq": 22,
    }
    assert [m.payload for m in client.read("F.X")] == list(range(20))


def test_persistent_publish_to_unretained_topic_is_confirmed_and_delivered_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule("KEEP.>"))
    sub = client_factory(broker.endpoint)
    got = Collector()
    sub.subscribe("U.>", got)
    pub = client_factory(broker.endpoint)
    inc = broker.incarnation
    assert pub.publish("U.X", b"one", confirm=True) == {"id": ["R", inc, 1], "retained_seq": None}
    assert pub.publish("U.END", b"barrier", confirm=True)["retained_seq"] is None
    assert got.wait_topic("U.END")
    time.sleep(GRACE)
    msgs = got.snapshot()
    assert [(m.topic, m.payload, m.seq) for m in msgs] == [
        ("U.X", b"one", 1),
        ("U.END", b"barrier", 2),
    ]
    assert pub.log_range() == (1, 0)
    assert broker.status()["counters"]["delivered"] == 2


def test_persistent_publish_to_retained_topic_is_delivered_live_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule("KEEP.>"))
    sub = client_factory(broker.endpoint)
    got = Collector()
    sub.subscribe("KEEP.>", got)
    pub = client_factory(broker.endpoint)
    for i in range(5):
        assert pub.publish("KEEP.X", i, confirm=True)["retained_seq"] == i + 1
    pub.publish("KEEP.END", b"", confirm=True)
    assert got.wait_topic("KEEP.END")
    time.sleep(GRACE)
    assert [m.payload for m in got.snapshot() if m.topic == "KEEP.X"] == [0, 1, 2, 3, 4]
    assert len(got.snapshot()) == 6
    assert [m.payload for m in pub.read("KEEP.X")] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        ("A..B", InvalidTopic),
        ("A.*", InvalidTopic),
        ("A.>", InvalidTopic),
        ("", InvalidTopic),
        ("$ZB.X", ReservedTopic),
        ("$ZB", ReservedTopic),
    ],
)
@pytest.mark.parametrize("mode", ["confirm", "future"])
def test_persistent_publish_bad_topic_raises_client_side(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    topic: str,
    error: type[Exception],
    mode: str,
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    with pytest.raises(error):
        if mode == "confirm":
            client.publish(topic, b"x", confirm=True)
        else:
            client.publish(topic, b"x", persistent=True)
    # nothing reached the node: the next publish is the node's first
    assert client.publish("OK.X", b"y", confirm=True)["retained_seq"] == 1
    counters = broker.status()["counters"]
    assert (counters["received"], counters["bad_input"]) == (1, 0)


def test_raw_persistent_publish_with_bad_topic_is_refused_by_the_node(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    body = {"topic": "$ZB.X", "payload": b"x", "fmt": 0, "headers": None}
    with pytest.raises(RequestError, match=r"reserved"):
        client.request(wire.PUBLISH, body)
    with pytest.raises(RequestError, match=r"A\.\.B"):
        client.request(wire.PUBLISH, {**body, "topic": "A..B"})
    with pytest.raises(RequestError):
        client.request(wire.PUBLISH, {**body, "topic": "A.B", "payload": "not bytes"})
    assert client.log_range() == (1, 0)
    counters = broker.status()["counters"]
    assert (counters["received"], counters["bad_input"]) == (0, 3)


@pytest.mark.parametrize("fmt", [True, False, 1.0], ids=["true", "false", "float"])
def test_raw_persistent_publish_with_non_int_fmt_is_refused(
    broker_factory: BrokerFactory, client_factory: ClientFactory, fmt: Any
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    body = {"topic": "F.X", "payload": b"\x05", "fmt": fmt, "headers": None}
    with pytest.raises(RequestError):
        client.request(wire.PUBLISH, body)
    assert client.log_range() == (1, 0)


# -- READ errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"pattern": "A..B"}, "A..B"),
        ({"pattern": "A.>.B"}, "A.>.B"),
        ({"pattern": 5}, "pattern"),
        ({"pattern": ">", "start": -1}, "start"),
        ({"pattern": ">", "start": "1"}, "start"),
        ({"pattern": ">", "end": 2.5}, "end"),
        ({"pattern": ">", "limit": 0}, "limit"),
        ({"pattern": ">", "limit": 100_001}, "limit"),
    ],
    ids=[
        "empty-segment",
        "inner-gt",
        "not-a-string",
        "neg-start",
        "str-start",
        "float-end",
        "zero-limit",
        "huge-limit",
    ],
)
def test_read_request_errors(
    broker_factory: BrokerFactory, client_factory: ClientFactory, body: dict[str, Any], needle: str
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    with pytest.raises(RequestError) as info:
        client.request(wire.READ, body)
    assert needle in str(info.value)
    assert broker.running
    assert client.publish("STILL.OK", b"", confirm=True)["retained_seq"] == 1


def test_client_read_validates_the_pattern_first(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    for bad in ("A..B", "A.>.B", "", "A.B*"):
        with pytest.raises(InvalidTopic):
            client.read(bad)
    with pytest.raises(RequestError, match="start"):
        client.read(">", -5)


def test_a_value_marked_msgpack_that_does_not_decode_is_refused(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """A persistent publish or a stateful value is kept for readers who decode it: one
    that does not decode made every later read, replay or fetch of its pattern fail (an
    audit). Both are refused at the node, counted as bad input, and nothing is kept."""
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    body = {"topic": "F.X", "payload": b"\xc1", "fmt": 1, "headers": None}
    with pytest.raises(RequestError, match="not_msgpack"):
        client.request(wire.PUBLISH, body)
    with pytest.raises(RequestError, match="not_msgpack"):
        client.request(wire.STATE_SET, body)
    client.publish("F.Y", {"fine": 1}, persistent=True, confirm=True)
    client.set("F.Z", {"fine": 2})
    assert [(m.topic, m.payload) for m in client.read("F.>")] == [
        ("F.Y", {"fine": 1}),
        ("F.Z", {"fine": 2}),
    ]  # (a value set is published, and retained here)
    assert [(m.topic, m.payload) for m in client.fetch("F.>")] == [("F.Z", {"fine": 2})]
    dropped = broker.status()["counters"]["dropped"]
    assert dropped.get("bad_input.not_msgpack") == 2, dropped
