"""Selectors travel with interest (engine rule 7), on the simulator: random connected
topologies, random subscriptions with random selectors (and some without), random
headers. After convergence every message reaches, exactly once, every subscriber whose
pattern matches and whose selector accepts it, nothing else; and it crosses exactly the
links of the shortest-path tree toward the nodes holding such a subscriber: no link where
no selector behind it accepts (ActiveMQ's conduit pitfall). Then churn (unsubscribes
that widen or narrow what a node wants) and the same again."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.routing.test_sim_properties import (
    Topology,
    build,
    live_links,
    name,
    patterns,
    settle,
    topologies,
)
from zbroker.routing import LocalSubscribe
from zbroker.routing.selection import Selective
from zbroker.sim import Network
from zbroker.topics import match

SELECTORS = [
    None,
    "r = 'a'",
    "r = 'b'",
    "q > 2",
    "r = 'a' AND q > 2",
    "r IS NULL",
    "NOT (r IN ('a', 'b'))",
]
headers = st.fixed_dictionaries(
    {}, optional={"r": st.sampled_from(["a", "b", "c"]), "q": st.integers(0, 5)}
)


def accepted_origins(net: Network, source: str, topic: str, h: dict[str, Any]) -> set[str]:
    return {n for n, _ in net.expected_deliveries(source, topic, h) if n != source}


def tree_frames(net: Network, source: str, origins: set[str]) -> set[tuple[str, str]]:
    """(link, direction) of the shortest-path tree from ``source`` to ``origins`` (next
    hop: the lowest (neighbour, link) one hop closer), from the topology alone."""
    nbrs: dict[str, list[tuple[str, str]]] = {}
    for ln, d, a in live_links(net):
        nbrs.setdefault(d, []).append((a, ln))
        nbrs.setdefault(a, []).append((d, ln))
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


def filtered(net: Network, topic: str, h: dict[str, Any]) -> list[int]:
    """Subscribers whose pattern matches but whose selector refuses (coverage)."""
    return [
        sid
        for node in net.nodes.values()
        for sid, p in node.subs.items()
        if match(p, topic) and sid in node.selectors and not node.selectors[sid](h)
    ]


def check_publishes(data: st.DataObject, net: Network, topo: Topology) -> None:
    held = sorted({p for node in net.nodes.values() for p in node.refs})
    for _ in range(data.draw(st.integers(1, 6))):
        source = name(data.draw(st.integers(0, topo.n - 1)))
        topic = data.draw(st.sampled_from(held)).replace("*", "a").replace(">", "b.a")
        h = data.draw(headers)
        net.deliveries.clear()
        net.stats.crossings.clear()
        msg_id = net.publish(source, topic, h)
        settle(net)
        got = Counter((d.node, d.subscriber) for d in net.deliveries if d.msg_id == msg_id)
        want = net.expected_deliveries(source, topic, h)
        assert set(got) == want, (source, topic, h)
        assert all(n == 1 for n in got.values()), "a subscriber got a message twice"
        frames = Counter((ln, d) for (mid, ln, d) in net.stats.crossings if mid == msg_id)
        assert all(n == 1 for n in frames.values())
        assert set(frames) == tree_frames(net, source, accepted_origins(net, source, topic, h))
        event(f"filtered: {bool(filtered(net, topic, h))}, delivered: {bool(got)}")


@settings(max_examples=60, deadline=None)
@given(topologies(max_nodes=12), st.integers(0, 2**32 - 1), st.data())
def test_selected_messages_reach_exactly_whom_they_should(
    topo: Topology, seed: int, data: st.DataObject
) -> None:
    net, _ = build(topo, seed)
    subs: list[tuple[str, int]] = []
    for _ in range(data.draw(st.integers(1, 3 * topo.n))):
        node = name(data.draw(st.integers(0, topo.n - 1)))
        sel = data.draw(st.sampled_from(SELECTORS))
        subs.append((node, net.subscribe(node, data.draw(patterns()), sel)))
    settle(net)
    check_publishes(data, net, topo)
    # churn: some subscriptions go (a node's selectors widen, narrow or vanish)
    for node, sid in data.draw(st.lists(st.sampled_from(subs), unique=True, max_size=len(subs))):
        net.unsubscribe(node, sid)
    settle(net)
    if any(node.refs for node in net.nodes.values()):
        check_publishes(data, net, topo)


def test_the_conduit_pitfall_does_not_happen() -> None:
    """The seed's figure: A - B, B - C (region us), B - D (region emea). A message for us
    crosses A>B and B>C only; one for nobody does not leave A."""
    net = Network(seed=1)
    for n in "ABCD":
        net.add_node(n)
    for a, b in (("A", "B"), ("B", "C"), ("B", "D")):
        net.add_link(a, b)
    net.subscribe("C", "Q.>", "region = 'us'")
    net.subscribe("D", "Q.>", "region = 'emea'")
    settle(net)
    (entry,) = [e for e in net.nodes["A"].engine.interest() if e["origin"] == "C"]
    assert entry["selectors"] == ["(region = 'us')"]
    us = net.publish("A", "Q.x", {"region": "us"})
    nobody = net.publish("A", "Q.x", {"region": "apac"})
    missing = net.publish("A", "Q.x")
    settle(net)
    crossed = Counter((mid, d) for (mid, _, d) in net.stats.crossings)
    assert crossed == {(us, "A>B"): 1, (us, "B>C"): 1}
    assert [(d.node, d.msg_id) for d in net.deliveries] == [("C", us)]
    assert {nobody, missing}.isdisjoint(mid for mid, _ in crossed)  # neither left A


def test_a_plain_subscriber_widens_and_its_departure_narrows_again() -> None:
    net = Network(seed=2)
    for n in "AB":
        net.add_node(n)
    net.add_link("A", "B")
    net.subscribe("B", "T", "q > 2")
    plain = net.subscribe("B", "T")
    settle(net)
    assert "selectors" not in net.nodes["A"].engine.interest()[0]
    plans = net.nodes["A"].engine.route("T", (), None)
    assert type(plans[1]) is list  # nobody selected: a plain list, no per-message work
    net.unsubscribe("B", plain)
    settle(net)
    assert net.nodes["A"].engine.interest()[0]["selectors"] == ["(q > 2)"]
    sends = net.nodes["A"].engine.route("T", (), None)[1]
    assert isinstance(sends, Selective)
    assert sends.pick({"q": 3}) == [("A-B", ("B",), 1)] and sends.pick({"q": 1}) == []
    # the same selectors said again change nothing: no advertisement
    before = net.stats.advert_frames
    net.nodes["B"].engine.handle(LocalSubscribe(pattern="T", selectors=frozenset({"(q > 2)"})))
    assert net.nodes["B"].engine.flush() == []
    assert net.stats.advert_frames == before
