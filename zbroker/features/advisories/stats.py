"""``$ZB.SYS.<id>.STATS``: the node's counters and their rates since the last STATS
(mosquitto's ``$SYS``). Built from what the node keeps anyway: a few attribute reads,
once per ``sys_interval``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...links.state import LinkState

if TYPE_CHECKING:
    from ...node.context import Context

__all__ = ["RATED", "Stats"]

#: the counters STATS gives a rate (per second over the interval) for
RATED = ("received", "delivered", "forwarded", "dropped", "unrouted")


class Stats:
    """Counters now, and their rates since the previous :meth:`take`."""

    def __init__(self, ctx: Context, now: float) -> None:
        self._ctx = ctx
        self._started = now
        self._last_at = now
        self._last: dict[str, int] = dict.fromkeys(RATED, 0)

    def take(self, now: float, advisories: dict[str, Any]) -> dict[str, Any]:
        ctx = self._ctx
        c = ctx.counters
        dropped = dict(sorted(c.dropped.items()))
        counters = {
            "received": c.received,
            "delivered": c.delivered,
            "forwarded": c.forwarded,
            "dropped": sum(dropped.values()),
            "unrouted": c.unrouted,
            "bad_input": c.bad_input,
            "links_up": c.links_up,
            "links_down": c.links_down,
            "handshakes_refused": c.handshakes_refused,
        }
        elapsed = max(now - self._last_at, 1e-9)
        rates = {k: round((counters[k] - self._last[k]) / elapsed, 3) for k in RATED}
        self._last = {k: counters[k] for k in RATED}
        self._last_at = now
        links = ctx.links.all()
        return {
            "broker": ctx.broker_id,
            "incarnation": ctx.incarnation,
            "time": time.time(),
            "uptime": round(now - self._started, 3),
            "interval": round(elapsed, 3),
            "counters": counters,
            "rates": rates,
            "dropped": dropped,
            "links": {
                "up": sum(1 for link in links if link.state is LinkState.UP),
                "total": len(links),
            },
            "local_patterns": len(ctx.engine.local_patterns),
            "interest_entries": ctx.engine.entry_count(),
            "advisories": advisories,
        }
