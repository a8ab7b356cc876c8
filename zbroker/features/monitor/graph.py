"""The network as this node sees it, for the map page (``/api/graph``).

Nodes: this one, every peer of a link, every peer discovery knows, and every broker on
the path of a route in the routing table. Links: every link of this node (with its state,
totals and message rates). Edges, what the map draws: one per peer of a link (of several
links to one peer, one that is up), and each hop of a route's path (state ``route``: a
link between two other nodes, known from the advertisements). Built from a snapshot in
the HTTP thread, once per snapshot.
"""

from __future__ import annotations

import itertools
from typing import Any

from .snapshot import Snapshot, link_key

__all__ = ["graph"]


def graph(snap: Snapshot) -> dict[str, Any]:
    cached = snap.cache.get("graph")
    if cached is None:
        cached = snap.cache["graph"] = _build(snap)
    return cached


def _build(snap: Snapshot) -> dict[str, Any]:
    status: dict[str, Any] = snap.doc("status")
    me = status["broker_id"]
    nodes: dict[str, dict[str, Any]] = {me: {"id": me, "self": True, "hops": 0}}
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    links: list[dict[str, Any]] = []

    def node(name: str, hops: int) -> None:
        n = nodes.setdefault(name, {"id": name, "self": False, "hops": hops})
        n["hops"] = min(n["hops"], hops)

    for link in status.get("links", []):
        peer = link["peer"] or f"?{link['name']}"  # never connected: its peer is unknown
        node(peer, 1)
        key = link_key(link["name"], link["peer"], link["kind"])
        totals = snap.link_totals.get(key, (0, 0, 0, 0, 0))
        rate_in, rate_out = snap.link_rates.get(key, (0.0, 0.0))
        edge = {
            "a": me,
            "b": peer,
            "link": link["name"],
            "peer": link["peer"] or "",
            "state": link["state"],
            "kind": link["kind"],
            "direction": link["direction"],
            "msgs_in": totals[0],
            "msgs_out": totals[1],
            "drops": totals[4],
            "rate_in": rate_in,
            "rate_out": rate_out,
        }
        links.append(edge)
        pair = (me, peer)
        # several links to one peer: one line, of the one that is up
        if pair not in edges or edges[pair]["state"] != "up":
            edges[pair] = edge
    for peer in snap.doc("peers"):
        node(peer["id"], 1)
    for route in snap.doc("routes"):
        _route(route, me, node, edges)
    return {
        "broker_id": me,
        "taken": snap.wall,
        "nodes": sorted(nodes.values(), key=lambda n: (n["hops"], n["id"])),
        "links": links,
        "edges": list(edges.values()),
    }


def _route(route: dict[str, Any], me: str, node: Any, edges: dict[Any, Any]) -> None:
    """A route's path (origin first, the neighbor last) as hops between brokers."""
    path = [str(p) for p in route.get("path", [])]
    if route.get("link") is None or not path:
        return
    if path[-1] == route.get("origin") and path[0] != route.get("origin"):
        path.reverse()
    chain = [*path, me]
    for i, name in enumerate(chain[:-1]):
        node(name, len(chain) - 1 - i)
    for a, b in itertools.pairwise(chain):
        if a == b or (a, b) in edges or (b, a) in edges:
            continue
        edges[(a, b)] = {"a": a, "b": b, "link": None, "state": "route"}
