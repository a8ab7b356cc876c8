"""Sticky routes that survive outages: the durable-backed interest a link taught is kept
with its queue, so a restarted node rebuilds those routes (as ghosts of the links that
are down) before any link is up, and what an upstream node resends to it is queued toward
the subscriber instead of being routed nowhere. A ghost down longer than ``sticky_ttl``
is withdrawn and its queued messages dropped (counted).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgpack

from ...routing import LinkDown, LinkOptions

if TYPE_CHECKING:
    from ...links.state import Link
    from ...node.context import Context
    from .queues import Forwarder

__all__ = ["expire_sticky_routes", "restore_sticky_routes", "save_sticky_routes"]

log = logging.getLogger("zbroker.node")


def save_sticky_routes(ctx: Context, fw: Forwarder, link: Link) -> None:
    """Keep what restores this link's sticky routes after a restart of this node."""
    entries = ctx.engine.sticky_entries(link.engine_id)
    o = link.options
    meta = msgpack.packb(
        {
            "can_send": link.can_send,
            "ttl": o.ttl,
            "include": list(o.include),
            "exclude": list(o.exclude),
            "static": list(o.static),
            "sticky": [[p, org, list(path)] for p, org, path in entries],
        }
    )
    fw.set_meta(link.engine_id, meta)


def restore_sticky_routes(ctx: Context, fw: Forwarder, now: float) -> None:
    for q in list(fw.by_engine.values()):
        if not q.meta:
            continue
        try:
            meta = msgpack.unpackb(q.meta, raw=False)
            options = LinkOptions(
                ttl=meta["ttl"],
                include=tuple(meta["include"]),
                exclude=tuple(meta["exclude"]),
                static=tuple(meta["static"]),
            )
            entries = [(p, o, tuple(path)) for p, o, path in meta["sticky"]]
        except (ValueError, KeyError, TypeError, msgpack.UnpackException):
            log.warning("link queue %s: unreadable sticky routes, not restored", q.qkey)
            continue
        ctx.engine.restore_ghost(
            q.engine_id, q.peer, entries, can_send=bool(meta["can_send"]), options=options
        )
        q.down_since = now


def expire_sticky_routes(ctx: Context, fw: Forwarder, now: float) -> None:
    """Sticky routes over a link down longer than ``sticky_ttl`` are withdrawn, and the
    persistent messages queued for it dropped (counted)."""
    ttl = ctx.config.sticky_ttl
    for link_id in ctx.engine.ghosts():
        q = fw.by_engine.get(link_id)
        if q is not None and (q.up or now - q.down_since <= ttl):
            continue
        ctx.engine.handle(LinkDown(link=link_id))
        ctx.drop("sticky_route_expired")
        if q is not None:
            n = fw.drop_queue(link_id)
            if n:
                ctx.drop("forward_expired", n)
        log.warning("sticky routes over link %s expired after %g s down", link_id, ttl)
