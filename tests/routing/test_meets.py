"""Branches that would meet (routing/meets.py): a split whose copies cross one node.

A link whose ttl is below the mesh's diameter hides longer entries from its far side, so
a node can hold entries whose best paths leave by two links and cross a third node. Each
copy names only its own targets, and the node where they meet used to drop the second as
a duplicate, with the targets only it carried. The plan now sends them as one copy.
"""

from __future__ import annotations

from collections import Counter

from zbroker.routing import AdvertIn, LinkOptions, LinkUp, RoutingEngine
from zbroker.sim import Network

MsgId = tuple[str, int, int]


def square(*, conduit: bool = True) -> tuple[Network, int, int]:
    """P-A, P-B, A-W (ttl 2), B-W, W-Y, Y-Z; subscribers on W and Z."""
    net = Network(seed=1)
    for n in ("P", "A", "B", "W", "Y", "Z"):
        net.add_node(n)
    opts = LinkOptions(conduit=conduit)
    net.add_link("P", "A", options=opts)
    net.add_link("P", "B", options=opts)
    net.add_link("A", "W", options=LinkOptions(ttl=2, conduit=conduit))
    for d, a in (("B", "W"), ("W", "Y"), ("Y", "Z")):
        net.add_link(d, a, options=opts)
    sw = net.subscribe("W", "X.>")
    sz = net.subscribe("Z", "X.>")
    net.run()
    return net, sw, sz


def got(net: Network, msg_id: MsgId) -> Counter[tuple[str, int]]:
    return Counter((d.node, d.subscriber) for d in net.deliveries if d.msg_id == msg_id)


def frames_of(net: Network, msg_id: MsgId) -> dict[tuple[str, str], int]:
    return {(link, way): n for (m, link, way), n in net.stats.crossings.items() if m == msg_id}


def test_the_far_subscriber_gets_a_split_message_once() -> None:
    net, sw, sz = square()
    # the ttl keeps A from hearing Z over A-W; P's best entry for W goes through A (the
    # tie-break), its only entry for Z through B
    assert [e["path"] for e in net.nodes["P"].engine.interest() if e["origin"] != "P"] == [
        ["W", "A"],
        ["Z", "Y", "W", "B"],
    ]
    m = net.publish("P", "X.1")
    net.run()
    assert got(net, m) == {("W", sw): 1, ("Z", sz): 1}
    assert net.stats.duplicates_dropped == 0
    # one copy, through B, names both W and Z
    assert frames_of(net, m) == {
        ("P-B", "P>B"): 1,
        ("B-W", "B>W"): 1,
        ("W-Y", "W>Y"): 1,
        ("Y-Z", "Y>Z"): 1,
    }


def test_conduit_off_sends_one_copy_per_key_through_the_one_branch() -> None:
    net, sw, sz = square(conduit=False)
    m = net.publish("P", "X.1")
    net.run()
    assert got(net, m) == {("W", sw): 1, ("Z", sz): 1}
    assert frames_of(net, m)[("P-B", "P>B")] == 2  # one per key behind B (W's and Z's)
    assert ("P-A", "P>A") not in frames_of(net, m)


def test_every_publisher_with_a_way_reaches_both_subscribers_once() -> None:
    net, sw, sz = square()
    # (A is left out: its own copy to W and the one it sends P for Z meet at W, and no
    # neighbour of A can take both: the limitation architecture.md describes)
    for node in ("P", "B", "W", "Y", "Z"):
        m = net.publish(node, "X.2")
        net.run()
        assert got(net, m) == {("W", sw): 1, ("Z", sz): 1}, node
    assert net.stats.duplicates_dropped == 0


Entry = tuple[str, str, tuple[str, ...]]


def _engine(over_a: list[Entry], over_b: list[Entry]) -> RoutingEngine:
    """P with links P-A and P-B, having heard these entries over each."""
    e = RoutingEngine("P")
    for link, peer in (("P-A", "A"), ("P-B", "B")):
        e.handle(LinkUp(link=link, peer=peer, can_send=True, can_receive=True))
    e.handle(AdvertIn(link="P-A", full=True, entries=tuple(over_a)))
    e.handle(AdvertIn(link="P-B", full=True, entries=tuple(over_b)))
    e.flush()
    return e


def _p_engine() -> RoutingEngine:
    """The square's P: W as near through A as through B; Z only through B, past W."""
    return _engine(
        [("X.1", "W", ("W", "A"))],
        [("X.1", "W", ("W", "B")), ("X.>", "Z", ("Z", "Y", "W", "B"))],
    )


def test_a_plan_that_moved_an_origin_follows_the_entry_it_moved_to() -> None:
    e = _p_engine()
    _, sends = e.route("X.1", (), None)
    assert [(link, sorted(t or ()), n) for link, t, n in sends] == [("P-B", ["W", "Z"], 1)]
    # B withdraws its entry of W: not P's best entry of W (that is A's), but the plan
    # routed W by it, so the plan must go
    e.handle(AdvertIn(link="P-B", full=False, entries=(("X.1", "W", None),)))
    e.flush()
    _, sends = e.route("X.1", (), None)
    assert sorted(sends) == [("P-A", ("W",), 1), ("P-B", ("Z",), 1)]


def test_a_crossing_no_neighbour_can_take_whole_is_left_as_it_was() -> None:
    e = _engine([("X.1", "V", ("V", "W", "A"))], [("X.1", "Z", ("Z", "W", "B"))])
    _, sends = e.route("X.1", (), None)
    assert sorted(sends) == [("P-A", ("V",), 1), ("P-B", ("Z",), 1)]


def test_a_tree_is_not_touched() -> None:
    e = _engine([("X.1", "V", ("V", "A"))], [("X.1", "Z", ("Z", "B"))])
    _, sends = e.route("X.1", (), None)
    assert sorted(sends) == [("P-A", ("V",), 1), ("P-B", ("Z",), 1)]
    assert not e._table.alternates  # nothing consulted beyond the best entries


def test_a_moved_origin_takes_its_own_link_when_the_copy_may_not_take_the_other() -> None:
    e = _p_engine()
    # a copy that came from B may not go back to B: W, moved to B in the plan, goes by
    # its own best entry's link (Z, whose only way is B, cannot be served from here)
    _, sends = e.route("X.1", ("B",), ("W", "Z"))
    assert list(sends) == [("P-A", ("W",), 1)]
    _, sends = e.route("X.1", (), None)
    assert [(link, sorted(t or ()), n) for link, t, n in sends] == [("P-B", ["W", "Z"], 1)]


def test_no_origin_is_moved_to_a_longer_way() -> None:
    # a message's hops count against every link's ttl from its publisher on, which no
    # entry tells: a longer way could cross a link past its ttl, so only an equally short
    # entry is taken
    e = _engine(
        [("X.1", "W", ("W", "A"))],
        [("X.1", "W", ("W", "Q", "B")), ("X.>", "Z", ("Z", "Y", "W", "B"))],
    )
    _, sends = e.route("X.1", (), None)
    assert sorted(sends) == [("P-A", ("W",), 1), ("P-B", ("Z",), 1)]
