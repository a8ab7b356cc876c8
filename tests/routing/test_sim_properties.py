"""Property tests: random connected topologies, subscriptions and link churn on the
simulator; after convergence every message takes the shortest-path tree exactly once."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.sim import Network
from zbroker.topics import match

MsgId = tuple[str, int, int]
SEGS = ["a", "b"]
# virtual seconds to let pass between two churn events: 0 (back to back, e.g. a link cut
# and restored while its old frames are in flight) up to past the longest frame delay
GAPS = [0.0, 0.0005, 0.001, 0.003, 0.006]

# far more events than any example needs to converge: a routing change that makes adverts
# oscillate fails here instead of running until the test times out
MAX_EVENTS = 500_000


def settle(net: Network) -> None:
    """Run to convergence: no frame left in flight."""
    net.run(max_events=MAX_EVENTS)
    assert not net._queue, "did not converge"


def name(i: int) -> str:
    return f"N{i:02d}"


@st.composite
def patterns(draw: st.DrawFn) -> str:
    segs = draw(st.lists(st.sampled_from([*SEGS, "*"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        segs = [*segs[:2], ">"]
    return ".".join(segs)


topics = st.lists(st.sampled_from(SEGS), min_size=1, max_size=4).map(".".join)


def draw_topic(data: st.DataObject, net: Network) -> str:
    """Mostly a topic some live subscription matches (wildcards filled at random)."""
    held = sorted({p for node in net.nodes.values() if node.alive for p in node.refs})
    if not held or data.draw(st.integers(0, 3)) == 0:
        return data.draw(topics)
    segs: list[str] = []
    for seg in data.draw(st.sampled_from(held)).split("."):
        if seg == "*":
            segs.append(data.draw(st.sampled_from(SEGS)))
        elif seg == ">":
            segs.extend(data.draw(st.lists(st.sampled_from(SEGS), min_size=1, max_size=2)))
        else:
            segs.append(seg)
    return ".".join(segs)


@dataclass
class Topology:
    n: int
    edges: list[tuple[int, int]]  # (dialer, acceptor), unique unordered pairs


@st.composite
def topologies(draw: st.DrawFn, max_nodes: int = 30) -> Topology:
    n = draw(st.integers(min_value=2, max_value=max_nodes))
    pairs: set[frozenset[int]] = set()
    edges: list[tuple[int, int]] = []

    def add(i: int, j: int) -> None:
        if i != j and frozenset((i, j)) not in pairs:
            pairs.add(frozenset((i, j)))
            edges.append((i, j) if draw(st.booleans()) else (j, i))

    for i in range(1, n):  # a random spanning tree
        add(i, draw(st.integers(min_value=0, max_value=i - 1)))
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=n))
    for i, j in extra:
        add(i, j)
    return Topology(n, edges)


def build(topo: Topology, seed: int) -> tuple[Network, list[str]]:
    net = Network(seed=seed)
    for i in range(topo.n):
        net.add_node(name(i))
    links = [net.add_link(name(d), name(a)) for d, a in topo.edges]
    return net, links


def live_links(net: Network) -> list[tuple[str, str, str]]:
    """(name, end, end) of every usable duplex link."""
    return [
        (ln, link.dialer, link.acceptor)
        for ln, link in net.links.items()
        if link.up and net.nodes[link.dialer].alive and net.nodes[link.acceptor].alive
    ]


def expected_frames(net: Network, source: str, topic: str) -> set[tuple[str, str]]:
    """The (link, direction) pairs of the shortest-path tree from ``source`` to every node
    with a matching subscriber, each next hop the lowest (neighbour, link) among those one
    hop closer: the routing rules, computed from the topology alone."""
    nbrs: dict[str, list[tuple[str, str]]] = {}
    for ln, d, a in live_links(net):
        nbrs.setdefault(d, []).append((a, ln))
        nbrs.setdefault(a, []).append((d, ln))
    reach = net.distances(source)
    origins = {n for n in reach if n != source and any(match(p, topic) for p in net.nodes[n].refs)}
    out: set[tuple[str, str]] = set()
    for origin in origins:
        to_origin = net.distances(origin)
        at = source
        while at != origin:
            nxt, ln = min(
                (peer, ln) for peer, ln in nbrs[at] if to_origin.get(peer, -1) == to_origin[at] - 1
            )
            out.add((ln, f"{at}>{nxt}"))
            at = nxt
    return out


def assert_converged_tables(net: Network) -> None:
    """Each node's best entries are exactly the live subscriptions it can reach, each by a
    shortest path, and no link holds anything else."""
    for node_id, node in net.nodes.items():
        if not node.alive:
            continue
        dist = net.distances(node_id)
        want = {(p, o): dist[o] for o in dist for p in net.nodes[o].refs}
        have = {(str(e["pattern"]), str(e["origin"])): e["hops"] for e in node.engine.interest()}
        assert have == want, node_id
        for e in node.engine.interest():
            path = e["path"]
            assert isinstance(path, list)
            assert all(net.nodes[p].alive for p in path)
        assert node.engine.local_patterns == frozenset(node.refs)


def publish_and_check(net: Network, data: st.DataObject, live: list[str]) -> None:
    """Publish a few topics from random nodes after convergence and check every message."""
    settle(net)
    assert_converged_tables(net)
    n = data.draw(st.integers(1, 6), label="messages")
    rounds = [(data.draw(st.integers(0, len(live) - 1)), draw_topic(data, net)) for _ in range(n)]
    frames0 = net.stats.message_frames
    dup0, loops0 = net.stats.duplicates_dropped, net.stats.loops_dropped
    sent: list[tuple[str, str, MsgId, set[tuple[str, int]], set[tuple[str, str]]]] = []
    for idx, topic in rounds:
        src = live[idx % len(live)]
        expect = net.expected_deliveries(src, topic)
        frames = expected_frames(net, src, topic)
        sent.append((src, topic, net.publish(src, topic), expect, frames))
    settle(net)
    assert net.stats.duplicates_dropped == dup0
    assert net.stats.loops_dropped == loops0
    total = 0
    for src, topic, msg_id, expect, frames in sent:
        got = Counter((d.node, d.subscriber) for d in net.deliveries if d.msg_id == msg_id)
        # every expected subscriber exactly once, nobody else
        assert got == Counter(dict.fromkeys(expect, 1)), (src, topic)
        dist = net.distances(src)
        for d in net.deliveries:
            if d.msg_id == msg_id:
                assert d.hops == dist[d.node] == len(d.path)
                assert match(d.pattern, topic)
        crossings = {(ln, way): n for (m, ln, way), n in net.stats.crossings.items() if m == msg_id}
        # no crossing twice, and every crossing is justified at its destination
        assert all(n == 1 for n in crossings.values())
        for _ln, way in crossings:
            dst = way.split(">")[1]
            engine = net.nodes[dst].engine
            assert engine.local_matches(topic) or any(
                match(str(e["pattern"]), topic) and e["origin"] != dst for e in engine.interest()
            ), (src, topic, way)
        # and they are exactly the edges of the shortest-path tree
        assert set(crossings) == frames, (src, topic)
        total += len(crossings)
    assert net.stats.message_frames - frames0 == total


def assert_all_empty(net: Network) -> None:
    for node in net.nodes.values():
        if node.alive:
            assert node.engine.interest() == []
            assert node.engine.entry_count() == 0
    assert net.interest_entries() == 0


# -- properties -----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    topo=topologies(),
    seed=st.integers(0, 2**16),
    subs=st.lists(st.tuples(st.integers(0, 29), patterns()), min_size=3, max_size=20),
    flaps=st.lists(
        st.tuples(st.integers(0, 10**6), st.booleans(), st.sampled_from(GAPS)), max_size=12
    ),
    data=st.data(),
)
def test_property_shortest_path_tree_exactly_once(
    topo: Topology,
    seed: int,
    subs: list[tuple[int, str]],
    flaps: list[tuple[int, bool, float]],
    data: st.DataObject,
) -> None:
    net, links = build(topo, seed)
    sids = [(name(i % topo.n), net.subscribe(name(i % topo.n), p)) for i, p in subs]
    settle(net)
    # link failures and recoveries, each before the previous one has converged;
    # expectations come from whatever topology remains
    for k, up, gap in flaps:
        net.set_link(links[k % len(links)], up)
        net.run(until=net.now + gap, max_events=MAX_EVENTS)
    live = [name(i) for i in range(topo.n)]
    publish_and_check(net, data, live)
    # everything leaves: no interest anywhere
    for node_id, sid in sids:
        net.unsubscribe(node_id, sid)
    settle(net)
    assert_all_empty(net)


@settings(max_examples=40, deadline=None)
@given(
    topo=topologies(max_nodes=16),
    seed=st.integers(0, 2**16),
    subs=st.lists(st.tuples(st.integers(0, 15), patterns()), min_size=1, max_size=8),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("sub"), st.integers(0, 15), patterns()),
            st.tuples(st.just("sub"), st.integers(0, 15), patterns()),
            st.tuples(st.just("unsub"), st.integers(0, 10**6), st.just("")),
            st.tuples(st.just("flap"), st.integers(0, 10**6), st.just("")),
            st.tuples(st.just("restart"), st.integers(0, 15), st.just("")),
            st.tuples(st.just("bounce"), st.integers(0, 10**6), st.just("")),
        ),
        min_size=1,
        max_size=30,
    ),
    gaps=st.lists(st.sampled_from(GAPS), min_size=30, max_size=30),
    data=st.data(),
)
def test_property_churn_before_convergence(
    topo: Topology,
    seed: int,
    subs: list[tuple[int, str]],
    ops: list[tuple[str, int, str]],
    gaps: list[float],
    data: st.DataObject,
) -> None:
    net, links = build(topo, seed)
    # subscribers arrive while the links are still exchanging their first tables
    sids = [(name(i % topo.n), net.subscribe(name(i % topo.n), p)) for i, p in subs]
    for (op, k, pattern), gap in zip(ops, gaps, strict=False):
        if op == "sub":
            node = name(k % topo.n)
            sids.append((node, net.subscribe(node, pattern)))
        elif op == "unsub" and sids:
            net.unsubscribe(*sids.pop(k % len(sids)))
        elif op == "flap":
            ln = links[k % len(links)]
            net.set_link(ln, not net.links[ln].up)
        elif op == "bounce":  # cut and restored at once: a new session on the same link
            ln = links[k % len(links)]
            net.set_link(ln, False)
            net.set_link(ln, True)
        elif op == "restart":
            node = name(k % topo.n)
            net.remove_node(node)
            if k % 2:  # sometimes back at once, with its old frames still in flight
                net.run(until=net.now + 0.006, max_events=MAX_EVENTS)
            net.add_node(node)
            sids = [s for s in sids if s[0] != node]  # its subscribers died with it
        if gap:
            net.run(until=net.now + gap, max_events=MAX_EVENTS)
    live = [name(i) for i in range(topo.n)]
    publish_and_check(net, data, live)
    for node_id, sid in sids:
        net.unsubscribe(node_id, sid)
    settle(net)
    assert_all_empty(net)
