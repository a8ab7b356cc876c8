"""Every peer a node knows, how it was found (mdns, config, inbound), and its best link
state: the answer to PEERS (``zbroker peers``)."""

from __future__ import annotations

from typing import Any

from ...links.state import Link, LinkKind, LinkState

__all__ = ["describe_peers"]

_ORDER = {
    LinkState.UP: 0,
    LinkState.HANDSHAKING: 1,
    LinkState.WAITING: 2,
    LinkState.REFUSED: 3,
    LinkState.FAILED: 4,
}
_HOW = {LinkKind.STATIC: "config", LinkKind.DISCOVERED: "mdns", LinkKind.ACCEPTED: "inbound"}


def describe_peers(
    discovered: dict[str, dict[str, Any]], links: list[Link]
) -> list[dict[str, Any]]:
    peers: dict[str, dict[str, Any]] = {}

    def entry(pid: str) -> dict[str, Any]:
        return peers.setdefault(
            pid, {"id": pid, "found_by": [], "state": "discovered", "endpoint": None, "links": []}
        )

    for pid, rec in discovered.items():
        e = entry(pid)
        e["found_by"].append("mdns")
        e["endpoint"] = rec["endpoints"][0]
    for link in links:
        if not link.peer:
            continue
        e = entry(link.peer)
        how = _HOW[link.kind]
        if how not in e["found_by"]:
            e["found_by"].append(how)
        e["links"].append(link.name)
        if link.config is not None and e["endpoint"] is None:
            e["endpoint"] = link.config.uri
        current = e["state"]
        if current == "discovered" or _ORDER[link.state] < _ORDER.get(LinkState(current), 9):
            e["state"] = link.state.value
    for e in peers.values():
        e["found_by"].sort()
    return sorted(peers.values(), key=lambda e: e["id"])
