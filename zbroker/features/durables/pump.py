"""Sending attached durable subscribers what they have credit for, and noticing the
ones that are gone.

The messages are marked delivered and that is committed *before* they are sent: a node
killed right after sending must flag them ``redelivered`` when it sends them again (a
mark committed after the send could die with the node, and the repeat would look new).
A message marked but not sent (its subscriber went away) is flagged when it comes: "may
have been delivered".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgpack
import zmq

from ... import wire

if TYPE_CHECKING:
    from ...node.context import Context
    from ...store import Store
    from .state import Durable

__all__ = ["probe", "pump"]

log = logging.getLogger("zbroker.node")


def pump(ctx: Context, durables: list[Durable]) -> int:
    """Send each durable's subscriber what its credit allows. Returns messages sent."""
    store = ctx.store
    assert store is not None
    store.trim_hold = set()  # the commit below applies the bounds, after the marks
    batches: list[tuple[Durable, list[tuple[int, bytes]]]] = []
    for d in durables:
        room = d.window.room()
        if d.consumer is None or room <= 0:
            continue
        frames = _frames(store, d, room)
        if frames:
            store.mark_delivered(d.name, [q for q, _ in frames])
            batches.append((d, frames))
    store.commit()  # the marks (and the bounds that waited for this pump)
    sent = 0
    for d, frames in batches:
        sent += _send(ctx, store, d, frames)
    return sent


def _frames(store: Store, d: Durable, room: int) -> list[tuple[int, bytes]]:
    frames = []
    for q, topic, payload, fmt, h, origin, inc, oseq, ts, delivered in store.pending_durable(
        d.name, d.window.sent_upto, room
    ):
        headers = None if h is None else msgpack.unpackb(h, strict_map_key=False)
        body = {
            "name": d.name,
            "q": q,
            "redelivered": bool(delivered),
            "msg": [topic, payload, fmt, headers, origin, inc, oseq, ts],
        }
        frames.append((q, wire.encode_control(wire.DELIVER, 0, body)))
    return frames


def _send(ctx: Context, store: Store, d: Durable, frames: list[tuple[int, bytes]]) -> int:
    sent = 0
    for q, frame in frames:
        if d.consumer is None:
            break
        try:
            gone = not ctx.send_to(d.consumer, frame)
        except zmq.ZMQError:  # (zmq.Again: not reading)
            gone = True  # keep the rest for its return
        if gone:
            d.consumer = None
            store.set_attached(d.name, False)
            break
        d.window.sent_one(q)
        sent += 1
    return sent


def probe(ctx: Context, durables: list[Durable], frame: bytes) -> list[Durable]:
    """Is each attached subscriber still connected? One whose credit is used up is never
    sent to, so a subscriber that died (kill -9) would stay "attached" for ever. A small
    frame it ignores (``frame``, a PING) tells: the ROUTER refuses it at once
    (ROUTER_MANDATORY) when the connection is gone. A full queue (a slow subscriber) is
    not gone. Returns the durables whose subscriber is gone (now detached)."""
    store = ctx.store
    assert store is not None
    gone = []
    for d in durables:
        if d.consumer is None:
            continue
        try:
            alive = ctx.send_to(d.consumer, frame)
        except zmq.Again:
            continue
        if not alive:
            d.consumer = None
            store.set_attached(d.name, False)
            gone.append(d)
            log.info(
                "durable %s: its subscriber is gone; %d message(s) it had not "
                "acknowledged wait for the next one to attach",
                d.name,
                d.window.in_flight(),
            )
    return gone
