"""Named scenarios on the network simulator, each with exact counts.

Every scenario runs real routing engines wired by :class:`zbroker.sim.Network`; counts are
deliveries per subscriber, message frames per (link, direction) and duplicates dropped.
"""

from __future__ import annotations

from collections import Counter

import pytest

from zbroker.routing import LinkOptions
from zbroker.sim import Network

MsgId = tuple[str, int, int]


def network(nodes: str, links: list[tuple[str, str]], seed: int = 1) -> Network:
    net = Network(seed=seed)
    for n in nodes:
        net.add_node(n)
    for d, a in links:
        net.add_link(d, a)
    net.run()
    return net


def frames_of(net: Network, msg_id: MsgId) -> dict[tuple[str, str], int]:
    """(link, direction) -> frames of one message."""
    return {(link, way): n for (m, link, way), n in net.stats.crossings.items() if m == msg_id}


def got(net: Network, msg_id: MsgId) -> Counter[tuple[str, int]]:
    """(node, subscriber) -> deliveries of one message."""
    return Counter((d.node, d.subscriber) for d in net.deliveries if d.msg_id == msg_id)


def hops_of(net: Network, msg_id: MsgId) -> dict[str, int]:
    return {d.node: d.hops for d in net.deliveries if d.msg_id == msg_id}


def publish(net: Network, node: str, topic: str) -> MsgId:
    msg_id = net.publish(node, topic)
    net.run()
    return msg_id


def assert_tables_consistent(net: Network) -> None:
    """Every best entry names a live subscription over a live, shortest path."""
    live = {n for n, node in net.nodes.items() if node.alive}
    up_links = {
        name: link
        for name, link in net.links.items()
        if link.up and link.dialer in live and link.acceptor in live
    }
    for node_id, e in net.best_entries():
        origin = str(e["origin"])
        path = [str(p) for p in e["path"]]  # type: ignore[attr-defined]
        assert origin in live, (node_id, e)
        assert e["pattern"] in net.nodes[origin].engine.local_patterns, (node_id, e)
        assert e["pattern"] in net.nodes[origin].refs, (node_id, e)
        assert set(path) <= live, (node_id, e)
        if origin == node_id:
            assert path == [] and e["link"] is None
            continue
        link = up_links[str(e["link"])]
        assert {link.dialer, link.acceptor} == {node_id, path[-1]}
        assert path[0] == origin
        assert e["hops"] == len(path) == net.distances(node_id)[origin], (node_id, e)
        assert net.nodes[node_id].engine.links.keys() <= up_links.keys()


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


# -- unsubscribe ----------------------------------------------------------------------------


def test_subscriber_leaving_empties_every_table() -> None:
    net = network("ABCD", [("A", "B"), ("B", "C"), ("C", "D"), ("D", "A"), ("A", "C")])
    sids = [
        ("A", net.subscribe("A", "X.>")),
        ("C", net.subscribe("C", "X.*")),
        ("D", net.subscribe("D", "X.>")),
        ("D", net.subscribe("D", "X.>")),  # second subscriber on the same pattern
    ]
    net.run()
    assert net.interest_entries() > 0
    assert_tables_consistent(net)
    # one of two subscribers of D leaves: D's interest stays
    net.unsubscribe(*sids[3])
    net.run()
    assert [(e["pattern"], e["origin"]) for e in net.nodes["B"].engine.interest()] == [
        ("X.*", "C"),
        ("X.>", "A"),
        ("X.>", "D"),
    ]
    for node, sid in sids[:3]:
        net.unsubscribe(node, sid)
    net.run()
    for sim_node in net.nodes.values():
        assert sim_node.engine.interest() == []
        assert sim_node.engine.entry_count() == 0
    assert net.interest_entries() == 0
    m = publish(net, "A", "X.1")
    assert frames_of(net, m) == {}
    assert got(net, m) == {}


# -- node restart ---------------------------------------------------------------------------


def test_middle_node_killed_and_restarted() -> None:
    # A - M - B is the short way; A - C - D - B the long one
    net = network("AMBCD", [("A", "M"), ("M", "B"), ("A", "C"), ("C", "D"), ("D", "B")])
    sb = net.subscribe("B", "X")
    net.subscribe("M", "X")  # dies with M
    net.run()
    m = publish(net, "A", "X")
    assert frames_of(net, m) == {("A-M", "A>M"): 1, ("M-B", "M>B"): 1}
    assert hops_of(net, m) == {"M": 1, "B": 2}

    net.remove_node("M")
    net.run()
    assert_tables_consistent(net)
    for n in "ABCD":
        assert all(
            e["origin"] != "M" and "M" not in e["path"]  # type: ignore[operator]
            for e in net.nodes[n].engine.interest()
        )
    m = publish(net, "A", "X")
    assert got(net, m) == {("B", sb): 1}
    assert hops_of(net, m) == {"B": 3}
    assert frames_of(net, m) == {("A-C", "A>C"): 1, ("C-D", "C>D"): 1, ("D-B", "D>B"): 1}

    net.add_node("M")
    net.run()
    assert net.nodes["M"].incarnation == 2
    assert net.nodes["M"].engine.local_patterns == frozenset()
    assert_tables_consistent(net)
    assert net.nodes["A"].engine.interest() == [
        {"pattern": "X", "origin": "B", "path": ["B", "M"], "hops": 2, "link": "A-M"}
    ]
    m = publish(net, "A", "X")
    assert got(net, m) == {("B", sb): 1}  # the old M subscription is gone
    assert frames_of(net, m) == {("A-M", "A>M"): 1, ("M-B", "M>B"): 1}
    # the restarted node publishes as a new incarnation, and B does not drop it
    m = publish(net, "M", "X")
    assert m == ("M", 2, 1)
    assert got(net, m) == {("B", sb): 1}
    assert net.stats.duplicates_dropped == 0


def test_restart_before_drain_leaves_no_stale_interest() -> None:
    # frames of a dead incarnation still in flight must not land on the new session
    stale = []
    for seed in range(10):
        net = network("AB", [("A", "B")], seed=seed)
        net.subscribe("B", "X")
        net.run(until=net.now + 0.001)  # B's advert has left, not arrived ...
        assert net._queue
        net.remove_node("B")  # ... when B dies
        net.add_node("B")  # and comes back without that subscription
        net.run()
        if net.nodes["A"].engine.interest():
            stale.append(seed)
    assert stale == []


def test_link_flap_before_drain_leaves_no_stale_interest() -> None:
    # a cut and restored link is a new session: its old frames are discarded
    stale = []
    for seed in range(10):
        net = network("AB", [("A", "B")], seed=seed)
        sid = net.subscribe("B", "X")
        net.run(until=net.now + 0.001)  # B's advert has left, not arrived ...
        assert net._queue
        net.set_link("A-B", False)  # ... when the link flaps
        net.set_link("A-B", True)
        net.unsubscribe("B", sid)
        net.run()
        if net.nodes["A"].engine.interest():
            stale.append(seed)
    assert stale == []


# -- failover -------------------------------------------------------------------------------


def test_ring_failover_to_two_hop_path_and_back() -> None:
    net = network("ABC", [("A", "B"), ("B", "C"), ("C", "A")])
    sid = net.subscribe("C", "X")
    net.run()
    m = publish(net, "A", "X")
    assert frames_of(net, m) == {("C-A", "A>C"): 1}
    assert hops_of(net, m) == {"C": 1}

    net.set_link("C-A", False)
    net.run()
    assert_tables_consistent(net)
    m = publish(net, "A", "X")
    assert got(net, m) == {("C", sid): 1}
    assert hops_of(net, m) == {"C": 2}
    assert frames_of(net, m) == {("A-B", "A>B"): 1, ("B-C", "B>C"): 1}

    net.set_link("C-A", True)
    net.run()
    assert_tables_consistent(net)
    m = publish(net, "A", "X")
    assert got(net, m) == {("C", sid): 1}
    assert hops_of(net, m) == {"C": 1}
    assert frames_of(net, m) == {("C-A", "A>C"): 1}
    assert net.stats.message_frames == 4
    assert net.stats.duplicates_dropped == 0
