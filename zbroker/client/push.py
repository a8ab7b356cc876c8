"""The PUSH socket toward a node's publish port, as both publishers use it: the batching
one (:mod:`.publisher`) and fan-out (:mod:`.fanout`, one per node)."""

from __future__ import annotations

import zmq

__all__ = ["new_push"]


def new_push(ctx: zmq.Context[zmq.Socket[bytes]], hwm: int, timeout: float) -> zmq.Socket[bytes]:
    """A PUSH socket toward a node's publish port (not yet connected)."""
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, hwm)
    # queue only toward a connection that is up: during a failover publish() waits
    # (up to publish_timeout) for the next node instead of filling a dead pipe
    push.setsockopt(zmq.IMMEDIATE, 1)
    push.setsockopt(zmq.IPV6, 1)
    # a bounded flush of what was published just before close()
    push.setsockopt(zmq.LINGER, int(timeout * 1000))
    return push
