"""One move of a shared durable away from this node, phase by phase (see :mod:`.moves`).

``offer`` (``adopt`` sent, waiting for the answer) -> ``move`` (stored messages go to the
new home in ``rows``; each stays stored here until the new home answers ``rows_ok`` for it,
after the commit that stored it there) -> the handover (the durable ends here, empty).
An internal message that meets no route on its way is dropped (a relay whose link to the
target went, or this node with none): rows not answered when this node's route to the
target goes, or within ``RESEND_AFTER``, are sent again, and the new home's dedupe of
message ids drops the copies. Nothing is sent toward a target without a route: the move
waits.
"""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING

import msgpack

from ...node import Request
from .remote import CHUNK_BYTES, sd_topic, send
from .selecting import interest_source

if TYPE_CHECKING:
    from ...node.context import Context
    from .feature import Durables
    from .state import Durable

__all__ = ["Outgoing"]

#: seconds the old home keeps its interest after the new home's advertisement reached it
HANDOVER_GRACE = 2.0
#: seconds the old home waits for its consumers' in-flight messages before taking them back
DRAIN_TIMEOUT = 5.0
#: seconds the old home waits for a link of its own that is down (what a neighbour queued
#: for it there arrives when it comes back, and finds the durable here) before it ends the
#: durable anyway
LINK_WAIT = 60.0
#: stored messages moved per pass at most (the rest in the next passes)
ROWS_PER_PASS = 2000
#: seconds after which rows the new home has not answered are sent again
RESEND_AFTER = 10.0


class Outgoing:
    """A move of one durable away from this node."""

    __slots__ = (
        "count",
        "grace_from",
        "moved",
        "nodes",
        "phase",
        "progress",
        "session",
        "since",
        "target",
        "told",
        "unanswered",
        "waiting",
    )

    def __init__(self, target: str, session: str) -> None:
        self.target = target
        self.session = session
        self.phase = "offer"  # offer -> move (adopt_ok) -> ended
        self.since = time.monotonic()  # (the offer's time, for its timeout)
        self.grace_from: float | None = None  # when the new home's advertisement came
        self.moved: dict[int, int] = {}  # q -> moves made so far (0: absent)
        self.count = 0  # rows answered (``done`` tells the new home, for its dedupe)
        #: q sent in ``rows`` and not yet answered ``rows_ok`` (still stored here)
        self.unanswered: dict[int, None] = {}
        self.progress = time.monotonic()  # the last rows_ok (or the first rows)
        #: the other nodes consuming it (told ``moved``) and their sessions
        self.nodes: dict[str, str] = {}
        self.told = False
        #: opens here while the offer is unanswered, with when they give up
        self.waiting: list[tuple[Request, float]] = []

    def reachable(self, ctx: Context) -> bool:
        return ctx.engine.has_route(sd_topic(self.target), self.target)

    def transfer(self, ctx: Context, d: Durable) -> int:
        """Move what ``d`` stores and has not handed out (after the pass's commit): rows to
        the new home, kept here until it answers them (:meth:`answered`). Returns the
        messages sent (ROWS_PER_PASS: maybe more to come)."""
        st, store = d.shared, ctx.store
        assert st is not None and store is not None
        if not self.reachable(ctx):
            return 0  # (sent now it would be dropped: the move waits for a route)
        rows = st.take_rows(store, d.name, ROWS_PER_PASS)
        if not rows:
            return 0
        if not self.unanswered:
            self.progress = time.monotonic()
        bodies, chunk, size = [], [], 0
        for q, topic, payload, fmt, h, origin, inc, oseq, ts, delivered in rows:
            headers = None if h is None else msgpack.unpackb(h, strict_map_key=False)
            msg = [topic, payload, fmt, headers, origin, inc, oseq, ts]
            chunk.append([q, self.moved.get(q, 0) + 1, bool(delivered), msg])
            self.unanswered[q] = None
            size += len(payload) + len(topic) + 64
            if size >= CHUNK_BYTES:
                bodies.append(chunk)
                chunk, size = [], 0
        if chunk:
            bodies.append(chunk)
        send(
            ctx,
            self.target,
            [{"op": "rows", "name": d.name, "session": self.session, "rows": c} for c in bodies],
        )
        return len(rows)

    def answered(self, ctx: Context, name: str, qs: list[int]) -> int:
        """``rows_ok``: the new home stored these; deleted here now. Returns how many."""
        done = [q for q in qs if q in self.unanswered]
        for q in done:
            del self.unanswered[q]
            self.moved.pop(q, None)
        self.count += len(done)
        if done:
            assert ctx.store is not None
            ctx.store.ack_each(name, done)
            self.progress = time.monotonic()
        return len(done)

    def resend(self, d: Durable, now: float, reachable: bool) -> None:
        """Rows unanswered when the route to the target went, or for RESEND_AFTER, go
        again (they may have been dropped on the way; the new home drops copies)."""
        if not self.unanswered or (reachable and now < self.progress + RESEND_AFTER):
            return
        st = d.shared
        assert st is not None
        for q in self.unanswered:
            bisect.insort(st.redo, q)
        self.unanswered = {}
        self.progress = now

    def ready(self, f: Durables, ctx: Context, d: Durable, now: float, stable: bool) -> bool:
        """Move phase, at each tick: may the durable end here now? (Tells the other
        consuming nodes to follow once nothing is in flight to them.)"""
        if self.grace_from is None:
            if self.target in ctx.engine.durable_homes.homes.get(d.name, ()):
                self.grace_from = now
            return False
        if now < self.grace_from + HANDOVER_GRACE:
            return False
        st, store = d.shared, ctx.store
        assert st is not None and store is not None
        for c in st.consumers.values():
            if c.node is not None and c.session is not None and c.node != self.target:
                self.nodes[c.node] = c.session
        if st.in_flight():
            if now >= self.grace_from + HANDOVER_GRACE + DRAIN_TIMEOUT:
                for ident in list(st.consumers):  # their messages are moved, flagged
                    f.shared_gone(d, ident, "durable moved")
            return False
        drained = not (st.redo or self.unanswered or store.durable_depth(d.name))
        if drained and not self.told and self.reachable(ctx):
            self.told = True  # the other consuming nodes attach to the new home now
            for node, session in self.nodes.items():
                body = {"op": "moved", "name": d.name, "session": session, "to": self.target}
                send(ctx, node, [body])
        # a link of this node that is down: what a neighbour queued for it there comes
        # when it is back, and must find the durable here to be moved on
        if not d.sealed and (stable or now >= self.grace_from + HANDOVER_GRACE + LINK_WAIT):
            # what is published from now on reaches the new home only (every route knows
            # it by now): without this, steady publishing keeps a message or two always
            # stored or unanswered here, and the durable never ends
            self.seal(ctx, d, True)
        if not (drained and self.told):
            f.wake(d.name)  # (not all moved yet: moved rows go with the next commit)
            return False
        return d.sealed

    def seal(self, ctx: Context, d: Durable, sealed: bool) -> None:
        """``d`` stores no new message here (its interest withdrawn), or again (the move
        was called off)."""
        if sealed != d.sealed:
            d.sealed = sealed
            change = ctx.drop_interest if sealed else ctx.add_interest
            change(d.pattern, interest_source(d))

    def done(self, ctx: Context, name: str) -> None:
        """The durable ended here: the new home ends its dedupe once it has them all."""
        body = {"op": "done", "name": name, "session": self.session, "count": self.count}
        send(ctx, self.target, [body])
