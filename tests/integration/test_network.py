"""Integration tests of a network of brokers: nodes linked over real ZeroMQ sockets, and
what the links' settings decide: chains, rings and meshes (once, by the shortest path, no
loop), ttl, one-way links, include/exclude filters, static patterns, conduits, and interest
withdrawn when subscribers leave.

Every node is an in-thread :class:`~zbroker.Broker` on 127.0.0.1, on ports assigned up front
(``free_port``), so a link may name a node that starts later. How these tests wait and how
they prove that nothing more arrives (a barrier message per path, then a grace period):
:mod:`.network`. The network's faults: :mod:`.test_network_faults`; real ``zbroker start``
processes: :mod:`.test_network_processes`; large messages and tables:
:mod:`.test_network_limits`.
"""

from __future__ import annotations

import time

import pytest

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
    links_of,
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
