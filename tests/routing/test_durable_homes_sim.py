"""Durable homes (zbroker/routing/durable_homes.py) on the simulator: every node learns
where a durable lives, and forgets it when the home is gone (issue 18, item 3)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.routing.durable_homes import DurableHomes, home_key, name_of
from zbroker.sim import Network

from .test_sim_properties import Topology, build, name, settle, topologies


def reachable(net: Network, start: str) -> set[str]:
    """The live nodes connected to ``start`` by live links."""
    seen, todo = {start}, [start]
    while todo:
        n = todo.pop()
        for link in net.links.values():
            ends = (link.dialer, link.acceptor)
            if not link.up or n not in ends:
                continue
            other = ends[1] if ends[0] == n else ends[0]
            if other not in seen and net.nodes[other].alive:
                seen.add(other)
                todo.append(other)
    return seen


def known(net: Network, durable: str) -> dict[str, list[str]]:
    """What every live node says of ``durable``: the other live nodes that hold it."""
    return {
        n: node.engine.durable_homes.elsewhere(durable, n)
        for n, node in net.nodes.items()
        if node.alive
    }


def test_home_keys_are_one_segment_and_reversible() -> None:
    assert home_key("orders.eu-1") == "$ZB.DURABLE.orders:eu-1"
    assert name_of(home_key("orders.eu-1")) == "orders.eu-1"
    assert name_of("$ZB.HOST.a.>") is None and name_of("DURABLE.x") is None
    homes = DurableHomes()
    homes.changed((home_key("d"), "A"), True)
    homes.changed((home_key("d"), "B"), True)
    assert homes.elsewhere("d", "A") == ["B"] and homes.elsewhere("x", "A") == []
    homes.changed((home_key("d"), "B"), False)
    homes.changed((home_key("d"), "B"), False)  # (twice: no error)
    assert homes.elsewhere("d", "B") == ["A"]
    homes.changed(("ORDERS.>", "A"), True)  # not a home key: ignored
    assert homes.homes == {"d": {"A"}}


@settings(max_examples=60, deadline=None)
@given(topo=topologies(max_nodes=12), data=st.data(), seed=st.integers(0, 10_000))
def test_every_connected_node_knows_the_home_and_forgets_it_when_it_dies(
    topo: Topology, data: st.DataObject, seed: int
) -> None:
    net, _links = build(topo, seed)
    home = name(data.draw(st.integers(0, topo.n - 1), label="home"))
    net.subscribe(home, home_key("orders.d"))  # what the durables feature holds
    settle(net)
    everyone = reachable(net, home)
    assert known(net, "orders.d") == {n: [] if n == home else [home] for n in everyone}
    assert known(net, "other") == {n: [] for n in everyone}
    # a node (maybe the home) dies: those cut off from the home forget it
    dead = name(data.draw(st.integers(0, topo.n - 1), label="dead"))
    net.remove_node(dead)
    settle(net)
    still = reachable(net, home) if dead != home else set()
    live = {n for n, node in net.nodes.items() if node.alive}
    assert known(net, "orders.d") == {n: [home] if n in still - {home} else [] for n in live}
