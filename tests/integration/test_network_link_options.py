"""What a link's settings decide in a network of brokers: a one-way link carries messages
from its dialer to its acceptor only; include and exclude filters decide which messages and
interest cross; static patterns cross without interest; a conduit carries one copy per
message, not one per subscription. In-thread nodes on 127.0.0.1 (:mod:`.network`, which
also says how these tests wait and how they prove that nothing more arrives).
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
    has_route,
    link_named,
    links_of,
    pump,
    route_keys,
    routes,
    wait_links,
)
from tests.integration.network import net as net  # (the fixture)

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
