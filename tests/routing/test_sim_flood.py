"""Flooded branches (zbroker/routing/flood.py) on the simulator: every node gets every
message of the branch exactly once, and interest in it is never advertised."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.routing.filters import pattern_covers
from zbroker.sim import Network
from zbroker.topics import match

from .test_sim_properties import Topology, draw_topic, name, patterns, settle, topologies

BRANCH = "a.>"


def test_a_flooded_branch_reaches_every_node_without_interest() -> None:
    net = Network(seed=2)
    for n in "ABCD":
        net.add_node(n)
        net.host(n, "LOG.>", flood=True)
    for a, b in ("AB", "BC", "CD", "DA"):
        net.add_link(a, b)
    net.subscribe("C", "LOG.>")
    net.subscribe("C", "ORD.>")
    settle(net)
    # C's interest in the flooded branch went nowhere; its other interest did
    assert {(e["pattern"], e["origin"]) for e in net.nodes["A"].engine.interest()} == {
        ("ORD.>", "C")
    }
    msg = net.publish("A", "LOG.x")
    settle(net)
    assert [(d.node, d.path) for d in net.deliveries if d.msg_id == msg] in (
        [("C", ("A", "B"))],
        [("C", ("A", "D"))],
    )
    seen = {way.split(">")[1] for (m, _ln, way) in net.stats.crossings if m == msg}
    assert seen == {"B", "C", "D"}  # every node got it
    assert net.stats.loops_dropped == 0
    # each of B, C, D kept its first copy; every other copy was dropped where it arrived
    assert net.stats.message_frames == 3 + net.stats.duplicates_dropped


@settings(max_examples=40, deadline=None)
@given(topo=topologies(max_nodes=14), data=st.data(), seed=st.integers(0, 10_000))
def test_flood_exactly_once_on_random_topologies(
    topo: Topology, data: st.DataObject, seed: int
) -> None:
    net = Network(seed=seed)
    for i in range(topo.n):
        net.add_node(name(i))
        net.host(name(i), BRANCH, flood=True)
    for d, a in topo.edges:
        net.add_link(name(d), name(a))
    subs = data.draw(st.lists(st.tuples(st.integers(0, topo.n - 1), patterns()), max_size=12))
    for i, p in subs:
        net.subscribe(name(i), p)
    settle(net)
    for node_id, node in net.nodes.items():
        for e in node.engine.interest():
            if pattern_covers(BRANCH, str(e["pattern"])):
                assert e["origin"] == node_id  # never advertised
    live = sorted(net.nodes)
    frames0 = net.stats.message_frames
    topics = {}
    sent = []
    for _ in range(data.draw(st.integers(1, 5))):
        src = data.draw(st.sampled_from(live))
        topic = draw_topic(data, net)
        msg = net.publish(src, topic)
        topics[msg] = topic
        sent.append((msg, net.expected_deliveries(src, topic)))
    settle(net)
    assert net.stats.loops_dropped == 0
    assert net.stats.message_frames - frames0 == sum(net.stats.crossings.values())
    for msg, _ in sent:
        frames = {way: n for (m, _ln, way), n in net.stats.crossings.items() if m == msg}
        if match(BRANCH, topics[msg]):  # every node has it; each link once each way at most
            assert {w.split(">")[1] for w in frames} | {msg[0]} == set(net.nodes)
            assert all(n == 1 for n in frames.values())
    for msg, expect in sent:
        got = Counter((d.node, d.subscriber) for d in net.deliveries if d.msg_id == msg)
        assert got == Counter(dict.fromkeys(expect, 1))
