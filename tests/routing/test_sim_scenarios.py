"""Named scenarios on the network simulator, each with exact counts: multi-hop interest,
rings and meshes, TTL, one-way links, include/exclude filters, static routes and conduits.
Subscribers and nodes that leave, and failover: ``tests/routing/test_sim_churn.py``.

Every scenario runs real routing engines wired by :class:`zbroker.sim.Network`; counts are
deliveries per subscriber, message frames per (link, direction) and duplicates dropped.
"""

from __future__ import annotations

import pytest

from tests.routing.scenarios import (
    assert_tables_consistent,
    frames_of,
    got,
    hops_of,
    network,
    publish,
)
from zbroker.routing import LinkOptions
from zbroker.sim import Network

# -- multi-hop interest ---------------------------------------------------------------------


def test_multi_hop_interest_a_m_b() -> None:
    net = network("AMB", [("A", "M"), ("M", "B")])
    sid = net.subscribe("B", "PRICE.>")
    net.run()
    assert net.nodes["A"].engine.interest() == [
        {"pattern": "PRICE.>", "origin": "B", "path": ["B", "M"], "hops": 2, "link": "A-M"}
    ]
    m = publish(net, "A", "PRICE.IBM")
    assert got(net, m) == {("B", sid): 1}
    assert hops_of(net, m) == {"B": 2}
    assert [d.path for d in net.deliveries] == [("A", "M")]
    assert frames_of(net, m) == {("A-M", "A>M"): 1, ("M-B", "M>B"): 1}
    assert net.stats.message_frames == 2
    assert net.stats.duplicates_dropped == 0
    # no interest, no frame
    m2 = publish(net, "A", "BOND.X")
    assert frames_of(net, m2) == {}
    assert net.stats.message_frames == 2
    assert len(net.deliveries) == 1
    assert_tables_consistent(net)


# -- ring -----------------------------------------------------------------------------------


def test_ring_no_loop_no_duplicate() -> None:
    net = network("ABC", [("A", "B"), ("B", "C"), ("C", "A")])
    sb = net.subscribe("B", "X")
    sc = net.subscribe("C", "X")
    net.run()
    m = publish(net, "A", "X")
    assert got(net, m) == {("B", sb): 1, ("C", sc): 1}
    assert hops_of(net, m) == {"B": 1, "C": 1}
    assert frames_of(net, m) == {("A-B", "A>B"): 1, ("C-A", "A>C"): 1}
    m = publish(net, "B", "X")
    assert got(net, m) == {("B", sb): 1, ("C", sc): 1}
    assert hops_of(net, m) == {"B": 0, "C": 1}
    assert frames_of(net, m) == {("B-C", "B>C"): 1}
    m = publish(net, "C", "X")
    assert frames_of(net, m) == {("B-C", "C>B"): 1}
    assert net.stats.message_frames == 4
    assert net.stats.duplicates_dropped == 0
    assert net.stats.loops_dropped == 0
    assert len(net.deliveries) == 6
    assert_tables_consistent(net)


def test_mesh_equal_cost_paths_one_delivery() -> None:
    net = network("ABCD", [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")])
    sid = net.subscribe("D", "X.>")
    net.run()
    m = publish(net, "A", "X.1")
    assert got(net, m) == {("D", sid): 1}
    assert hops_of(net, m) == {"D": 2}
    # the tie is broken toward the lowest neighbour: B
    assert frames_of(net, m) == {("A-B", "A>B"): 1, ("B-D", "B>D"): 1}
    assert net.stats.message_frames == 2
    assert net.stats.duplicates_dropped == 0
    assert_tables_consistent(net)


# -- ttl ------------------------------------------------------------------------------------


def test_ttl_1_chain() -> None:
    net = Network(seed=1)
    for n in "ABC":
        net.add_node(n)
    one = LinkOptions(ttl=1)
    net.add_link("A", "B", options=one)
    net.add_link("B", "C", options=one)
    sb = net.subscribe("B", "X")
    net.subscribe("C", "X")
    net.run()
    # C's interest is 2 hops from A: never advertised over a ttl-1 link
    assert [(e["origin"], e["path"]) for e in net.nodes["A"].engine.interest()] == [("B", ["B"])]
    m = publish(net, "A", "X")
    assert got(net, m) == {("B", sb): 1}
    assert frames_of(net, m) == {("A-B", "A>B"): 1}
    assert net.stats.message_frames == 1
    assert net.stats.duplicates_dropped == 0


# -- one-way link -------------------------------------------------------------------------


def test_one_way_link_carries_messages_dialer_to_acceptor_only() -> None:
    net = Network(seed=1)
    net.add_node("D")
    net.add_node("A")
    net.add_link("D", "A", duplex=False)
    sd = net.subscribe("D", "X")
    sa = net.subscribe("A", "X")
    net.run()
    assert [e["origin"] for e in net.nodes["D"].engine.interest()] == ["A", "D"]
    assert [e["origin"] for e in net.nodes["A"].engine.interest()] == ["A"]
    m = publish(net, "A", "X")
    assert got(net, m) == {("A", sa): 1}  # the dialer side gets nothing
    assert frames_of(net, m) == {}
    m = publish(net, "D", "X")
    assert got(net, m) == {("D", sd): 1, ("A", sa): 1}
    assert frames_of(net, m) == {("D-A", "D>A"): 1}
    assert net.stats.message_frames == 1
    assert net.distances("A") == {"A": 0}
    assert net.distances("D") == {"D": 0, "A": 1}


# -- include / exclude ----------------------------------------------------------------------


def test_include_exclude_filter_topics_crossing() -> None:
    net = Network(seed=1)
    net.add_node("A")
    net.add_node("B")
    opts = LinkOptions(include=("PRICE.STOCK.>",), exclude=("PRICE.STOCK.NYSE.*",))
    net.add_link("A", "B", options=opts)
    sid = net.subscribe("B", "PRICE.>")
    net.subscribe("B", "PRICE.STOCK.NYSE.*")  # never advertised: all excluded
    net.run()
    assert [e["pattern"] for e in net.nodes["A"].engine.interest()] == ["PRICE.>"]
    topics = [
        "PRICE.STOCK.NASDAQ.AAPL",
        "PRICE.STOCK.NYSE.IBM",
        "PRICE.STOCK.NYSE.IBM.X",
        "PRICE.STOCK.NYSE",
        "PRICE.STOCK",
        "PRICE.BOND.X",
    ]
    ids = {publish(net, "A", t): t for t in topics}
    crossed = {ids[m] for (m, _link, _way) in net.stats.crossings}
    assert crossed == {"PRICE.STOCK.NASDAQ.AAPL", "PRICE.STOCK.NYSE.IBM.X", "PRICE.STOCK.NYSE"}
    assert net.stats.message_frames == 3
    assert sorted(d.topic for d in net.deliveries) == sorted(crossed)
    assert {(d.node, d.subscriber) for d in net.deliveries} == {("B", sid)}


# -- static ---------------------------------------------------------------------------------


def test_static_propagation_without_subscribers() -> None:
    net = Network(seed=1)
    for n in "ABC":
        net.add_node(n)
    net.add_link("A", "B", options=LinkOptions(static=("ALERT.>",)))
    net.add_link("B", "C")
    net.run()
    m = publish(net, "A", "ALERT.FIRE")
    assert frames_of(net, m) == {("A-B", "A>B"): 1}
    m2 = publish(net, "A", "OTHER")
    assert frames_of(net, m2) == {}
    m3 = publish(net, "C", "ALERT.FIRE")  # no interest at C: never reaches the static link
    assert frames_of(net, m3) == {}
    m4 = publish(net, "B", "ALERT.FIRE")  # both ends of the link are static
    assert frames_of(net, m4) == {("A-B", "B>A"): 1}
    assert net.stats.message_frames == 2
    assert net.deliveries == []
    # a subscriber behind the static link: the receiver routes it on from its own table
    sc = net.subscribe("C", "ALERT.>")
    net.run()
    m5 = publish(net, "A", "ALERT.WATER")
    assert got(net, m5) == {("C", sc): 1}
    assert frames_of(net, m5) == {("A-B", "A>B"): 1, ("B-C", "B>C"): 1}


def test_static_push_is_not_narrowed_by_interest_on_the_same_link() -> None:
    net = Network(seed=1)
    for n in "ABC":
        net.add_node(n)
    net.add_link("A", "B", options=LinkOptions(ttl=1, static=("ALERT.>",)))
    net.add_link("B", "C")
    sc = net.subscribe("C", "ALERT.>")
    net.run()
    m = publish(net, "A", "ALERT.1")
    assert got(net, m) == {("C", sc): 1}
    assert frames_of(net, m) == {("A-B", "A>B"): 1, ("B-C", "B>C"): 1}
    # B subscribing too must not narrow the static push to B alone: C (2 hops from A,
    # beyond the ttl of A's interest) still depends on B routing it from its own table
    sb = net.subscribe("B", "ALERT.>")
    net.run()
    m = publish(net, "A", "ALERT.2")
    assert got(net, m) == {("B", sb): 1, ("C", sc): 1}
    assert frames_of(net, m) == {("A-B", "A>B"): 1, ("B-C", "B>C"): 1}


# -- conduit --------------------------------------------------------------------------------


@pytest.mark.parametrize(("conduit", "frames", "dropped"), [(True, 1, 0), (False, 3, 2)])
def test_conduit_on_off(conduit: bool, frames: int, dropped: int) -> None:
    net = Network(seed=1)
    net.add_node("A")
    net.add_node("B")
    net.add_link("A", "B", options=LinkOptions(conduit=conduit))
    subs = {net.subscribe("B", p) for p in ("T.>", "T.*", "T.X")}
    net.run()
    m = publish(net, "A", "T.X")
    assert frames_of(net, m) == {("A-B", "A>B"): frames}
    assert net.stats.message_frames == frames
    assert net.stats.duplicates_dropped == dropped
    assert got(net, m) == {("B", s): 1 for s in subs}
    # a topic matching two of the three
    m2 = publish(net, "A", "T.Y")
    assert frames_of(net, m2) == {("A-B", "A>B"): frames - 1 if not conduit else 1}
    assert sorted(d.pattern for d in net.deliveries if d.msg_id == m2) == ["T.*", "T.>"]
