"""The node's drain: told to stop, it serves on a moment as a lame duck, for its clients to
move to another node without losing what they sent on their way out.

:meth:`Drain.begin` asks every feature to tell whoever should know (``Feature.draining``:
the clients that said HELLO hear LEAVING, and fail over at once instead of after their
heartbeat timeout); the kernel's passes then go on while :meth:`Drain.go_on` says so:
until no publish came from a client for ``DRAIN_QUIET``, ``DRAIN_MAX`` at most (a
request in flight, a persistent publish too, is retried at the next node: idempotent).
A client that heard LEAVING flushes what it had queued for this node before it moves
(its publish socket's linger), and this node takes and forwards it during the drain; with
nobody told (no client), the loop ends at once, as before. The links hear goodbye after
the drain, so they carry what it forwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..const import DRAIN_MAX, DRAIN_QUIET
from .feature import Feature

__all__ = ["Drain"]


class Drain:
    """When a stopping node's drain ends (``until`` 0.0: not draining)."""

    __slots__ = ("quiet_until", "until")

    def __init__(self) -> None:
        self.until = 0.0  # the drain ends by then at the latest
        self.quiet_until = 0.0  # ... or by then, if nothing comes from a client meanwhile

    def begin(self, features: Sequence[Feature], now: float) -> bool:
        """Told to stop: True if the loop should go on draining (someone was told), False
        if it ends now. A second STOP changes nothing."""
        if self.until:
            return True
        told = [f.draining(now) for f in features]  # (each one, not the first only)
        if not any(told):
            return False
        self.until = now + DRAIN_MAX
        self.quiet_until = now + DRAIN_QUIET
        return True

    def poll_ms(self, timeout: int) -> int:
        """The pass's poll timeout while draining: short enough to see the quiet."""
        return min(timeout, int(DRAIN_QUIET * 1000))

    def go_on(self, ready: list[tuple[Any, int]], publish: Any, now: float) -> bool:
        """After a pass that polled ``ready``: the clients' ``publish`` socket among them
        keeps the drain on DRAIN_QUIET longer (not the control socket: links share it);
        False once quiet that long, or past DRAIN_MAX."""
        if any(sock is publish for sock, _ in ready):
            self.quiet_until = now + DRAIN_QUIET
        return now < self.quiet_until and now < self.until
