"""A node told to stop drains as a lame duck (zbroker/node/drain.py): its clients hear
LEAVING and move to another node at once, not after their heartbeat timeout, and what a
publisher sent on its way out is taken and forwarded, none lost and none twice.

The clients' heartbeat timeout is 60 s here, so a move within the test's wait can only
be LEAVING's doing. In-thread nodes A and B, B dialing A."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig
from zbroker.node.drain import Drain
from zbroker.node.feature import Feature

WAIT = 20.0
SLOW_HEARTBEAT = {"heartbeat_interval": 0.5, "heartbeat_timeout": 60.0}
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


def pair(broker_factory: BrokerFactory) -> tuple[Broker, Broker]:
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(LinkConfig(name="a", uri=a.endpoint, **FAST_LINK),))
    deadline = time.monotonic() + WAIT
    while not b.status()["links"] or b.status()["links"][0]["state"] != "up":
        assert time.monotonic() < deadline, b.status()["links"]
        time.sleep(0.05)
    return a, b


def client_on(node_id: str, endpoints: str, client_factory: ClientFactory) -> Client:
    """A client of the list ``endpoints`` whose primary is ``node_id`` (it picks at random)."""
    for _ in range(50):
        c = client_factory(endpoints, **SLOW_HEARTBEAT)
        if c.status()["broker_id"] == node_id:
            return c
        c.close()
    raise AssertionError(f"no client landed on {node_id}")


def test_a_publisher_moves_at_once_and_loses_nothing(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    a, b = pair(broker_factory)
    got = Collector()
    client_factory(b.endpoint).subscribe("GO.>", got)
    pub = client_on("A", f"{a.endpoint},{b.endpoint}", client_factory)
    time.sleep(0.5)  # (B's interest has reached A)
    n = 20_000
    stopper = threading.Thread(target=a.stop)
    for i in range(n):  # a stream (paced a little), with A stopped in the middle of it
        if i == n // 4:
            stopper.start()
        if i % 10 == 0:
            time.sleep(0.0002)
        pub.publish("GO.x", str(i).encode())
    stopper.join()
    assert got.wait_for(n, WAIT), len(got.messages)
    time.sleep(0.3)
    seqs = [int(m.payload) for m in got.messages]
    assert sorted(seqs) == list(range(n))  # every one, once
    origins = [m.id.origin for m in got.messages]
    k = origins.count("A")
    assert 0 < k < n and origins == ["A"] * k + ["B"] * (n - k), "A's, then B's"
    assert pub.status()["broker_id"] == "B"


def test_a_subscriber_moves_at_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    a, b = pair(broker_factory)
    got = Collector()
    sub = client_on("A", f"{a.endpoint},{b.endpoint}", client_factory)
    sub.subscribe("MOVE.>", got)
    publisher = client_factory(b.endpoint)
    time.sleep(0.5)
    publisher.publish("MOVE.x", b"before")
    assert got.wait_for(1, WAIT)
    t0 = time.monotonic()
    a.stop()
    deadline = t0 + WAIT
    while sub.status()["broker_id"] != "B":  # (status goes to the primary)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert time.monotonic() - t0 < SLOW_HEARTBEAT["heartbeat_timeout"]
    publisher.publish("MOVE.x", b"after")
    assert got.wait_for(2, WAIT)
    assert got.payloads() == [b"before", b"after"]


class _Teller(Feature):
    name = "teller"

    def __init__(self, tells: bool) -> None:
        self.tells, self.asked = tells, 0

    def draining(self, now: float) -> bool:
        self.asked += 1
        return self.tells


def test_the_drain_waits_only_when_someone_was_told() -> None:
    quiet, teller = _Teller(False), _Teller(True)
    assert Drain().begin([quiet], 0.0) is False  # nobody told: stop at once
    drain = Drain()
    assert drain.begin([teller, quiet], 10.0) is True
    assert (teller.asked, quiet.asked) == (1, 2)  # every feature asked, not the first only
    assert drain.begin([teller], 10.01) is True and teller.asked == 1  # (a second STOP)
    client_sock: Any = object()
    other: Any = object()
    assert drain.go_on([(client_sock, 1)], client_sock, 10.04) is True
    assert drain.go_on([(other, 1)], client_sock, 10.08) is True  # quiet since 10.04
    assert drain.go_on([], client_sock, 10.10) is False  # 0.06 s of quiet
    busy = Drain()
    busy.begin([teller], 0.0)
    now = 0.0
    while busy.go_on([(client_sock, 1)], client_sock, now):  # never quiet: DRAIN_MAX
        now += 0.01
    assert 0.99 <= now <= 1.01
