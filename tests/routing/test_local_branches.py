"""Local branches on the simulator: topics of a node's local branch never leave it, and
its interest in them is never advertised, on random topologies whatever the other nodes
want; every other topic is routed as before, exactly once."""

from __future__ import annotations

from collections import Counter, deque

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.routing.test_sim_properties import Topology, live_links, name, settle, topologies
from zbroker.routing import LinkOptions
from zbroker.routing.branches import covers
from zbroker.sim import Network
from zbroker.topics import match

BRANCH = "c.>"
# patterns wholly inside the branch or wholly outside it (a wider pattern such as ">"
# would be advertised for its other topics: the known limitation shared with filters)
PATTERNS = ["c.>", "c.a", "c.*", "a.>", "a.b", "b.*"]
TOPICS = ["c.a", "c.b", "a.b", "b.a"]


def reach(net: Network, source: str, topic: str) -> set[str]:
    """Nodes a message on ``topic`` published at ``source`` reaches: none beyond the source
    if its local branch holds the topic; else every node it can reach without entering a
    node whose branch holds it (such a node neither advertises interest in the branch nor
    forwards it, so nothing is sent its way)."""

    def holds(n: str) -> bool:
        return any(match(b, topic) for b in net.nodes[n].engine.local_branches)

    nbrs: dict[str, list[str]] = {}
    for _, d, a in live_links(net):
        nbrs.setdefault(d, []).append(a)
        nbrs.setdefault(a, []).append(d)
    seen, todo = {source}, deque([] if holds(source) else [source])
    while todo:
        for m in nbrs.get(todo.popleft(), []):
            if m not in seen and not holds(m):
                seen.add(m)
                todo.append(m)
    return seen


@settings(max_examples=60, deadline=None)
@given(topologies(max_nodes=12), st.integers(0, 2**32 - 1), st.data())
def test_local_branches_never_leave_their_node(
    topo: Topology, seed: int, data: st.DataObject
) -> None:
    net = Network(seed=seed)
    local = data.draw(st.sets(st.integers(0, topo.n - 1)))
    for i in range(topo.n):
        net.add_node(name(i), (BRANCH,) if i in local else ())
    for d, a in topo.edges:
        net.add_link(name(d), name(a))
    for _ in range(data.draw(st.integers(1, 3 * topo.n))):
        net.subscribe(
            name(data.draw(st.integers(0, topo.n - 1))), data.draw(st.sampled_from(PATTERNS))
        )
    settle(net)
    for node in net.nodes.values():  # interest of the branch is never advertised by a holder
        for link in node.engine.links.values():
            if node.engine.local_branches:
                assert not [k for k in link.adj_out if covers((BRANCH,), k[0])]
    for _ in range(data.draw(st.integers(1, 6))):
        source = name(data.draw(st.integers(0, topo.n - 1)))
        topic = data.draw(st.sampled_from(TOPICS))
        net.deliveries.clear()
        net.stats.crossings.clear()
        msg_id = net.publish(source, topic)
        settle(net)
        got = Counter((d.node, d.subscriber) for d in net.deliveries if d.msg_id == msg_id)
        reachable = reach(net, source, topic)
        want = {
            (n, sid) for n in reachable for sid, p in net.nodes[n].subs.items() if match(p, topic)
        }
        assert set(got) == want and all(v == 1 for v in got.values())
        for _, _, direction in net.stats.crossings:
            sender = direction.split(">")[0]
            assert not any(match(b, topic) for b in net.nodes[sender].engine.local_branches)


def test_a_branch_overrides_static_patterns_and_filters() -> None:
    net = Network(seed=3)
    net.add_node("A", ("CACHE.>",))
    net.add_node("B")
    net.add_link("A", "B", options=LinkOptions(static=("CACHE.>", "ORD.>"), include=(">",)))
    net.subscribe("A", "CACHE.>")
    net.subscribe("B", "CACHE.>")
    net.subscribe("B", "ORD.>")
    settle(net)
    assert {(e["pattern"], e["origin"]) for e in net.nodes["B"].engine.interest()} == {
        ("CACHE.>", "B"),
        ("ORD.>", "B"),
    }  # A's interest in its branch was never advertised
    rows = {(e["pattern"], e["origin"]): e for e in net.nodes["A"].engine.interest()}
    assert rows["CACHE.>", "A"]["local_branch"] is True
    cache, order = net.publish("A", "CACHE.x"), net.publish("A", "ORD.x")
    settle(net)
    assert sorted((d.node, d.msg_id) for d in net.deliveries) == [("A", cache), ("B", order)]
    assert {mid for mid, _, _ in net.stats.crossings} == {order}
