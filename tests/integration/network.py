"""The harness of the network tests (``test_network*.py``): named in-thread brokers on ports
assigned up front (:class:`Net`, the ``net`` fixture), readers of their status, and how the
tests wait and count.

Waiting is done on conditions (links up, routes present in the interest table), never on
fixed sleeps. Counts are exact: every test publishes N distinct payloads followed by one
"barrier" message on the same path; messages from one publisher travel one path in order,
so once the barrier arrived every earlier copy (or duplicate) has arrived too. Counts then
include the barrier (``N + 1``). Where a test proves that nothing arrives, it first uses a
barrier to know the node *decided* (a node routes a message and delivers it locally in the
same pass), then checks the link counters, then grants a short grace period on top.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait (generous: CI machines are slow)
GRACE = 0.3  # seconds: extra time granted to a message that must *not* arrive
N = 200  # distinct payloads per publish phase


BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


class Net:
    """Named in-thread brokers on ports assigned before any of them starts."""

    def __init__(
        self, factory: BrokerFactory, free_port: Callable[[], int], tmp_path: Path
    ) -> None:
        self._factory = factory
        self._free_port = free_port
        self._tmp = tmp_path
        self.ports: dict[str, int] = {}
        self.nodes: dict[str, Broker] = {}
        self._links: dict[str, tuple[LinkConfig, ...]] = {}
        self._options: dict[str, dict[str, Any]] = {}

    def port(self, name: str) -> int:
        if name not in self.ports:
            self.ports[name] = self._free_port()
        return self.ports[name]

    def uri(self, name: str) -> str:
        return endpoint(self.port(name))

    def link(self, src: str, dst: str, name: str | None = None, **options: Any) -> LinkConfig:
        """A link ``src`` dials to ``dst`` (named ``srcdst`` in lower case by default)."""
        return LinkConfig(
            name=name or f"{src}{dst}".lower(), uri=self.uri(dst), **{**FAST_LINK, **options}
        )

    def start(self, name: str, *links: LinkConfig, **options: Any) -> Broker:
        """Start node ``name`` (its data directory survives a stop: see :meth:`restart`)."""
        self._links[name] = links
        self._options[name] = options
        broker = self._factory(
            broker_id=name,
            port=self.port(name),
            data_dir=self._tmp / f"data-{name}",
            links=links,
            **options,
        )
        self.nodes[name] = broker
        return broker

    def restart(self, name: str) -> Broker:
        """Stop node ``name`` (if running) and start it again: same ports, same data dir."""
        self.nodes[name].stop()
        return self.start(name, *self._links[name], **self._options[name])

    def __getitem__(self, name: str) -> Broker:
        return self.nodes[name]


@pytest.fixture
def net(broker_factory: BrokerFactory, free_port: Callable[[], int], tmp_path: Path) -> Net:
    return Net(broker_factory, free_port, tmp_path)


# -- status helpers -------------------------------------------------------------------------------


def links_of(broker: Broker) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = broker.status()["links"]
    return result


def link_named(broker: Broker, name: str, peer: str | None = None) -> dict[str, Any]:
    found = [
        ln for ln in links_of(broker) if ln["name"] == name and (peer is None or ln["peer"] == peer)
    ]
    assert len(found) == 1, (name, peer, links_of(broker))
    return found[0]


def up_links(broker: Broker) -> set[tuple[str, str]]:
    """(name, peer) of every link that is up."""
    return {(ln["name"], ln["peer"]) for ln in links_of(broker) if ln["state"] == "up"}


def counters(broker: Broker) -> dict[str, Any]:
    result: dict[str, Any] = broker.status()["counters"]
    return result


def routes(broker: Broker) -> list[dict[str, Any]]:
    """The node's interest table (best entry per pattern and origin)."""
    result: list[dict[str, Any]] = broker.call(lambda node: node.engine.interest())
    return result


def route_keys(broker: Broker) -> set[tuple[str, str]]:
    return {(r["pattern"], r["origin"]) for r in routes(broker)}


def route(broker: Broker, pattern: str, origin: str) -> dict[str, Any] | None:
    for r in routes(broker):
        if r["pattern"] == pattern and r["origin"] == origin:
            return r
    return None


def has_route(
    broker: Broker, pattern: str, origin: str, *, hops: int | None = None, via: str | None = None
) -> bool:
    r = route(broker, pattern, origin)
    return (
        r is not None and (hops is None or r["hops"] == hops) and (via is None or r["link"] == via)
    )


def entries(broker: Broker) -> int:
    """Interest entries held: every link's, not only the best (plus local patterns)."""
    value: int = broker.status()["interest"]["entries"]
    return value


def msgs(broker: Broker, direction: str) -> int:
    """Messages over all of the node's links, ``direction`` = msgs_in or msgs_out."""
    return sum(int(ln[direction]) for ln in links_of(broker))


def wait_links(
    wait_until: WaitUntil, expected: dict[Broker, set[tuple[str, str]]], timeout: float = WAIT
) -> None:
    """Wait until each broker's set of up links (name, peer) is exactly as given."""
    ok = wait_until(lambda: all(up_links(b) == want for b, want in expected.items()), timeout)
    assert ok, {b.broker_id: links_of(b) for b in expected}


def pump(
    publisher: Client,
    topic: str,
    n: int,
    *collectors: Collector,
    end: str | None = None,
    start: int = 0,
) -> None:
    """Publish payloads ``start .. start+n-1`` on ``topic``, then one barrier message on
    ``end`` (default ``topic + '.END'``), and wait until every collector has the barrier."""
    end_topic = end or f"{topic}.END"
    for i in range(start, start + n):
        publisher.publish(topic, i)
    publisher.publish(end_topic, "end")
    for c in collectors:
        assert c.wait_topic(end_topic), f"barrier {end_topic} missing; got {c.topics()}"


def assert_exact(got: Collector, topic: str, payloads: Iterable[int], end: str) -> None:
    """Exactly these payloads on ``topic``, in order, no duplicates, and one barrier."""
    want = list(payloads)
    assert got.payloads(topic) == want
    assert got.topics() == {topic: len(want), end: 1}
    ids = [m.id for m in got.messages]
    assert len(set(ids)) == len(ids), "a message was delivered twice"
