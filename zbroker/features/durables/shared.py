"""Shared durable subscriptions: many consumers on one durable queue, each stored message
to ONE of them under its credit, acknowledged one by one.

A shared durable hands its stored messages out in queue order (``cursor``: the highest
``q`` handed out) to the least served consumer with credit left; each consumer
acknowledges the messages it processed (DURABLE_ACK ``qs``: exactly those, since the
consumers' messages interleave). A consumer that detaches or dies (the probe, or a send
that finds its connection gone: both through the feature's ``shared_gone``) leaves what
it had not acknowledged to the others: those go first (``redo``), flagged redelivered
(their delivery mark is committed before the first send, as for any durable). When the
last consumer leaves, everything unacknowledged waits in the store for the next one, as
for an exclusive durable.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack
import zmq

from ... import wire

if TYPE_CHECKING:
    from ...node.context import Context
    from ...store import Store
    from .state import Durable

__all__ = ["SharedConsumer", "SharedState", "pump_shared"]


class SharedConsumer:
    __slots__ = ("credit", "ident", "inflight", "members", "node", "session", "share", "stale")

    def __init__(self, ident: bytes, credit: int, share: int) -> None:
        self.ident = ident
        self.credit = credit
        self.inflight: dict[int, None] = {}  # q sent, not acknowledged (in send order)
        self.share = share  # messages handed to it (level with the least served at attach)
        #: a network consumer (:mod:`.remote`): the node whose consumers it stands for,
        #: its attach session and how many consumers it has there; None for a client
        self.node: str | None = None
        self.session: str | None = None
        self.members = 1
        #: q it holds from a queue it consumes no more (its home moved, or its session
        #: ended): its acknowledgement of one of those is not for the q of that number in
        #: the queue it consumes now (two queues number independently)
        self.stale: dict[int, int] = {}

    def room(self) -> int:
        return self.credit - len(self.inflight)

    def forget(self) -> None:
        """What it holds comes from a queue it consumes no more (see ``stale``)."""
        for q in self.inflight:
            self.stale[q] = self.stale.get(q, 0) + 1
        self.inflight.clear()

    def current(self, qs: list[int]) -> list[int]:
        """``qs`` acknowledged, less the first acknowledgement of each stale q (it was
        delivered before the queue changed, so it is acknowledged first)."""
        if not self.stale:
            return qs
        out = []
        for q in qs:
            n = self.stale.get(q)
            if n is None:
                out.append(q)
            elif n > 1:
                self.stale[q] = n - 1
            else:
                del self.stale[q]
        return out


class SharedState:
    """The consumers of one shared durable and what is handed out."""

    __slots__ = ("consumers", "cursor", "delivered", "redelivered", "redo")

    def __init__(self) -> None:
        self.consumers: dict[bytes, SharedConsumer] = {}
        self.cursor = 0  # the highest q handed out (rows above it are new)
        self.redo: list[int] = []  # q left unacknowledged by consumers gone (sorted)
        self.delivered = 0
        self.redelivered = 0

    def attach(self, ident: bytes, credit: int) -> None:
        if ident in self.consumers:
            self.detach(ident)  # the same connection opening again starts afresh
        share = min((c.share for c in self.consumers.values()), default=0)
        self.consumers[ident] = SharedConsumer(ident, credit, share)

    def detach(self, ident: bytes) -> int:
        """A consumer left: what it had not acknowledged goes to the others first.
        Returns how many messages that was."""
        c = self.consumers.pop(ident, None)
        if c is None:
            return 0
        if not self.consumers:
            # nobody left: everything unacknowledged is in the store, above q 0
            self.cursor, self.redo = 0, []
            return len(c.inflight)
        for q in c.inflight:
            bisect.insort(self.redo, q)
        return len(c.inflight)

    def ack(self, ident: bytes, qs: list[int]) -> list[int]:
        """The messages of ``qs`` that this consumer held (acknowledged now)."""
        c = self.consumers.get(ident)
        if c is None:
            return []
        # (dict.fromkeys: a q listed twice is acknowledged once, never deleted twice)
        done = [q for q in dict.fromkeys(c.current(qs)) if q in c.inflight]
        for q in done:
            del c.inflight[q]
        return done

    def take_rows(self, store: Store, name: str, room: int) -> list[tuple[Any, ...]]:
        """Up to ``room`` stored rows to hand out next: first what consumers gone left
        (``redo``), then new ones (past ``cursor``, which moves on)."""
        rows: list[tuple[Any, ...]] = []
        if self.redo:
            take, self.redo = self.redo[:room], self.redo[room:]
            rows = store.durable_rows(name, take)  # (some may be gone: trimmed, acked)
        if len(rows) < room:
            fresh = store.pending_durable(name, self.cursor, room - len(rows))
            if fresh:
                self.cursor = fresh[-1][0]
            rows.extend(fresh)
        return rows

    def in_flight(self) -> int:
        return sum(len(c.inflight) for c in self.consumers.values())

    def next_consumer(self) -> SharedConsumer | None:
        best = None
        for c in self.consumers.values():
            # (a network consumer stands for ``members`` consumers: its share is theirs)
            if c.room() > 0 and (best is None or c.share / c.members < best.share / best.members):
                best = c
        return best


def pump_shared(ctx: Context, d: Durable) -> list[tuple[SharedConsumer, int, dict[str, Any]]]:
    """Hand out what the consumers have credit for: first what consumers gone left, then
    new messages. Marks them delivered (committed by the caller before the sends) and
    returns ``(consumer, q, DELIVER body)`` to send."""
    st = d.shared
    store = ctx.store
    assert st is not None and store is not None
    room = sum(max(c.room(), 0) for c in st.consumers.values())
    if room <= 0:
        return []
    rows = st.take_rows(store, d.name, room)
    out = []
    for q, topic, payload, fmt, h, origin, inc, oseq, ts, delivered in rows:
        c = st.next_consumer()
        if c is None:  # (cannot happen: rows are bounded by the room)
            bisect.insort(st.redo, q)
            continue
        c.inflight[q] = None
        c.share += 1
        headers = None if h is None else msgpack.unpackb(h, strict_map_key=False)
        body = {
            "name": d.name,
            "q": q,
            "redelivered": bool(delivered),
            "msg": [topic, payload, fmt, headers, origin, inc, oseq, ts],
        }
        st.redelivered += bool(delivered)
        out.append((c, q, body))
    if out:
        store.mark_delivered(d.name, [q for _, q, _ in out])
    return out


def send_shared(
    ctx: Context,
    d: Durable,
    frames: list[tuple[SharedConsumer, int, dict[str, Any]]],
    remote: dict[SharedConsumer, list[dict[str, Any]]],
    gone: Callable[[Durable, bytes, str], None],
) -> int:
    """Send what :func:`pump_shared` handed out (after the commit of its marks); a
    consumer found gone is handed to ``gone`` (the feature's ``shared_gone``: it detaches
    it, so its messages go to the others, and wakes the pump for them, or marks the
    durable detached if it was the last). A consumer whose connection's queue is full
    (``zmq.Again``) is slow, not gone: the message goes back first in line (``redo``,
    so flagged redelivered when it goes: its mark is committed) and leaves when credit
    frees up again. What goes to a network consumer is added to ``remote`` (sent by
    :mod:`.remote`). Returns sent."""
    st = d.shared
    assert st is not None
    sent = 0
    for c, q, body in frames:
        if st.consumers.get(c.ident) is not c:
            continue  # detached meanwhile: its messages are in redo already
        if c.node is not None:
            remote.setdefault(c, []).append(body)
            sent += 1
            continue
        try:
            dead = not ctx.send_to(c.ident, wire.encode_control(wire.DELIVER, 0, body))
        except zmq.Again:
            del c.inflight[q]
            c.share -= 1
            bisect.insort(st.redo, q)
            continue
        except zmq.ZMQError:
            dead = True
        if dead:
            gone(d, c.ident, "subscriber gone")
            continue
        sent += 1
    st.delivered += sent
    return sent
