"""What the named scenarios on the network simulator (``tests/routing/test_sim_scenarios.py``,
``tests/routing/test_sim_churn.py``) share: a network built from node and link names, the
exact counts read off it (deliveries per subscriber, hops, message frames per link and
direction) and the check that every node's table is consistent with the live network."""

from __future__ import annotations

from collections import Counter
from typing import cast

from zbroker.sim import Network

MsgId = tuple[str, int, int]


def network(nodes: str, links: list[tuple[str, str]], seed: int = 1) -> Network:
    """A settled network of ``nodes`` (one letter each) and ``links`` (dialer, acceptor)."""
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
        path = [str(p) for p in cast(list[object], e["path"])]
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
