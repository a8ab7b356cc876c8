"""The node's status: the kernel's own figures, then each feature's section."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..const import PROTOCOL_VERSION
from ..process import gc_status, malloc_status

if TYPE_CHECKING:
    from .kernel import Node

__all__ = ["node_status"]


def node_status(node: Node) -> dict[str, Any]:
    c = node.counters
    sec = node.security
    patterns = sorted(node.engine.local_patterns)
    routes = node.engine.interest()
    now = time.monotonic()
    out: dict[str, Any] = {
        "broker_id": node.broker_id,
        "incarnation": node.incarnation,
        "group": node.config.group,
        "version": PROTOCOL_VERSION,
        "endpoints": node.endpoints,
        "uptime": round(time.time() - node.started_at, 3),
        "counters": {
            "received": c.received,
            "forwarded": c.forwarded,
            "delivered": c.delivered,
            "duplicates": node.pipeline.dedupe.duplicates,
            "bad_input": c.bad_input,
            "links_up": c.links_up,
            "links_down": c.links_down,
            "handshakes_refused": c.handshakes_refused,
            "handshakes_refused_duplicate_id": c.handshakes_refused_duplicate_id,
            "unrouted": c.unrouted,
            "auth_failures": sec.auth_failures if sec else 0,
            "shortcut": node.shortcut.taken,  # frames that went by the shortcut
        },
        "security": sec.status() if sec else {"enabled": False},
        "gc": gc_status(),
        "malloc": malloc_status(),
        "subscriptions": {"count": len(patterns), "patterns": patterns},
        "links": [link.describe(now) for link in node.links.all()],
        "store": node.store.stats() if node.store is not None else None,
        "interest": {
            "routes": len(routes),
            "remote": sum(1 for r in routes if r["link"] is not None),
            "origins": sorted({str(r["origin"]) for r in routes}),
            "entries": node.engine.entry_count(),
            "rejected": dict(sorted(node.engine.rejected.items())),
            "local_branches": list(node.engine.local_branches),  # never leave this node
            "host_branches": list(node.engine.host_branches),  # hosted here (rule 8)
            "flood_branches": list(node.engine.flood_branches),  # sent everywhere
        },
    }
    for f in node.features:
        f.status(out)
    # last: features count drops in status() too (none today), and the dict is a copy
    out["counters"]["dropped"] = dict(sorted(c.dropped.items()))
    return out
