"""Integration tests of a network of brokers: nodes linked over real ZeroMQ sockets.

Most tests run every node as an in-thread :class:`~zbroker.Broker` on 127.0.0.1. Ports are
assigned up front (``free_port``), so a link may name a node that starts later: rings and
meshes need no start order, and a dialer simply redials until its peer is there. Tests
marked ``slow`` run real ``zbroker start`` processes, stopped by PID through ``procs``.

Waiting is done on conditions (links up, routes present in the interest table), never on
fixed sleeps. Counts are exact: every test publishes N distinct payloads followed by one
"barrier" message on the same path; messages from one publisher travel one path in order,
so once the barrier arrived every earlier copy (or duplicate) has arrived too. Counts then
include the barrier (``N + 1``). Where a test proves that nothing arrives, it first uses a
barrier to know the node *decided* (a node routes a message and delivers it locally in the
same pass), then checks the link counters, then grants a short grace period on top.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from zbroker.cli.format import format_status

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.config import LinkConfig
from zbroker.process import (
    DEFAULT_GC_YOUNG_THRESHOLD,
    DEFAULT_MMAP_THRESHOLD,
    DEFAULT_TRIM_THRESHOLD,
)

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait (generous: CI machines are slow)
GRACE = 0.3  # seconds: extra time granted to a message that must *not* arrive
N = 200  # distinct payloads per publish phase

#: short heartbeats and redials, for tests where liveness matters
FAST: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "reconnect_initial_delay": 0.1,
    "reconnect_max_delay": 0.5,
}

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
            name=name or f"{src}{dst}".lower(), uri=self.uri(dst), **{**FAST, **options}
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


# -- 1. chain -------------------------------------------------------------------------------------


def test_chain_multi_hop_delivers_exactly_once(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B"))
    b = net.start("B", net.link("B", "C"))
    c = net.start("C")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})

    got = Collector()
    client_factory(c.endpoint).subscribe("CHAIN.>", got)
    assert wait_until(lambda: has_route(a, "CHAIN.>", "C", hops=2, via="ab"), WAIT), routes(a)
    assert route(a, "CHAIN.>", "C") == {
        "pattern": "CHAIN.>",
        "origin": "C",
        "path": ["C", "B"],
        "hops": 2,
        "link": "ab",
    }
    assert route(b, "CHAIN.>", "C") == {
        "pattern": "CHAIN.>",
        "origin": "C",
        "path": ["C"],
        "hops": 1,
        "link": "bc",
    }

    pump(client_factory(a.endpoint), "CHAIN.X", N, got, end="CHAIN.END")
    assert_exact(got, "CHAIN.X", range(N), "CHAIN.END")
    assert all(m.id.origin == "A" for m in got.messages)
    total = N + 1
    assert link_named(a, "ab")["msgs_out"] == total
    assert link_named(b, "ab")["msgs_in"] == total
    assert link_named(b, "bc")["msgs_out"] == total
    assert link_named(c, "bc")["msgs_in"] == total
    # nothing went back the other way
    assert link_named(a, "ab")["msgs_in"] == 0
    assert link_named(b, "ab")["msgs_out"] == 0
    assert link_named(b, "bc")["msgs_in"] == 0
    ca, cb, cc = counters(a), counters(b), counters(c)
    assert ca["received"] == total and ca["forwarded"] == total and ca["delivered"] == 0
    assert cb["received"] == 0 and cb["forwarded"] == total and cb["delivered"] == 0
    assert cc["received"] == 0 and cc["forwarded"] == 0 and cc["delivered"] == total
    for counts in (ca, cb, cc):
        assert counts["duplicates"] == 0
        assert counts["dropped"] == {}
        assert counts["bad_input"] == 0


# -- 2. ring --------------------------------------------------------------------------------------


def test_ring_shortest_paths_no_loop_no_duplicates(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B"))
    b = net.start("B", net.link("B", "C"))
    c = net.start("C", net.link("C", "A"))
    wait_links(
        wait_until,
        {
            a: {("ab", "B"), ("ca", "C")},
            b: {("ab", "A"), ("bc", "C")},
            c: {("bc", "B"), ("ca", "A")},
        },
    )
    got_b, got_c = Collector(), Collector()
    client_factory(b.endpoint).subscribe("RING.>", got_b)
    client_factory(c.endpoint).subscribe("RING.>", got_c)
    # A reaches both directly (one hop), never around the ring
    assert wait_until(
        lambda: (
            has_route(a, "RING.>", "B", hops=1, via="ab")
            and has_route(a, "RING.>", "C", hops=1, via="C/ca")
        ),
        WAIT,
    ), routes(a)

    pump(client_factory(a.endpoint), "RING.X", N, got_b, got_c, end="RING.END")
    assert_exact(got_b, "RING.X", range(N), "RING.END")
    assert_exact(got_c, "RING.X", range(N), "RING.END")
    total = N + 1
    assert link_named(a, "ab")["msgs_out"] == total
    assert link_named(a, "ca")["msgs_out"] == total
    # B and C forward nothing to each other: each copy carried only its own target
    assert link_named(b, "bc")["msgs_out"] == 0
    assert link_named(c, "bc")["msgs_in"] == 0
    assert link_named(c, "bc")["msgs_out"] == 0
    nodes = (a, b, c)
    assert sum(msgs(n, "msgs_out") for n in nodes) == 2 * total
    assert sum(msgs(n, "msgs_in") for n in nodes) == 2 * total
    for n in nodes:
        cn = counters(n)
        assert cn["duplicates"] == 0, (n.broker_id, cn)
        assert cn["dropped"] == {}, (n.broker_id, cn)
    assert counters(b)["delivered"] == total
    assert counters(c)["delivered"] == total


# -- 3. mesh with equal-cost paths ----------------------------------------------------------------


def test_mesh_equal_cost_paths_use_one_path(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B"), net.link("A", "C"))
    b = net.start("B", net.link("B", "D"))
    c = net.start("C", net.link("C", "D"))
    d = net.start("D")
    wait_links(
        wait_until,
        {
            a: {("ab", "B"), ("ac", "C")},
            b: {("ab", "A"), ("bd", "D")},
            c: {("ac", "A"), ("cd", "D")},
            d: {("bd", "B"), ("cd", "C")},
        },
    )
    got = Collector()
    client_factory(d.endpoint).subscribe("MESH.>", got)
    # A has heard both equal-cost paths; the tie goes to the lower neighbour ID (B)
    assert wait_until(
        lambda: entries(a) == 2 and has_route(a, "MESH.>", "D", hops=2, via="ab"), WAIT
    ), routes(a)

    pump(client_factory(a.endpoint), "MESH.X", N, got, end="MESH.END")
    assert_exact(got, "MESH.X", range(N), "MESH.END")
    total = N + 1
    assert msgs(a, "msgs_out") == total  # exactly one copy leaves A...
    assert link_named(a, "ab")["msgs_out"] == total  # ...all of them on one path
    assert link_named(a, "ac")["msgs_out"] == 0
    assert link_named(c, "cd")["msgs_out"] == 0
    assert msgs(d, "msgs_in") == total
    assert counters(d)["duplicates"] == 0
    assert counters(d)["delivered"] == total


# -- 4. ttl ---------------------------------------------------------------------------------------


def test_ttl_one_stops_at_the_first_hop(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B", ttl=1))
    b = net.start("B", net.link("B", "C", ttl=1))
    c = net.start("C")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    assert link_named(a, "ab")["ttl"] == 1
    assert link_named(b, "ab")["ttl"] == 1  # the ttl travelled in the handshake

    got_c, got_b = Collector(), Collector()
    client_factory(c.endpoint).subscribe("TTL.>", got_c)
    assert wait_until(lambda: has_route(b, "TTL.>", "C", hops=1), WAIT), routes(b)
    client_factory(b.endpoint).subscribe("TTL.>", got_b)
    assert wait_until(lambda: has_route(a, "TTL.>", "B", hops=1), WAIT), routes(a)
    # C's interest is two hops from A: past the ttl, so never advertised to A
    assert ("TTL.>", "C") not in route_keys(a)

    pump(client_factory(a.endpoint), "TTL.X", N, got_b, end="TTL.END")
    assert_exact(got_b, "TTL.X", range(N), "TTL.END")
    # B routed and delivered every message in one pass: it decided not to forward any
    assert link_named(b, "bc")["msgs_out"] == 0
    time.sleep(GRACE)
    assert len(got_c) == 0
    assert link_named(c, "bc")["msgs_in"] == 0
    assert counters(c)["delivered"] == 0


# -- 5. one-way link ------------------------------------------------------------------------------


def test_one_way_link_carries_messages_dialer_to_acceptor_only(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B", duplex=False))
    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    assert link_named(a, "ab")["direction"] == "out"
    assert link_named(b, "ab")["direction"] == "in"

    # A -> B works
    got_b = Collector()
    client_factory(b.endpoint).subscribe("OW.>", got_b)
    assert wait_until(lambda: has_route(a, "OW.>", "B", hops=1, via="ab"), WAIT), routes(a)
    pump(client_factory(a.endpoint), "OW.X", N, got_b, end="OW.END")
    assert_exact(got_b, "OW.X", range(N), "OW.END")
    assert link_named(a, "ab")["msgs_out"] == N + 1
    assert link_named(b, "ab")["msgs_in"] == N + 1

    # B -> A does not: A never advertises over a link its peer cannot send on
    got_a, local_b = Collector(), Collector()
    client_factory(a.endpoint).subscribe("BACK.>", got_a)
    client_factory(b.endpoint).subscribe("BACK.>", local_b)  # B's own subscriber: a barrier
    assert ("BACK.>", "A") in route_keys(a)
    assert ("BACK.>", "A") not in route_keys(b)
    pump(client_factory(b.endpoint), "BACK.X", N, local_b, end="BACK.END")
    assert local_b.payloads("BACK.X") == list(range(N))
    assert link_named(b, "ab")["msgs_out"] == 0
    time.sleep(GRACE)
    assert len(got_a) == 0
    assert link_named(a, "ab")["msgs_in"] == 0
    assert ("BACK.>", "A") not in route_keys(b)
    for n in (a, b):
        assert "wrong_direction" not in counters(n)["dropped"]


# -- 6. include / exclude filters -----------------------------------------------------------------


def test_include_exclude_filters_decide_what_crosses(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start(
        "A",
        net.link("A", "B", include=("PRICE.STOCK.>",), exclude=("PRICE.STOCK.NYSE.*",)),
    )
    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    sub = client_factory(b.endpoint)
    # interest no topic of which could cross is not even advertised
    sub.subscribe("PRICE.STOCK.NYSE.*", Collector())
    sub.subscribe("PRICE.BOND.>", Collector())
    got = Collector()
    sub.subscribe("PRICE.>", got)
    # adverts over one link arrive in order: PRICE.> came last
    assert wait_until(lambda: has_route(a, "PRICE.>", "B", via="ab"), WAIT), routes(a)
    assert route_keys(a) == {("PRICE.>", "B")}

    topics = {
        "PRICE.STOCK.IBM": True,
        "PRICE.STOCK.NASDAQ.AAPL": True,
        "PRICE.STOCK.NYSE.IBM": False,  # excluded
        "PRICE.STOCK.NYSE.IBM.X": True,  # NYSE.* is one segment: not excluded
        "PRICE.STOCK": False,  # PRICE.STOCK.> needs one more segment
        "PRICE.BOND.US": False,  # not included
        "PRICE.BONDS": False,
        "OTHER.STOCK.IBM": False,  # nobody wants it
    }
    publisher = client_factory(a.endpoint)
    reps = 5
    for i in range(reps):
        for topic in topics:
            publisher.publish(topic, i)
    publisher.publish("PRICE.STOCK.END", "end")
    assert got.wait_topic("PRICE.STOCK.END")
    want = {t: reps for t, crosses in topics.items() if crosses}
    assert got.topics() == {**want, "PRICE.STOCK.END": 1}
    for topic in want:
        assert got.payloads(topic) == list(range(reps))
    crossed = sum(want.values()) + 1
    assert link_named(a, "ab")["msgs_out"] == crossed
    assert link_named(b, "ab")["msgs_in"] == crossed
    assert counters(a)["received"] == reps * len(topics) + 1


# -- 7. static propagation ------------------------------------------------------------------------


def test_static_patterns_cross_without_interest(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B", static=("ALERT.>",)))
    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    assert routes(a) == [] and routes(b) == []
    publisher = client_factory(a.endpoint)
    for i in range(5):
        publisher.publish("OTHER.X", i)  # not static, no interest: stays on A
    for i in range(N):
        publisher.publish("ALERT.FIRE", i)
    publisher.publish("ALERT.END", "end")
    total = N + 1
    # in order on one link: once the last one is in, everything before it is too
    assert wait_until(lambda: link_named(b, "ab")["msgs_in"] >= total, WAIT), links_of(b)
    assert link_named(b, "ab")["msgs_in"] == total
    assert link_named(a, "ab")["msgs_out"] == total
    assert counters(b)["delivered"] == 0

    # a subscriber on B now receives; static + interest still make one copy per message
    got = Collector()
    client_factory(b.endpoint).subscribe("ALERT.>", got)
    assert wait_until(lambda: has_route(a, "ALERT.>", "B", via="ab"), WAIT), routes(a)
    pump(publisher, "ALERT.FIRE", N, got, end="ALERT.END", start=N)
    assert_exact(got, "ALERT.FIRE", range(N, 2 * N), "ALERT.END")
    assert link_named(b, "ab")["msgs_in"] == 2 * total
    assert counters(b)["duplicates"] == 0


# -- 8. conduit -----------------------------------------------------------------------------------


@pytest.mark.parametrize("conduit", [True, False], ids=["conduit-on", "conduit-off"])
def test_conduit_one_copy_per_message_or_per_subscription(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil, conduit: bool
) -> None:
    a = net.start("A", net.link("A", "B", conduit=conduit))
    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    sub = client_factory(b.endpoint)
    patterns = ("CD.>", "CD.*", "CD.X")
    got = {p: Collector() for p in patterns}
    for p in patterns:
        sub.subscribe(p, got[p])
    assert wait_until(lambda: route_keys(a) == {(p, "B") for p in patterns}, WAIT), routes(a)

    publisher = client_factory(a.endpoint)
    for i in range(N):
        publisher.publish("CD.X", i)
    publisher.publish("CD.X", "end")  # the barrier: matches all three patterns too
    total = N + 1
    for p in patterns:
        assert got[p].wait_for(total), (p, len(got[p]))
        assert got[p].payloads("CD.X") == [*range(N), "end"]
        assert {m.pattern for m in got[p].messages} == {p}
    copies = 1 if conduit else len(patterns)
    assert link_named(a, "ab")["msgs_out"] == copies * total
    assert link_named(b, "ab")["msgs_in"] == copies * total
    cb = counters(b)
    assert cb["duplicates"] == (copies - 1) * total
    assert cb["delivered"] == len(patterns) * total  # subscribers see the same either way
    for p in patterns:
        assert len(got[p]) == total


# -- 9. subscriber leaving ------------------------------------------------------------------------


def test_interest_is_withdrawn_everywhere_when_subscribers_leave(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B"))
    b = net.start("B", net.link("B", "C"))
    c = net.start("C")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    first = client_factory(c.endpoint)
    second = client_factory(b.endpoint)
    sub_x = first.subscribe("LEAVE.X", Collector())
    first.subscribe("LEAVE.>", Collector())
    second.subscribe("LEAVE.*", Collector())
    want_a = {("LEAVE.X", "C"), ("LEAVE.>", "C"), ("LEAVE.*", "B")}
    assert wait_until(lambda: route_keys(a) == want_a, WAIT), routes(a)
    assert wait_until(lambda: route_keys(c) == want_a, WAIT), routes(c)

    sub_x.unsubscribe()
    want_a.discard(("LEAVE.X", "C"))
    for n in (a, b, c):
        assert wait_until(lambda n=n: route_keys(n) == want_a, WAIT), (n.broker_id, routes(n))

    first.close()
    want_a.discard(("LEAVE.>", "C"))
    for n in (a, b, c):
        assert wait_until(lambda n=n: route_keys(n) == want_a, WAIT), (n.broker_id, routes(n))

    second.close()
    for n in (a, b, c):
        assert wait_until(lambda n=n: routes(n) == [], WAIT), (n.broker_id, routes(n))
        st = n.status()
        assert st["interest"]["routes"] == 0
        assert st["interest"]["entries"] == 0
        assert st["subscriptions"]["count"] == 0


# -- 10. middle node restart ----------------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True], ids=["stop", "crash"])
def test_middle_node_restart_rebuilds_links_and_interest(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil, crash: bool
) -> None:
    # crash: B vanishes without a goodbye, and its neighbours' heartbeat timeout is a
    # minute: they must learn of the new incarnation from the new B itself
    hb: dict[str, Any] = {"heartbeat_timeout": 60.0} if crash else {}
    a = net.start("A", net.link("A", "B", **hb))
    b = net.start("B", net.link("B", "C", **hb))
    c = net.start("C")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    got = Collector()
    client_factory(c.endpoint).subscribe("MID.>", got)
    assert wait_until(lambda: has_route(a, "MID.>", "C", hops=2), WAIT), routes(a)
    publisher = client_factory(a.endpoint)
    pump(publisher, "MID.X", N, got, end="MID.END")
    assert_exact(got, "MID.X", range(N), "MID.END")
    old_incarnation = b.incarnation

    if crash:
        b.call(lambda node: setattr(node.links, "goodbye", lambda now: None))
        b.stop()
        # nobody noticed: the neighbours still hold the links and the routes through them
        assert up_links(a) == {("ab", "B")} and up_links(c) == {("bc", "B")}
    else:
        b.stop()
        # B said goodbye: both neighbours drop the link and every route through it
        assert wait_until(lambda: up_links(a) == set() and up_links(c) == set(), WAIT)
        assert wait_until(lambda: routes(a) == [], WAIT), routes(a)
        assert [(r["pattern"], r["origin"]) for r in routes(c)] == [("MID.>", "C")]

    b = net.restart("B")
    assert b.broker_id == "B"
    assert b.incarnation > old_incarnation
    # both neighbours' links are to the new incarnation (up a second time)
    assert wait_until(
        lambda: counters(a)["links_up"] == 2 and counters(c)["links_up"] == 2, WAIT
    ), (links_of(a), links_of(c))
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    assert a.call(lambda node: node.links.dialers["ab"].peer_incarnation) == b.incarnation
    assert len(links_of(c)) == 1  # the old incarnation's accepted link is gone
    assert wait_until(lambda: has_route(a, "MID.>", "C", hops=2, via="ab"), WAIT), routes(a)
    # no stale routes anywhere
    assert routes(a) == [
        {"pattern": "MID.>", "origin": "C", "path": ["C", "B"], "hops": 2, "link": "ab"}
    ]
    assert routes(b) == [
        {"pattern": "MID.>", "origin": "C", "path": ["C"], "hops": 1, "link": "bc"}
    ]
    assert [(r["pattern"], r["origin"]) for r in routes(c)] == [("MID.>", "C")]

    got.clear()
    pump(publisher, "MID.X", N, got, end="MID.END", start=N)
    assert_exact(got, "MID.X", range(N, 2 * N), "MID.END")
    assert link_named(b, "ab")["msgs_in"] == N + 1
    assert link_named(b, "bc")["msgs_out"] == N + 1
    assert counters(b)["forwarded"] == N + 1
    assert counters(c)["duplicates"] == 0


# -- 11. shortest-path failover -------------------------------------------------------------------


def test_failover_to_the_other_side_of_a_square(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    # A - B - C - D - A; the subscriber on C is two hops away both ways round
    a = net.start("A", net.link("A", "B"))
    b = net.start("B", net.link("B", "C"))
    c = net.start("C", net.link("C", "D"))
    d = net.start("D", net.link("D", "A"))
    wait_links(
        wait_until,
        {
            a: {("ab", "B"), ("da", "D")},
            b: {("ab", "A"), ("bc", "C")},
            c: {("bc", "B"), ("cd", "D")},
            d: {("cd", "C"), ("da", "A")},
        },
    )
    got = Collector()
    client_factory(c.endpoint).subscribe("SQ.>", got)
    assert wait_until(
        lambda: entries(a) == 2 and has_route(a, "SQ.>", "C", hops=2, via="ab"), WAIT
    ), routes(a)
    publisher = client_factory(a.endpoint)
    pump(publisher, "SQ.X", N, got, end="SQ.END")
    assert_exact(got, "SQ.X", range(N), "SQ.END")
    assert link_named(a, "ab")["msgs_out"] == N + 1
    assert link_named(a, "da")["msgs_out"] == 0

    b.stop()
    # no operator action: A's next-best path (through D) takes over
    assert wait_until(lambda: has_route(a, "SQ.>", "C", hops=2, via="D/da"), WAIT), routes(a)
    assert route(a, "SQ.>", "C") == {
        "pattern": "SQ.>",
        "origin": "C",
        "path": ["C", "D"],
        "hops": 2,
        "link": "D/da",
    }
    got.clear()
    pump(publisher, "SQ.X", N, got, end="SQ.END", start=N)
    assert_exact(got, "SQ.X", range(N, 2 * N), "SQ.END")
    assert link_named(a, "da")["msgs_out"] == N + 1
    assert link_named(d, "cd")["msgs_out"] == N + 1
    assert counters(c)["duplicates"] == 0
    assert counters(c)["delivered"] == 2 * (N + 1)


# -- 12. handshake refusals -----------------------------------------------------------------------


def test_link_to_self_is_refused_and_counted(
    net: Net, caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A", net.link("A", "A", name="self"))
    assert wait_until(lambda: link_named(a, "self")["state"] == "refused", WAIT), links_of(a)
    ln = link_named(a, "self")
    assert "self" in (ln["last_error"] or "")
    # one handshake, both of whose halves are this node: its acceptor refused, its dialer
    # was refused
    assert wait_until(lambda: counters(a)["handshakes_refused"] == 2, WAIT), counters(a)
    # not retried: the count stays put (redials would come every 0.1-0.5 s)
    time.sleep(4 * FAST["reconnect_initial_delay"] + GRACE)
    assert counters(a)["handshakes_refused"] == 2
    assert link_named(a, "self")["state"] == "refused"
    assert counters(a)["links_up"] == 0
    assert len(links_of(a)) == 1  # no accepted half either
    assert any("refused link to self (A)" in r.getMessage() for r in caplog.records), caplog.text


def test_another_node_under_our_broker_id_is_named_as_such_and_retried(
    net: Net,
    broker_factory: BrokerFactory,
    caplog: pytest.LogCaptureFixture,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """Two nodes configured with one broker ID (a copied config or data directory) would
    break the loop rules, which go by broker ID: the handshake is refused, and both sides
    say that another node uses the ID (not "link to self", which it is not). The dialer
    keeps retrying: the operator will rename one of them."""
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A")
    twin = broker_factory(
        broker_id="A",
        port=net.port("A2"),
        data_dir=tmp_path / "data-twin",
        links=(net.link("A2", "A", name="twin"),),
    )
    assert wait_until(lambda: counters(twin)["handshakes_refused"] >= 2, WAIT), links_of(twin)
    ln = link_named(twin, "twin")
    assert ln["state"] in ("waiting", "handshaking")  # retried, not given up
    assert "another node uses our broker ID 'A'" in (ln["last_error"] or ""), ln
    assert counters(a)["handshakes_refused"] >= 2
    assert counters(a)["links_up"] == 0 and counters(twin)["links_up"] == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "zbroker.node"]
    assert not any("to self" in m for m in messages), messages
    assert any("another node uses our broker ID 'A'" in m for m in messages), messages


def test_peer_in_another_group_is_refused_and_logged(
    net: Net, caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A", net.link("A", "B"), group="east")
    b = net.start("B", group="west")
    assert wait_until(lambda: counters(b)["handshakes_refused"] >= 1, WAIT), counters(b)

    def refused() -> bool:
        return "west" in (link_named(a, "ab")["last_error"] or "")

    assert wait_until(refused, WAIT), links_of(a)
    assert links_of(b) == []
    assert link_named(a, "ab")["state"] != "up"
    assert counters(a)["links_up"] == 0 and counters(b)["links_up"] == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "zbroker.node"]
    # logged by both sides: the acceptor that refused and the dialer that was refused
    assert sum("'east'" in m and "'west'" in m for m in messages) >= 2, messages


def test_a_peer_that_never_answers_is_said_in_the_log_and_in_status(
    net: Net, caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    """Nothing listens at the link's address: the node says so at once (a warning naming
    the address), then only at attempts 2, 4, 8... (an outage does not flood the log), and
    `zbroker status` shows why the link is not up. When the peer comes, the link comes up
    and the error is gone."""
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A", net.link("A", "B"))  # B's port is reserved; B is not started yet

    def warned() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "zbroker.node" and "no answer from" in r.getMessage()
        ]

    assert wait_until(lambda: link_named(a, "ab")["attempts"] >= 3, WAIT), links_of(a)
    assert wait_until(lambda: link_named(a, "ab")["state"] == "waiting", WAIT), links_of(a)
    logged = warned()
    assert logged[:2] == [
        f"link ab: no answer from {net.uri('B')} to the handshake (attempt {n}; nothing "
        f"listening there, or not a zbroker node); next attempt in {d:.1f} s"
        for n, d in ((1, 0.1), (2, 0.2))
    ], logged
    assert not any("(attempt 3;" in m for m in logged), logged  # 3 is not a power of two
    ln = link_named(a, "ab")
    assert ln["last_error"] == "no answer to the handshake"
    text = format_status(a.status())
    assert f"\n  ab (waiting): no answer to the handshake (attempt {ln['attempts']})" in text

    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    assert link_named(a, "ab")["last_error"] is None
    assert link_named(a, "ab")["attempts"] == 0
    assert "no answer" not in format_status(a.status())


def test_several_links_between_one_pair_all_come_up(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B", name="one"), net.link("A", "B", name="two"))
    b = net.start("B")
    wait_links(wait_until, {a: {("one", "B"), ("two", "B")}, b: {("one", "A"), ("two", "A")}})
    got = Collector()
    client_factory(b.endpoint).subscribe("PAIR.>", got)
    # heard over both links; the tie goes to the lower link name
    assert wait_until(
        lambda: entries(a) == 2 and has_route(a, "PAIR.>", "B", hops=1, via="one"), WAIT
    ), routes(a)
    pump(client_factory(a.endpoint), "PAIR.X", N, got, end="PAIR.END")
    assert_exact(got, "PAIR.X", range(N), "PAIR.END")
    assert link_named(a, "one")["msgs_out"] == N + 1
    assert link_named(a, "two")["msgs_out"] == 0
    assert counters(b)["duplicates"] == 0
    assert counters(a)["handshakes_refused"] == 0 and counters(b)["handshakes_refused"] == 0


# -- 13. restarted dialer -------------------------------------------------------------------------


def test_restarted_dialer_replaces_its_stale_link(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    # a long heartbeat timeout: B would keep the stale link for a minute on its own
    a = net.start("A", net.link("A", "B", heartbeat_interval=1.0, heartbeat_timeout=60.0))
    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    got = Collector()
    client_factory(b.endpoint).subscribe("RE.>", got)
    assert wait_until(lambda: has_route(a, "RE.>", "B"), WAIT), routes(a)
    old_incarnation = a.incarnation

    # A vanishes without a goodbye, as a crashed process would
    a.call(lambda node: setattr(node.links, "goodbye", lambda now: None))
    a.stop()
    assert up_links(b) == {("ab", "A")}  # B still believes in the old link

    a = net.restart("A")
    assert a.incarnation > old_incarnation
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    assert wait_until(lambda: counters(b)["links_down"] == 1, WAIT), counters(b)
    assert len(links_of(b)) == 1  # exactly one link from A: the new one
    assert counters(b)["links_up"] == 2
    assert wait_until(lambda: has_route(a, "RE.>", "B"), WAIT), routes(a)
    pump(client_factory(a.endpoint), "RE.X", N, got, end="RE.END")
    assert_exact(got, "RE.X", range(N), "RE.END")
    assert link_named(b, "ab")["msgs_in"] == N + 1
    assert {m.id.incarnation for m in got.messages} == {a.incarnation}


def test_a_node_restarted_on_a_fresh_data_dir_is_not_taken_for_its_previous_life(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
) -> None:
    # the embedded default (no data_dir: a temporary directory) and a container without a
    # volume both restart a named node with no stored incarnation: its new messages must
    # not be dropped as duplicates of its previous life's, which A's dedupe still holds
    a = broker_factory(broker_id="A")
    got = Collector()
    client_factory(a.endpoint).subscribe("FRESH.>", got)

    def start_b() -> Broker:
        return broker_factory(
            broker_id="B", data_dir=None, links=(LinkConfig(name="ba", uri=a.endpoint),)
        )

    b = start_b()
    assert wait_until(lambda: has_route(b, "FRESH.>", "A"), WAIT), routes(b)
    pump(client_factory(b.endpoint), "FRESH.X", N, got, end="FRESH.END")
    assert_exact(got, "FRESH.X", range(N), "FRESH.END")
    old_incarnation = b.incarnation
    b.stop()
    got.clear()

    b = start_b()
    assert b.incarnation > old_incarnation
    assert wait_until(lambda: has_route(b, "FRESH.>", "A"), WAIT), routes(b)
    pump(client_factory(b.endpoint), "FRESH.X", 100, got, end="FRESH.END", start=1000)
    assert_exact(got, "FRESH.X", range(1000, 1100), "FRESH.END")
    assert counters(a)["duplicates"] == 0


# -- 14. heartbeat timeout ------------------------------------------------------------------------


@pytest.mark.slow
def test_heartbeat_timeout_marks_a_killed_peer_down(
    net: Net,
    procs: Any,
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    port = net.port("P")
    peer = procs.zbroker(
        "start", "--port", str(port), "--data-dir", str(tmp_path / "data-P"), "--id", "P",
        "--log-level", "warning", "--no-discovery",
    )  # fmt: skip
    wait_ready(endpoint(port), WAIT, peer)
    a = net.start("A", net.link("A", "P"))
    wait_links(wait_until, {a: {("ap", "P")}})
    client = client_factory(endpoint(port))
    client.subscribe("HB.>", Collector())
    assert wait_until(lambda: has_route(a, "HB.>", "P", hops=1), WAIT), routes(a)
    client.close()  # (its sockets would only wait for the dead node)

    t0 = time.monotonic()
    peer.send_signal(signal.SIGKILL)  # no goodbye: only missing heartbeats tell
    assert wait_until(lambda: up_links(a) == set(), FAST["heartbeat_timeout"] + 5.0)
    elapsed = time.monotonic() - t0
    assert elapsed <= FAST["heartbeat_timeout"] + 1.0, elapsed
    assert routes(a) == []
    ln = link_named(a, "ap")
    assert "heartbeat" in (ln["last_error"] or ""), ln
    assert counters(a)["links_down"] == 1
    assert peer.wait(5.0) == -signal.SIGKILL


@pytest.mark.slow
def test_heartbeat_timeout_drops_the_link_of_a_killed_dialer(
    net: Net,
    procs: Any,
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """The acceptor side: the dialer's heartbeat settings travelled in its handshake."""
    a = net.start("A")
    port = net.port("P")
    config = tmp_path / "p.toml"
    config.write_text(
        f'[node]\nid = "P"\nhost = "{HOST}"\nport = {port}\n'
        f'data_dir = "{tmp_path / "data-P"}"\nlog_level = "warning"\n'
        f'[[link]]\nname = "pa"\nuri = "{a.endpoint}"\n'
        "heartbeat_interval = 0.2\nheartbeat_timeout = 1.0\n"
    )
    peer = procs.zbroker("start", "--config", str(config), "--no-discovery")
    wait_ready(endpoint(port), WAIT, peer)
    wait_links(wait_until, {a: {("pa", "P")}})
    client = client_factory(endpoint(port))
    client.subscribe("HBA.>", Collector())
    assert wait_until(lambda: has_route(a, "HBA.>", "P", hops=1), WAIT), routes(a)
    client.close()

    t0 = time.monotonic()
    peer.send_signal(signal.SIGKILL)
    assert wait_until(lambda: links_of(a) == [], FAST["heartbeat_timeout"] + 5.0), links_of(a)
    elapsed = time.monotonic() - t0
    assert elapsed <= FAST["heartbeat_timeout"] + 1.0, elapsed
    assert routes(a) == []
    assert counters(a)["links_down"] == 1
    assert peer.wait(5.0) == -signal.SIGKILL


# -- real processes -------------------------------------------------------------------------------


#: how a node process gets its links: ``zbroker start --peer URI`` (duplex, default
#: options), or ``[[link]]`` tables in a config file (here with short heartbeats)
LINKED_BY = ["peer", "config"]


def start_node(procs: Any, how: str, port: int, data_dir: Path, node_id: str, *peers: int) -> Any:
    """``zbroker start`` as a subprocess, dialling each of ``peers`` (base ports)."""
    args = ["start", "--port", str(port), "--data-dir", str(data_dir), "--id", node_id]
    if how == "peer":
        for p in peers:
            args += ["--peer", endpoint(p)]
    else:
        config = data_dir.with_suffix(".toml")
        config.write_text(
            "".join(
                f'[[link]]\nname = "to-{p}"\nuri = "{endpoint(p)}"\n'
                + "".join(f"{k} = {v}\n" for k, v in FAST.items())
                for p in peers
            )
        )
        args += ["--config", str(config)]
    # no mDNS discovery: links are exactly the ones given, and nothing leaves 127.0.0.1
    return procs.zbroker(*args, "--log-level", "warning", "--no-discovery")


def client_routes(client: Client) -> set[tuple[str, str]]:
    return {(r["pattern"], r["origin"]) for r in client.routes()}


def client_up_peers(client: Client) -> list[str]:
    return sorted(ln["peer"] for ln in client.status()["links"] if ln["state"] == "up")


@pytest.mark.slow
@pytest.mark.parametrize("how", LINKED_BY)
def test_process_chain(
    procs: Any,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
    how: str,
) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    nodes = [
        start_node(procs, how, p1, tmp_path / "n1", "N1", p2),
        start_node(procs, how, p2, tmp_path / "n2", "N2", p3),
        start_node(procs, how, p3, tmp_path / "n3", "N3"),
    ]
    for port, proc in zip((p1, p2, p3), nodes, strict=True):
        wait_ready(endpoint(port), WAIT, proc)
    c1, c2, c3 = (client_factory(endpoint(p)) for p in (p1, p2, p3))
    assert wait_until(
        lambda: (
            client_up_peers(c1) == ["N2"]
            and client_up_peers(c2) == ["N1", "N3"]
            and client_up_peers(c3) == ["N2"]
        ),
        WAIT,
    ), [c.status()["links"] for c in (c1, c2, c3)]
    got = Collector()
    c3.subscribe("PCHAIN.>", got)
    assert wait_until(lambda: ("PCHAIN.>", "N3") in client_routes(c1), WAIT), c1.routes()
    pump(c1, "PCHAIN.X", N, got, end="PCHAIN.END")
    assert_exact(got, "PCHAIN.X", range(N), "PCHAIN.END")
    assert c2.status()["counters"]["forwarded"] == N + 1
    for c in (c1, c2, c3):
        status = c.status()
        assert status["counters"]["duplicates"] == 0
        # `zbroker start` owns its process: its collector is tuned (zbroker.process)
        assert status["gc"]["threshold"][0] == DEFAULT_GC_YOUNG_THRESHOLD
        assert status["gc"]["frozen"] > 0
        # and so is its C allocator, on glibc (this machine's and CI's)
        assert status["malloc"] == {
            "tuned": True,
            "mmap_threshold": DEFAULT_MMAP_THRESHOLD,
            "trim_threshold": DEFAULT_TRIM_THRESHOLD,
        }
    for proc in nodes:
        assert proc.poll() is None, proc.stderr_text()


@pytest.mark.slow
@pytest.mark.parametrize("how", LINKED_BY)
def test_process_ring(
    procs: Any,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
    how: str,
) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    nodes = [
        start_node(procs, how, p1, tmp_path / "n1", "N1", p2),
        start_node(procs, how, p2, tmp_path / "n2", "N2", p3),
        start_node(procs, how, p3, tmp_path / "n3", "N3", p1),
    ]
    for port, proc in zip((p1, p2, p3), nodes, strict=True):
        wait_ready(endpoint(port), WAIT, proc)
    c1, c2, c3 = (client_factory(endpoint(p)) for p in (p1, p2, p3))
    assert wait_until(
        lambda: (
            client_up_peers(c1) == ["N2", "N3"]
            and client_up_peers(c2) == ["N1", "N3"]
            and client_up_peers(c3) == ["N1", "N2"]
        ),
        WAIT,
    ), [c.status()["links"] for c in (c1, c2, c3)]
    got2, got3 = Collector(), Collector()
    c2.subscribe("PRING.>", got2)
    c3.subscribe("PRING.>", got3)

    def direct() -> bool:
        hops = {(r["origin"], r["hops"]) for r in c1.routes("PRING.>")}
        return hops == {("N2", 1), ("N3", 1)}

    assert wait_until(direct, WAIT), c1.routes()
    pump(c1, "PRING.X", N, got2, got3, end="PRING.END")
    assert_exact(got2, "PRING.X", range(N), "PRING.END")
    assert_exact(got3, "PRING.X", range(N), "PRING.END")
    statuses = [c.status() for c in (c1, c2, c3)]
    assert sum(ln["msgs_out"] for st in statuses for ln in st["links"]) == 2 * (N + 1)
    assert sum(ln["msgs_in"] for st in statuses for ln in st["links"]) == 2 * (N + 1)
    for st in statuses:
        assert st["counters"]["duplicates"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("how", LINKED_BY)
def test_process_chain_middle_killed_and_restarted(
    procs: Any,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
    how: str,
) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    n1 = start_node(procs, how, p1, tmp_path / "n1", "N1", p2)
    n2 = start_node(procs, how, p2, tmp_path / "n2", "N2", p3)
    n3 = start_node(procs, how, p3, tmp_path / "n3", "N3")
    hellos = [
        wait_ready(endpoint(port), WAIT, proc) for port, proc in ((p1, n1), (p2, n2), (p3, n3))
    ]
    first_incarnation = hellos[1]["incarnation"]
    c1, c3 = client_factory(endpoint(p1)), client_factory(endpoint(p3))
    got = Collector()
    c3.subscribe("KILL.>", got)
    assert wait_until(lambda: ("KILL.>", "N3") in client_routes(c1), WAIT), c1.routes()
    pump(c1, "KILL.X", N, got, end="KILL.END")
    assert_exact(got, "KILL.X", range(N), "KILL.END")
    assert c1.status()["counters"]["links_up"] == 1

    n2.send_signal(signal.SIGKILL)
    assert n2.wait(5.0) == -signal.SIGKILL
    n2 = start_node(procs, how, p2, tmp_path / "n2", "N2", p3)
    hello = wait_ready(endpoint(p2), WAIT, n2)
    assert hello["broker_id"] == "N2" and hello["incarnation"] > first_incarnation

    # both neighbours have a fresh link to the new incarnation, and the route is back
    def healed() -> bool:
        s1, s3 = c1.status(), c3.status()
        return (
            s1["counters"]["links_up"] >= 2
            and [ln["state"] for ln in s1["links"]] == ["up"]
            and s3["counters"]["links_up"] >= 2
            and [(ln["peer"], ln["state"]) for ln in s3["links"]] == [("N2", "up")]
            and ("KILL.>", "N3") in client_routes(c1)
        )

    assert wait_until(healed, WAIT), (c1.status()["links"], c3.status()["links"], c1.routes())
    c2 = client_factory(endpoint(p2))
    assert client_routes(c2) == {("KILL.>", "N3")}
    got.clear()
    pump(c1, "KILL.X", N, got, end="KILL.END", start=N)
    assert_exact(got, "KILL.X", range(N, 2 * N), "KILL.END")
    assert c2.status()["counters"]["forwarded"] == N + 1
    assert c3.status()["counters"]["duplicates"] == 0


def test_msgs_before_the_handshake_are_counted_in_messages(
    broker_factory: BrokerFactory, wait_until: WaitUntil
) -> None:
    """A peer that sends MSGS before its LINK_WELCOME: the frame is bad input once
    (``unexpected``), and the messages it held are counted as dropped, each one."""
    import zmq

    from zbroker import wire

    ctx = zmq.Context.instance()
    peer = ctx.socket(zmq.ROUTER)  # plays the node the broker dials
    peer.setsockopt(zmq.LINGER, 0)
    try:
        port = peer.bind_to_random_port(f"tcp://{HOST}")
        b = broker_factory(
            links=(
                LinkConfig(
                    name="early",
                    uri=endpoint(port),
                    reconnect_initial_delay=30.0,
                    reconnect_max_delay=30.0,
                ),
            )
        )
        assert peer.poll(int(WAIT * 1000)), "the broker never dialled"
        ident, hello = peer.recv_multipart()
        assert wire.decode_frame(hello)[0] == wire.LINK_HELLO
        entry = ["EARLY.X", b"p", 0, None, "rawpeer", 1, 1, 0.0, ["rawpeer"], None]
        peer.send_multipart([ident, wire.encode_link(wire.MSGS, [entry] * 3)])

        def counted() -> bool:
            return bool(counters(b)["dropped"].get("link_not_ready", 0) == 3)

        assert wait_until(counted, WAIT)
        c = counters(b)
        assert c["dropped"]["bad_input.unexpected"] == 1
        assert c["bad_input"] == 1
        assert c["delivered"] == 0 and c["forwarded"] == 0
    finally:
        peer.close()


# -- large messages, large tables -----------------------------------------------------------------


def durable_payloads(broker: Broker, name: str) -> list[bytes]:
    """The payloads a node holds for durable subscription ``name``, oldest first."""

    def read(node: Any) -> list[bytes]:
        node.store.commit()
        return [r[2] for r in node.store.pending_durable(name, 0, 1_000)]

    result: list[bytes] = broker.call(read)
    return result


#: a small frame limit for these tests: the same rules, with megabytes fewer
SMALL_FRAMES = 64 * 1024


def test_large_messages_cross_a_link_whole_in_both_directions(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Messages of 1-60 KB, and one of the largest size a publisher may send, with the
    frame limit at 64 KiB: a pass's messages for a link leave in frames cut by bytes (they
    were cut by count only, and a frame of many large messages was refused whole by the
    next node), and a link frame may exceed the limit by what a message gains on the way
    (path, IDs). Both directions: the acceptor's ROUTER and the dialer's DEALER."""
    a = net.start("A", max_frame_bytes=SMALL_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    on_a, on_b = Collector(), Collector()
    client_factory(a.endpoint).subscribe("BIG.FROMB.>", on_a)
    client_factory(b.endpoint).subscribe("BIG.FROMA.>", on_b)
    assert wait_until(
        lambda: has_route(b, "BIG.FROMB.>", "A") and has_route(a, "BIG.FROMA.>", "B"), WAIT
    )
    n = 200
    sizes = [1_000 + (i * 7_919) % 59_000 for i in range(n)]
    largest = SMALL_FRAMES - 64  # a publish frame just within the limit
    pa, pb = client_factory(a.endpoint), client_factory(b.endpoint)
    for publisher, topic in ((pa, "BIG.FROMA.X"), (pb, "BIG.FROMB.X")):
        for i, size in enumerate(sizes):
            publisher.publish(topic, bytes([i % 256]) * size)
        publisher.publish(topic, b"L" * largest)
        publisher.publish(topic + ".END", b"end")
    for got, topic in ((on_b, "BIG.FROMA.X"), (on_a, "BIG.FROMB.X")):
        assert got.wait_topic(topic + ".END"), got.topics()
        payloads = got.payloads(topic)
        assert [len(p) for p in payloads] == [*sizes, largest]
        assert [p[0] for p in payloads[:n]] == [i % 256 for i in range(n)]
        assert payloads[-1] == b"L" * largest
        assert got.topics() == {topic: n + 1, topic + ".END": 1}
    for node in (a, b):
        c = counters(node)
        assert c["bad_input"] == 0 and c["dropped"] == {}, c
        assert c["forwarded"] == n + 2 and c["duplicates"] == 0


def test_large_persistent_messages_cross_a_link(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Store-and-forward frames are cut by bytes too: a PMSGS frame the next node refused
    was resent, and refused, every few seconds for ever."""
    a = net.start("A", max_frame_bytes=SMALL_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    sub = client_factory(b.endpoint)
    sub.subscribe("PBIG.>", Collector(), durable="pbig").unsubscribe()  # kept on B
    assert wait_until(lambda: has_route(a, "PBIG.>", "B"), WAIT)
    n = 40
    sizes = [20_000 + (i * 3_001) % 40_000 for i in range(n)]
    pub = client_factory(a.endpoint)
    pending = [
        pub.publish("PBIG.X", bytes([i]) * size, persistent=True) for i, size in enumerate(sizes)
    ]
    for fut in pending:
        fut.result(WAIT)

    def stored() -> list[bytes]:
        return durable_payloads(b, "pbig")

    assert wait_until(lambda: len(stored()) >= n, WAIT), len(stored())
    assert stored() == [bytes([i]) * size for i, size in enumerate(sizes)]
    assert wait_until(lambda: a.status()["forward"]["held"] == 0, WAIT)
    for node in (a, b):
        c = counters(node)
        assert c["bad_input"] == 0 and c["dropped"] == {}, c


#: a larger limit, for the node that sends to a SMALL_FRAMES one
LARGE_FRAMES = 1024 * 1024


def test_link_frames_fit_the_limit_the_peer_states(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Nodes with different max_frame_bytes: each states its limit in the link handshake
    and the other cuts what it sends to fit. A (1 MiB) sent B (64 KiB) frames of up to
    256 KiB, which B refused whole: most of 200 messages of 1-60 KB were lost at B. A
    message within A's limit but over B's is dropped at A, where it is counted and logged
    (it was counted at B as bad input, with every message of its frame)."""
    a = net.start("A", max_frame_bytes=LARGE_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    assert link_named(a, "ba")["peer_max_frame_bytes"] == SMALL_FRAMES
    assert link_named(b, "ba")["peer_max_frame_bytes"] == LARGE_FRAMES
    got = Collector()
    client_factory(b.endpoint).subscribe("MIX.>", got)
    assert wait_until(lambda: has_route(a, "MIX.>", "B"), WAIT)
    n = 200
    sizes = [1_000 + (i * 7_919) % 59_000 for i in range(n)]
    too_large = 3 * SMALL_FRAMES  # within A's limit, over what B takes on a link
    pub = client_factory(a.endpoint)
    for i, size in enumerate(sizes):
        pub.publish("MIX.X", bytes([i % 256]) * size)
        if i % 50 == 49:
            pub.publish("MIX.X", b"T" * too_large)
    pub.publish("MIX.END", b"end")
    assert got.wait_topic("MIX.END"), got.topics()
    payloads = got.payloads("MIX.X")
    assert [len(p) for p in payloads] == sizes
    assert [p[0] for p in payloads] == [i % 256 for i in range(n)]
    assert got.topics() == {"MIX.X": n, "MIX.END": 1}
    ca, cb = counters(a), counters(b)
    assert ca["dropped"] == {"link_frame_too_large": 4}, ca
    assert link_named(a, "ba")["drops"] == 4
    assert cb["bad_input"] == 0 and cb["dropped"] == {}, cb
    assert ca["forwarded"] == n + 1


def test_persistent_messages_over_the_peers_limit_do_not_block_the_queue(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Store-and-forward toward a node with a smaller max_frame_bytes: frames fit its
    limit, and an entry that can never fit is dropped from the queue (counted) once the
    entries before it are acknowledged. It was sent, refused and resent for ever, and every
    persistent message behind it waited with it."""
    a = net.start("A", max_frame_bytes=LARGE_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    sub = client_factory(b.endpoint)
    sub.subscribe("PMIX.>", Collector(), durable="pmix").unsubscribe()  # kept on B
    assert wait_until(lambda: has_route(a, "PMIX.>", "B"), WAIT)
    n = 30
    sizes = [20_000 + (i * 3_001) % 40_000 for i in range(n)]
    pub = client_factory(a.endpoint)
    pending = []
    for i, size in enumerate(sizes):
        pending.append(pub.publish("PMIX.X", bytes([i]) * size, persistent=True))
        if i in (0, 14):  # one right behind the first, one in the middle
            pending.append(pub.publish("PMIX.X", b"T" * (3 * SMALL_FRAMES), persistent=True))
    for fut in pending:
        fut.result(WAIT)

    def stored() -> list[bytes]:
        return durable_payloads(b, "pmix")

    assert wait_until(lambda: len(stored()) >= n, WAIT), len(stored())
    assert stored() == [bytes([i]) * size for i, size in enumerate(sizes)]
    assert wait_until(lambda: a.status()["forward"]["held"] == 0, WAIT)
    fa, fb = a.status()["forward"], b.status()["forward"]
    assert fa["dropped_too_large"] == 2 and fa["dropped_full"] == 0, fa
    assert fb["lost"] == 2, fb  # B saw the sequence skip them
    assert counters(a)["dropped"] == {"link_frame_too_large": 2}
    cb = counters(b)
    assert cb["bad_input"] == 0 and cb["dropped"] == {}, cb


def test_an_interest_table_fits_the_limit_of_the_neighbour_it_goes_to(
    net: Net, wait_until: WaitUntil
) -> None:
    """A (1 MiB frames) with 4,000 subscriptions (about 200 KB of table) gains a neighbour
    whose limit is 64 KiB: the advertisement is cut for the neighbour's limit, not A's."""
    import zmq

    n = 4_000
    a = net.start("A", max_frame_bytes=LARGE_FRAMES)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SNDHWM, 0)
    try:
        sub.connect(endpoint(a.ports["deliver"]))
        for i in range(n):
            sub.setsockopt(zmq.SUBSCRIBE, f"TABLE.EXCHANGE.SYMBOL{i:07d}.>".encode() + b"\0")
        assert wait_until(lambda: a.status()["subscriptions"]["count"] == n, WAIT)
        b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
        wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})

        def learned() -> int:
            return sum(1 for r in routes(b) if r["origin"] == "A" and r["link"] == "ba")

        assert wait_until(lambda: learned() == n, WAIT), learned()
        assert counters(b)["bad_input"] == 0 and counters(b)["dropped"] == {}
    finally:
        sub.close()


def test_a_large_interest_table_reaches_a_new_neighbour(net: Net, wait_until: WaitUntil) -> None:
    """A node with 30,000 subscriptions (its table encodes to about 1.3 MB) gains a
    neighbour: the first, full advertisement leaves in frames under the neighbour's
    max_frame_bytes (1 MiB). It was one frame, refused whole: the link came up and the
    neighbour knew none of the interest behind it."""
    import zmq

    n = 30_000
    a = net.start("A")
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)  # subscribes as the client library does (pattern NUL)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SNDHWM, 0)  # no subscription may be lost on our side
    try:
        sub.connect(endpoint(a.ports["deliver"]))
        patterns = [f"TABLE.EXCHANGE.SYMBOL{i:07d}.>" for i in range(n)]
        for p in patterns:
            sub.setsockopt(zmq.SUBSCRIBE, p.encode() + b"\0")
        assert wait_until(lambda: a.status()["subscriptions"]["count"] == n, WAIT)
        b = net.start("B", net.link("B", "A"))
        wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})

        def learned() -> int:
            return sum(1 for r in routes(b) if r["origin"] == "A" and r["link"] == "ba")

        assert wait_until(lambda: learned() == n, WAIT), learned()
        assert counters(b)["bad_input"] == 0
        assert counters(b)["dropped"] == {}
        # and messages follow it: one on the last pattern, published on B, arrives at A
        last = f"TABLE.EXCHANGE.SYMBOL{n - 1:07d}.X"
        client = Client(b.endpoint)
        try:
            client.publish(last, b"found")
            assert sub.poll(int(WAIT * 1000)), "nothing delivered on A"
            frame = sub.recv()
            assert frame.startswith(f"TABLE.EXCHANGE.SYMBOL{n - 1:07d}.>".encode() + b"\0")
            assert b"found" in frame
        finally:
            client.close()
    finally:
        sub.close()


def test_a_reply_through_a_relay_never_overtakes_the_interest_in_it(
    net: Net, client_factory: Callable[..., Client], wait_until: WaitUntil
) -> None:
    """Request/reply across a relay (A - B - C): a requester on A subscribes to a fresh
    reply topic (``subscribe()`` has returned), then publishes its request; the service on
    C answers at once. Interest that reached a node before a message must reach the next
    node before that message: a relay that got the new interest and the request in one
    pass used to send the request first, so C answered before it knew anyone wanted the
    reply, and the reply reached nobody (about 1 in 300, counted nowhere)."""
    a = net.start("A", net.link("A", "B"))
    b = net.start("B", net.link("B", "C"))
    c = net.start("C")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    service = client_factory(c.endpoint)
    service.subscribe("REQ.>", lambda m: service.publish(m.payload.decode(), b"reply"))
    assert wait_until(lambda: has_route(a, "REQ.>", "C", hops=2), WAIT), routes(a)
    requester = client_factory(a.endpoint)
    background = client_factory(a.endpoint)
    lost = []
    for i in range(600):
        got = threading.Event()
        sub = requester.subscribe(f"REPLY.{i}", lambda m, got=got: got.set())
        requester.publish(f"REQ.{i}", f"REPLY.{i}".encode())
        background.publish("NOISE.X", b"n")  # traffic in the same passes
        if not got.wait(2.0):
            lost.append(i)
        sub.unsubscribe()
    assert lost == [], f"{len(lost)} of 600 replies reached nobody: {lost[:10]}"
