"""Fan-out publishing: every publish to every node the client found, each on its own PUSH.

The client thread plugs a node in when it answers and unplugs it when it is lost; user
threads publish under this part's own lock. No batches: a fan-out client trades throughput
for having every node hold every message.
"""

from __future__ import annotations

import threading
import time

import zmq

from ..errors import ClientClosed, PublishTimeout
from .credentials import Credentials
from .push import new_push

__all__ = ["Fanout"]


class Fanout:
    """The PUSH sockets of a fan-out client, one per node that answered."""

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        hwm: int,
        publish_timeout: float,
        credentials: Credentials,
    ) -> None:
        self._ctx = ctx
        self._hwm = hwm
        self._timeout = publish_timeout
        self._credentials = credentials
        self._lock = threading.Lock()
        self._closed = False
        self._pushes: dict[str, zmq.Socket[bytes]] = {}  # node endpoint -> PUSH

    def publish(self, frame: bytes) -> None:
        """Send ``frame`` to every node plugged in when the call began (a node lost
        meanwhile is skipped); PublishTimeout if one does not take it in time."""
        deadline = time.monotonic() + self._timeout
        pending = None
        while True:
            with self._lock:
                if self._closed:
                    raise ClientClosed("client is closed")
                if pending is None:
                    pending = set(self._pushes)
                for ep in list(pending):
                    push = self._pushes.get(ep)
                    if push is None:
                        pending.discard(ep)  # that node is gone: nothing to send to
                        continue
                    try:
                        push.send(frame, zmq.NOBLOCK)
                        pending.discard(ep)
                    except zmq.Again:
                        pass
                if not pending and self._pushes:
                    return
            if time.monotonic() >= deadline:
                raise PublishTimeout(
                    f"fan-out publish: {len(pending or ())} node(s) did not take the message "
                    f"within {self._timeout:g} s"
                )
            time.sleep(0.005)

    def plug(self, endpoint: str, publish_endpoint: str) -> None:
        """A node answered: publish to it too (from the client thread)."""
        push = new_push(self._ctx, self._hwm, self._timeout)
        self._credentials.secure(push, endpoint)
        push.connect(publish_endpoint)
        with self._lock:
            if self._closed:
                push.close(linger=0)
                return
            self._pushes[endpoint] = push

    def unplug(self, endpoint: str) -> None:
        """The node at ``endpoint`` was lost (from the client thread)."""
        with self._lock:
            push = self._pushes.pop(endpoint, None)
        if push is not None:
            push.close(linger=0)

    def close(self, linger: int | None) -> None:
        with self._lock:
            self._closed = True
            for push in self._pushes.values():
                push.close(linger=linger)
            self._pushes.clear()
