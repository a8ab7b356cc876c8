"""Integration tests of a network of brokers: nodes linked over real ZeroMQ sockets: chains,
rings and meshes (once, by the shortest path, no loop), ttl, and interest withdrawn when
subscribers leave. What the other settings of a link decide (one-way links,
include/exclude filters, static patterns, conduits): :mod:`.test_network_link_options`.

Every node is an in-thread :class:`~zbroker.Broker` on 127.0.0.1, on ports assigned up front
(``free_port``), so a link may name a node that starts later. How these tests wait and how
they prove that nothing more arrives (a barrier message per path, then a grace period):
:mod:`.network`. The network's faults: :mod:`.test_network_faults`; real ``zbroker start``
processes: :mod:`.test_network_processes`; large messages and tables:
:mod:`.test_network_limits`.
"""

from __future__ import annotations

import time

from tests.helpers import Collector
from tests.integration.network import (
    GRACE,
    WAIT,
    ClientFactory,
    N,
    Net,
    WaitUntil,
    assert_exact,
    counters,
    entries,
    has_route,
    link_named,
    msgs,
    pump,
    route,
    route_keys,
    routes,
    wait_links,
)
from tests.integration.network import net as net  # (the fixture)

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
