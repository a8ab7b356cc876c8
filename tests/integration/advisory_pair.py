"""What the advisory tests (``test_advisories*.py``) share: two linked nodes A and B with a
client of B subscribed to A's advisories (:class:`Pair`, the ``pair`` fixture), readers of
what arrived by kind and pattern, and the fields every advisory carries.

Counts are exact. Advisories of one node travel one path in order, so a *barrier* (a
subscription to a fresh pattern on A, whose INTEREST_ADDED comes after everything A
advised before it) tells a test that every earlier advisory has arrived.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
import zmq

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client, wire
from zbroker.config import LinkConfig

HOST = "127.0.0.1"
WAIT = 20.0
GRACE = 0.3


BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]

_barriers = itertools.count(1)


def heard(broker: Broker, topic: str) -> bool:
    """Does anyone (here or through a link) subscribe to ``topic`` at ``broker``?"""
    return bool(broker.call(lambda node: any(node.engine.route(topic, (), None))))


def link_up(broker: Broker, name: str) -> bool:
    return any(ln["name"] == name and ln["state"] == "up" for ln in broker.status()["links"])


def kinds(c: Collector) -> list[str]:
    return [m.payload["kind"] for m in c.snapshot()]


def of_kind(c: Collector, kind: str) -> list[dict[str, Any]]:
    return [m.payload for m in c.snapshot() if m.payload["kind"] == kind]


def of_pattern(c: Collector, pattern: str) -> list[dict[str, Any]]:
    """Interest advisories of ``pattern``."""
    return [
        m.payload
        for m in c.snapshot()
        if m.payload["kind"].startswith("INTEREST_") and m.payload["pattern"] == pattern
    ]


class Pair:
    """Node A (watched) linked to node B (the watcher's node); ``watch`` follows A's
    advisories from a client of B."""

    def __init__(
        self,
        factory: BrokerFactory,
        clients: ClientFactory,
        wait_until: WaitUntil,
        **a_options: Any,
    ) -> None:
        self.b = factory(broker_id="b")
        link = LinkConfig(name="ab", uri=self.b.endpoint, **FAST_LINK)
        self.a = factory(broker_id="a", links=(link,), **a_options)
        self.wait_until = wait_until
        assert wait_until(lambda: link_up(self.a, "ab"), WAIT)
        self.ca = clients(self.a.endpoint)
        self.cb = clients(self.b.endpoint)
        self.seen = Collector()
        self.cb.subscribe("$ZB.ADVISORY.a.>", self.seen)
        assert wait_until(lambda: heard(self.a, "$ZB.ADVISORY.a.LINK_UP"), WAIT)

    def barrier(self) -> None:
        """Every advisory A published before now has reached the watcher."""
        pattern = f"BARRIER.{next(_barriers)}"
        self.ca.subscribe(pattern, lambda m: None)
        assert self.seen.wait_until(
            lambda ms: any(m.payload.get("pattern") == pattern for m in ms), WAIT
        ), kinds(self.seen)


@pytest.fixture
def pair(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> Callable[..., Pair]:
    def make(**a_options: Any) -> Pair:
        return Pair(broker_factory, client_factory, wait_until, **a_options)

    return make


def _common(p: dict[str, Any], kind: str) -> None:
    assert p["kind"] == kind and p["broker"] == "a"
    assert type(p["seq"]) is int and p["seq"] >= 1
    assert isinstance(p["time"], float) and abs(p["time"] - time.time()) < 60
    assert p["suppressed"] == 0


def deliver(client: Client, patterns: list[str], topic: str, n: int) -> None:
    """``n`` messages on ``topic`` delivered by ``client``'s node to a subscription of each
    of ``patterns``: a GAPS report counts at most what its node sent on a pattern."""
    got = [Collector() for _ in patterns]
    for pattern, c in zip(patterns, got, strict=True):
        client.subscribe(pattern, c)
    for i in range(n):
        client.publish(topic, i)
    assert all(c.wait_for(n) for c in got)


def report_gaps(endpoint: str, gaps: dict[str, int]) -> None:
    """A subscriber's GAPS report, as the client library sends it when it sees missed
    deliveries in a pattern's sequence (sent from a raw DEALER: the count is exact)."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    try:
        sock.connect(endpoint)
        sock.send(wire.encode_control(wire.GAPS, 0, gaps))
    finally:
        sock.close()
