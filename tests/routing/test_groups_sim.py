"""Queue groups on the simulator: random connected topologies up to 30 nodes, random
members, link and member churn. After convergence every message reaches exactly one member
node of each group it matches (none when no member is reachable), by a path that never
revisits a node, and ``local_first`` keeps it on the publisher's node when that node has a
member (else on a nearest one). Under churn a message reaches at most one member node per
group, and only a node that has a member."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.routing.test_sim_properties import GAPS, MAX_EVENTS, Topology, name, topologies
from zbroker.features.queues.spill import pick as spill_pick
from zbroker.routing.groups import POLICIES, group_key, split_key
from zbroker.simqueues import QueueNetwork
from zbroker.topics import match

GROUPS = ["g1", "g2"]
PATTERNS = ["a.>", "a.b", "*.b", ">"]
TOPICS = ["a.b", "a.c", "c.b", "a.b.c"]


def settle(net: QueueNetwork) -> None:
    net.run(max_events=MAX_EVENTS)
    assert not net._queue, "did not converge"


def build(topo: Topology, seed: int) -> QueueNetwork:
    net = QueueNetwork(seed=seed)
    for i in range(topo.n):
        net.add_node(name(i))
    for d, a in topo.edges:
        net.add_link(name(d), name(a))
    return net


def member_nodes(net: QueueNetwork, gkey: str) -> set[str]:
    return {n for n in net.nodes if net.members(n, gkey) > 0}


def check_converged(net: QueueNetwork, sent: list[tuple[str, str, tuple[str, int, int]]]) -> None:
    """Exactly one member node per matching group per message; local_first honoured."""
    gkeys = {p for node in net.nodes.values() if node.alive for p in node.refs}
    for src, topic, msg_id in sent:
        dist = net.distances(src)
        got = Counter(d.gkey for d in net.group_deliveries if d.msg_id == msg_id)
        for gkey in gkeys:
            parts = split_key(gkey)
            assert parts is not None
            reachable = {n for n in member_nodes(net, gkey) if n in dist}
            want = 1 if reachable and match(parts[1], topic) else 0
            assert got[gkey] == want, (src, topic, gkey, reachable)
            if want:
                (d,) = [d for d in net.group_deliveries if d.msg_id == msg_id and d.gkey == gkey]
                assert d.had_member and d.node in reachable
                assert len(set(d.path)) == len(d.path) and d.node not in d.path
                if src in reachable:  # local_first (the default): the publisher's node
                    assert d.node == src
                else:  # else a nearest member node, by a shortest path
                    assert dist[d.node] == min(dist[n] for n in reachable) == len(d.path)
        assert set(got) <= gkeys


@settings(max_examples=40, deadline=None)
@given(topo=topologies(), data=st.data(), seed=st.integers(0, 2**16))
def test_one_member_node_per_group_converged(
    topo: Topology, data: st.DataObject, seed: int
) -> None:
    net = build(topo, seed)
    for _ in range(data.draw(st.integers(1, 8), label="members")):
        node = name(data.draw(st.integers(0, topo.n - 1)))
        net.join(node, data.draw(st.sampled_from(GROUPS)), data.draw(st.sampled_from(PATTERNS)))
    settle(net)
    sent = []
    for _ in range(data.draw(st.integers(1, 8), label="messages")):
        src = name(data.draw(st.integers(0, topo.n - 1)))
        topic = data.draw(st.sampled_from(TOPICS))
        sent.append((src, topic, net.publish(src, topic)))
    settle(net)
    check_converged(net, sent)
    assert net.group_lost == Counter() and net.repicked == 0


@settings(max_examples=40, deadline=None)
@given(topo=topologies(max_nodes=15), data=st.data(), seed=st.integers(0, 2**16))
def test_churn_at_most_one_and_only_to_members(
    topo: Topology, data: st.DataObject, seed: int
) -> None:
    net = build(topo, seed)
    # (round_robin sends messages away from a publisher that has a member, so a leave on
    # the way sends some back to it: the one way a node is on a path twice)
    net.set_policy(GROUPS[0], data.draw(st.sampled_from(POLICIES), label="policy"))
    held: list[tuple[str, int]] = []
    sent = []
    links = sorted(net.links)
    for _ in range(data.draw(st.integers(5, 40), label="events")):
        kind = data.draw(st.sampled_from(["join", "leave", "cut", "restore", "pub", "pub"]))
        node = name(data.draw(st.integers(0, topo.n - 1)))
        if kind == "join":
            g, p = data.draw(st.sampled_from(GROUPS)), data.draw(st.sampled_from(PATTERNS))
            held.append((node, net.join(node, g, p)))
        elif kind == "leave" and held:
            net.leave(*held.pop(data.draw(st.integers(0, len(held) - 1))))
        elif kind in ("cut", "restore"):
            net.set_link(data.draw(st.sampled_from(links)), kind == "restore")
        else:
            topic = data.draw(st.sampled_from(TOPICS))
            sent.append((node, topic, net.publish(node, topic)))
        net.run(until=net.now + data.draw(st.sampled_from(GAPS)), max_events=MAX_EVENTS)
    settle(net)
    per = Counter((d.msg_id, d.gkey) for d in net.group_deliveries)
    assert all(n == 1 for n in per.values())  # never doubled
    assert all(d.had_member for d in net.group_deliveries)  # only where a member is
    # a node at most twice on a path (back to where it came from when no member was left
    # off its path), never more: every path is bounded
    assert all(max(Counter((*d.path, d.node)).values()) <= 2 for d in net.group_deliveries)
    # once converged again, every message is placed exactly as the rule says
    net.set_policy(GROUPS[0], "local_first")  # (the rule check_converged checks)
    for ln in links:
        net.set_link(ln, True)
    settle(net)
    net.group_deliveries.clear()
    after = []
    for src in sorted(net.nodes)[:5]:
        for topic in TOPICS:
            after.append((src, topic, net.publish(src, topic)))
    settle(net)
    check_converged(net, after)


def test_round_robin_over_members_is_exact() -> None:
    """A chain N0-N1-N2-N3; members on N0 (1), N2 (1), N3 (1); round_robin from N1 gives
    each member node exactly a third; local_first from N1 the nearest pair a half each."""
    net = QueueNetwork(seed=1)
    for i in range(4):
        net.add_node(name(i))
    for i in range(3):
        net.add_link(name(i), name(i + 1))
    for n in (0, 2, 3):
        net.join(name(n), "w", "jobs.>")
    settle(net)
    net.set_policy("w", "round_robin")
    for _ in range(300):
        net.publish(name(1), "jobs.x")
    settle(net)
    assert Counter(d.node for d in net.group_deliveries) == {"N00": 100, "N02": 100, "N03": 100}
    net.group_deliveries.clear()
    net.set_policy("w", "local_first")
    for _ in range(300):
        net.publish(name(1), "jobs.x")
    settle(net)
    assert Counter(d.node for d in net.group_deliveries) == {"N00": 150, "N02": 150}


def test_weighted_and_member_counts_follow_capacity() -> None:
    net = QueueNetwork(seed=2)
    for n in ("A", "B", "C"):
        net.add_node(n)
    net.add_link("A", "B")
    net.add_link("A", "C")
    net.join("B", "w", "jobs.>")
    net.join("C", "w", "jobs.>")
    settle(net)
    groups = net.nodes["A"].engine.groups
    gkey = group_key("w", "jobs.>")
    groups.set_capacity(gkey, "B", (1, 1, 30))  # 1 member, 30 free credit
    groups.set_capacity(gkey, "C", (1, 3, 10))  # 3 members, 10 free credit
    assert not groups.set_capacity(gkey, "C", (1, 9, 9))  # not newer: ignored
    net.set_policy("w", "weighted")
    for _ in range(400):
        net.publish("A", "jobs.x")
    settle(net)
    assert Counter(d.node for d in net.group_deliveries) == {"B": 300, "C": 100}
    net.group_deliveries.clear()
    net.set_policy("w", "round_robin")
    for _ in range(400):
        net.publish("A", "jobs.x")
    settle(net)
    assert Counter(d.node for d in net.group_deliveries) == {"B": 100, "C": 300}


def test_member_gone_in_flight_is_picked_again_never_revisiting() -> None:
    """A message on its way to a node whose last member left is re-picked at that node
    among members not on its path."""
    net = QueueNetwork(seed=3, delay=(0.01, 0.01))
    for n in ("A", "B", "C"):
        net.add_node(n)
    net.add_link("A", "B")
    net.add_link("B", "C")
    mb = net.join("B", "w", "jobs.>")
    net.join("C", "w", "jobs.>")
    settle(net)
    msg = net.publish("A", "jobs.x")  # local_first: the nearest, B
    net.leave("B", mb)  # before it arrives
    settle(net)
    (d,) = [d for d in net.group_deliveries if d.msg_id == msg]
    assert d.node == "C" and d.had_member and d.path == ("A", "B")
    assert net.repicked == 1


@pytest.mark.parametrize("relays", [(), ("C",), ("C", "D")])
def test_member_gone_in_flight_goes_back_when_none_is_left_off_its_path(
    relays: tuple[str, ...],
) -> None:
    """Members on A and B (a chain A-relays-B), round_robin from A: every other message
    goes to B. B's member leaves before they arrive: with no member off their path they
    go back to A, which is on it (they used to be dropped), each delivered once."""
    net = QueueNetwork(seed=4, delay=(0.01, 0.01))
    chain = ("A", *relays, "B")
    for n in chain:
        net.add_node(n)
    for x, y in itertools.pairwise(chain):
        net.add_link(x, y)
    net.join("A", "w", "jobs.>")
    mb = net.join("B", "w", "jobs.>")
    settle(net)
    net.set_policy("w", "round_robin")
    msgs = [net.publish("A", "jobs.x") for _ in range(4)]
    net.leave("B", mb)  # before they arrive
    settle(net)
    assert sorted(d.msg_id for d in net.group_deliveries) == sorted(msgs)
    assert {d.node for d in net.group_deliveries} == {"A"}
    # out along the chain until a node that knew B's member had gone, then back to A
    # (B's withdrawal may overtake them on a longer chain)
    backs = [(*chain[: k + 1], *reversed(chain[1:k])) for k in range(1, len(chain))]
    paths = sorted(d.path for d in net.group_deliveries)
    assert paths[:2] == [(), ()] and all(p in backs for p in paths[2:]), paths
    assert net.repicked == 2 and net.group_lost == Counter()


def test_a_local_branch_keeps_its_topics_from_other_nodes_members() -> None:
    """C-A-B, A keeps ``CACHE.>``: a topic of it picked on A, or stepped on A, goes to a
    member on A only, and is lost on A with none there (counted), never sent on. Nor does
    A spill it to a node with room."""
    net = QueueNetwork(seed=5)
    net.add_node("A", local_branches=("CACHE.>",))
    for n in ("B", "C"):
        net.add_node(n)
        net.add_link(n, "A")
    net.join("B", "w", ">")
    settle(net)
    net.publish("A", "CACHE.k")  # kept on A, with no member there
    net.publish("C", "CACHE.k")  # C's pick of B stops on A
    net.publish("A", "JOBS.k")  # (other topics go)
    settle(net)
    assert [(d.node, d.topic) for d in net.group_deliveries] == [("B", "JOBS.k")]
    assert net.group_lost == Counter({"unroutable": 2})
    net.group_deliveries.clear()
    net.join("A", "w", ">")
    settle(net)
    net.set_policy("w", "round_robin")
    for _ in range(4):
        net.publish("A", "CACHE.k")
        net.publish("C", "CACHE.k")  # (C's turns to B picked again on A, for A's member)
    settle(net)
    assert Counter(d.node for d in net.group_deliveries) == {"A": 8}
    assert net.repicked == 2 and net.group_lost == Counter({"unroutable": 2})
    groups, gkey = net.nodes["A"].engine.groups, group_key("w", ">")
    assert spill_pick(groups, gkey, "CACHE.k", {"B": 5}, "A") is None
    assert spill_pick(groups, gkey, "JOBS.k", {"B": 5}, "A") == "B"
