"""Subscriptions with selectors on one node: an in-thread Broker, real Clients.

Exact counts: each test publishes its messages and then a barrier every subscription
accepts; one publisher's messages reach one client in order, so once the barrier arrived
at a subscription, everything it would ever get has arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import zmq

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.errors import SelectorError

WAIT = 20.0
BARRIER = {"region": "EU", "qty": 10_000, "kind": "barrier"}

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def counters(broker: Broker) -> dict[str, Any]:
    counted: dict[str, Any] = broker.status()["counters"]
    return counted


def headers_of(i: int) -> dict[str, Any]:
    return {"region": ("EU", "US", "APAC")[i % 3], "qty": i, "kind": "n"}


def finish(client: Client, topic: str, *collectors: Collector, nth: int = 1) -> None:
    """Publish a barrier; wait until each collector has its ``nth``."""
    client.publish(topic, b"end", BARRIER)
    for c in collectors:
        assert c.wait_until(
            lambda ms: sum(m.headers.get("kind") == "barrier" for m in ms) >= nth, WAIT
        )


def test_selectors_filter_and_each_subscription_gets_its_own_copies(
    broker: Broker, client_factory: ClientFactory
) -> None:
    sub = client_factory(broker.endpoint)
    plain, eu, big, eu_again, eu_other_layout = (Collector() for _ in range(5))
    sub.subscribe("ORD.>", plain)
    sub.subscribe("ORD.>", eu, selector="region = 'EU'")
    sub.subscribe("ORD.>", big, selector="qty > 100 AND region IN ('EU', 'US')")
    sub.subscribe("ORD.>", eu_again, selector="region = 'EU'")
    handle = sub.subscribe("ORD.>", eu_other_layout, selector="  region='EU'  ")
    assert handle.selector == "(region = 'EU')" and handle.pattern == "ORD.>"
    pub = client_factory(broker.endpoint)
    n = 300
    for i in range(n):
        pub.publish(f"ORD.{i % 4}", i, headers_of(i))
    pub.publish("ORD.x", b"no headers")  # every selector here is UNKNOWN on it
    finish(pub, "ORD.end", plain, eu, big, eu_again, eu_other_layout)

    def payloads(c: Collector) -> list[Any]:
        return [m.payload for m in c.snapshot() if m.headers.get("kind") == "n"]

    want_eu = [i for i in range(n) if i % 3 == 0]
    want_big = [i for i in range(n) if i > 100 and i % 3 != 2]
    assert len(plain) == n + 2
    assert payloads(eu) == payloads(eu_again) == payloads(eu_other_layout) == want_eu
    assert payloads(big) == want_big
    assert {m.pattern for m in eu.snapshot()} == {"ORD.>"}
    # each subscription got its barrier once, and nothing else
    assert len(eu) == len(want_eu) + 1 and len(big) == len(want_big) + 1
    # one canonical selector is one key at the node: its three subscriptions share frames
    assert counters(broker)["delivered"] == (n + 2) + (len(want_eu) + 1) + (len(want_big) + 1)


def test_a_bad_selector_is_refused_at_subscribe(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(SelectorError) as info:
        client.subscribe("A.>", Collector(), selector="qty > ")
    assert info.value.position == 6
    assert "expected a header name, a literal or '('" in str(info.value)
    with pytest.raises(SelectorError, match="position 6"):  # a durable's too
        client.subscribe("A.>", Collector(), selector="qty > ", durable="d1")
    assert broker.status()["durables"] == []
    # refused before anything was sent: the node saw no selector at all
    assert "bad_input.bad_selector" not in counters(broker)["dropped"]


def test_unsubscribe_one_selector_keeps_the_others(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a, b = client_factory(broker.endpoint), client_factory(broker.endpoint)
    got_a, got_b = Collector(), Collector()
    sa = a.subscribe("T.>", got_a, selector="qty >= 5")
    b.subscribe("T.>", got_b, selector="qty>=5")  # the same canonical selector, another client
    pub = client_factory(broker.endpoint)
    for i in range(10):
        pub.publish("T.x", i, {"qty": i})
    finish(pub, "T.x", got_a, got_b)
    sa.unsubscribe()
    for i in range(10):
        pub.publish("T.y", i, {"qty": i})
    finish(pub, "T.y", got_b, nth=2)
    assert [m.payload for m in got_a.snapshot()] == [5, 6, 7, 8, 9, b"end"]
    assert [m.payload for m in got_b.snapshot()] == [5, 6, 7, 8, 9, b"end"] * 2


def test_a_raw_bad_selector_key_is_counted_and_the_node_goes_on(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    ctx = zmq.Context[zmq.Socket[bytes]]()
    sock = ctx.socket(zmq.SUB)
    try:
        sock.connect(f"tcp://127.0.0.1:{broker.ports['deliver']}")
        sock.subscribe(b"A.>\x01qty >\0")
        assert wait_until(
            lambda: counters(broker)["dropped"].get("bad_input.bad_selector", 0) == 1, WAIT
        )
    finally:
        sock.close(0)
        ctx.term()
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("A.>", got, selector="qty > 1")
    client.publish("A.b", 1, {"qty": 2})
    assert got.wait_for(1, WAIT)
