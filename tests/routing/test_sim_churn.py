"""Named scenarios on the network simulator where something leaves, each with exact
counts: a subscriber leaving empties every table, a middle node killed and restarted, a
restart or a link flap before the tables drained, and a ring failing over and back.

Every scenario runs real routing engines wired by :class:`zbroker.sim.Network`.
"""

from __future__ import annotations

from typing import cast

from tests.routing.scenarios import (
    assert_tables_consistent,
    frames_of,
    got,
    hops_of,
    network,
    publish,
)

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
            e["origin"] != "M" and "M" not in cast(list[str], e["path"])
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
