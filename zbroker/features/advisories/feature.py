"""The advisories feature: node events become messages on ``$ZB.ADVISORY.<id>.<KIND>``,
and the node's counters ``$ZB.SYS.<id>.STATS`` every ``sys_interval``.

It observes the kernel's typed events (the events phase, once per pass: nothing per
message) and, on its timer, two counters the pipeline keeps anyway: client publishes no
subscriber anywhere wanted (``unrouted``, with the last such topic) and drops by reason,
each summarized at most once per ``summary_interval``. An advisory is published through
the one message path like any message (so it travels links like any topic), but only when
someone subscribes to its topic, here or anywhere (the routing engine's cached answer);
otherwise it costs one route lookup and is counted as unheard. Each node limits its own
advisories to ``rate_limit`` per ``rate_window``; those over the limit are counted by
kind (and the next advisory says how many were suppressed before it; a summary suppressed
is not lost: the next one counts it). STATS has its own cadence and no limit.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import msgpack

from ... import wire
from ...config import AdvisoryConfig
from ...node import Feature
from ...node.events import InterestAdded, InterestRemoved, NodeEvent
from ...topics import is_reserved
from .kinds import KINDS, advisory_topic, event_fields, payload, stats_topic
from .limiter import WindowLimit
from .stats import Stats

if TYPE_CHECKING:
    from ...node.context import Context

__all__ = ["Advisories"]

log = logging.getLogger("zbroker.advisories")

#: what became of an advisory offered (:meth:`Advisories._offer`)
SENT, UNHEARD, SUPPRESSED = "sent", "unheard", "suppressed"


class Advisories(Feature):
    """Publishes the node's advisories and STATS (see the module docstring)."""

    name = "advisories"

    def __init__(self, config: AdvisoryConfig | None = None) -> None:
        self._config = config
        self.emitted = 0  # advisories published
        self.unheard = 0  # advisories nobody subscribed to (not published, not limited)
        self.stats_sent = 0
        self.suppressed: dict[str, int] = {}  # over the rate limit, by kind
        self._since = 0  # suppressed since the last advisory published

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        cfg = self._config or ctx.config.advisories
        self.config = cfg
        self._limit = WindowLimit(cfg.rate_limit, cfg.rate_window)
        self._me = ctx.broker_id
        self._topics = {kind: advisory_topic(self._me, kind) for kind in KINDS.values()}
        self._stats_topic = stats_topic(self._me)
        self._unrouted = ctx.counters.unrouted
        self._dropped: dict[str, int] = dict(ctx.counters.dropped)

    def start(self, now: float) -> None:
        self._stats = Stats(self._ctx, now)
        cfg = self.config
        self._next_summary = now + cfg.summary_interval
        self._next_stats = now + cfg.sys_interval if cfg.sys_interval else float("inf")

    # -- events -----------------------------------------------------------------------------

    def on_events(self, events: list[NodeEvent]) -> None:
        now = time.monotonic()
        for event in events:
            kind = KINDS.get(type(event))
            if kind is None:
                continue
            if isinstance(event, InterestAdded | InterestRemoved) and is_reserved(event.pattern):
                continue  # watching the node ($ZB.>) is not interest in the application
            self.advise(kind, event_fields(event), now)

    def advise(self, kind: str, fields: dict[str, Any], now: float) -> bool:
        """Publish advisory ``kind`` if anyone listens and the budget allows; True if sent."""
        return self._offer(kind, fields, now) == SENT

    def _offer(self, kind: str, fields: dict[str, Any], now: float) -> str:
        """:meth:`advise`, saying what became of it: SENT, UNHEARD or SUPPRESSED."""
        topic = self._topics.get(kind)
        if topic is None:
            topic = self._topics[kind] = advisory_topic(self._me, kind)
        if not self._heard(topic):
            self.unheard += 1
            return UNHEARD
        if not self._limit.allow(now):
            self.suppressed[kind] = self.suppressed.get(kind, 0) + 1
            self._since += 1
            return SUPPRESSED
        self.emitted += 1
        body = payload(kind, self._me, self.emitted, time.time(), self._since, fields)
        self._since = 0
        self._publish(topic, body)
        return SENT

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        if now >= self._next_summary:
            self._next_summary = now + self.config.summary_interval
            self._summaries(now)
        if now >= self._next_stats:
            self._next_stats = now + self.config.sys_interval
            self.send_stats(now)

    def _summaries(self, now: float) -> None:
        """NO_SUBSCRIBER and DROPS: what the counters gained since the last summary. One
        the rate limit suppressed leaves its baseline where it was, so the next one
        published counts what it would have said too (one nobody heard moves it on)."""
        c = self._ctx.counters
        if c.unrouted != self._unrouted:
            n = c.unrouted - self._unrouted
            topic = self._ctx.pipeline.unrouted_topic
            if self._offer("NO_SUBSCRIBER", {"topic": topic, "messages": n}, now) != SUPPRESSED:
                self._unrouted = c.unrouted
        if c.dropped != self._dropped:
            last, dropped = self._dropped, dict(c.dropped)
            reasons = {
                r: n - last.get(r, 0) for r, n in sorted(dropped.items()) if n != last.get(r)
            }
            fields = {"reasons": reasons, "messages": sum(reasons.values())}
            if self._offer("DROPS", fields, now) != SUPPRESSED:
                self._dropped = dropped

    def send_stats(self, now: float) -> bool:
        """Publish STATS now (if anyone listens); True if sent."""
        counts = {"emitted": self.emitted, "suppressed": sum(self.suppressed.values())}
        body = self._stats.take(now, counts)
        if not self._heard(self._stats_topic):
            return False
        self.stats_sent += 1
        self._publish(self._stats_topic, body)
        return True

    # -- publishing -------------------------------------------------------------------------

    def _heard(self, topic: str) -> bool:
        """Does anyone subscribe to ``topic``, here or anywhere? (cached per topic)"""
        patterns, sends = self._ctx.engine.route(topic, (), None)
        return bool(patterns or sends)

    def _publish(self, topic: str, body: dict[str, Any]) -> None:
        """Originate one message through the one message path. Its ID takes the node's
        next message seq; it is not a client's, so it is not counted as received."""
        ctx = self._ctx
        me = self._me
        ctx.counters.seq += 1
        m = [topic, msgpack.packb(body), wire.FMT_MSGPACK, None, me, ctx.incarnation]
        m += [ctx.counters.seq, time.time(), [me]]
        ctx.pipeline.take([m], (), persistent=False)

    def status(self, out: dict[str, Any]) -> None:
        out["advisories"] = {
            "enabled": True,
            "emitted": self.emitted,
            "suppressed": dict(sorted(self.suppressed.items())),
            "unheard": self.unheard,
            "stats_sent": self.stats_sent,
            "sys_interval": self.config.sys_interval,
            "rate_limit": self.config.rate_limit,
            "rate_window": self.config.rate_window,
        }
