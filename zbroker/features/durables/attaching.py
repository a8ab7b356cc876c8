"""Who may consume a durable: attaching a client as its exclusive consumer, or as one of
its shared consumers (no silent takeover: a live holder is never displaced)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from ... import wire
from ...node import Request
from ...node.context import Context
from .shared import SharedState
from .state import Durable

__all__ = ["alive", "attach"]


def alive(ctx: Context, ident: bytes) -> bool:
    """Is a consumer's connection still there (a PING it ignores: the ROUTER refuses it
    at once when the connection is gone)?"""
    frame = wire.encode_control(wire.PING, 0, {"incarnation": ctx.incarnation})
    try:
        return ctx.send_to(ident, frame)
    except zmq.Again:
        return True  # its queue is full: there, and slow


def attach(
    d: Durable, req: Request, opts: dict[str, Any], alive: Callable[[bytes], bool]
) -> str | None:
    """Attach the sender as (one of) the durable's consumer(s); what refuses it."""
    holder = d.consumer is not None and d.consumer != req.ident and alive(d.consumer)
    if opts["shared"]:
        if holder:
            return (
                f"durable subscription {d.name!r} is held by an exclusive consumer: "
                "it cannot be shared until that one detaches"
            )
        d.consumer = None
        if d.shared is None:
            d.shared = SharedState()
        d.shared.attach(req.ident, opts["credit"])
        return None
    if d.shared is not None and d.shared.consumers:
        return (
            f"durable subscription {d.name!r} is shared by {len(d.shared.consumers)} "
            "consumer(s): open it with shared=True to join them"
        )
    if holder:
        return (
            f"durable subscription {d.name!r} is held by another consumer (no takeover): "
            "detach that one first, or open both with shared=True"
        )
    # (re)attach: everything not acknowledged is sent again, flagged redelivered
    d.shared = None
    d.consumer = req.ident
    d.window.reset(opts["credit"])
    return None
