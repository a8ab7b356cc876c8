"""Store-and-forward of persistent messages across links, hop by hop (sans-IO).

A persistent message (published with ``persistent=True``) that has to cross a link is not
put on the fast in-memory path (MSGS, at-most-once). It is appended to the **outbound
queue** of that directed link in the sender's store, numbered by a per-queue link sequence
``lseq`` (1, 2, ...), and sent in PMSGS frames once the store commit holding it is done.
The queue has an **epoch**, a random number made with it, so that a receiver notices a
sender whose store was wiped (a new epoch starts the numbering again).

The receiver takes a queue's entries strictly in order: ``lseq == last + 1`` is new (its
effects — durable queues, retention, the receiver's own outbound queues toward the next
hop — are written in the pass's store transaction together with ``(peer/link, epoch,
last)``), ``lseq <= last`` is a resend it already has (dropped), anything above ``last + 1``
waits for a resend (a gap: a frame lost on a connection that broke). After the commit it
answers PACK ``(epoch, upto=last)``; the sender deletes every entry up to ``upto``. So each
entry is taken **exactly once per link**, across link cuts and restarts of either side:

* the sender resends everything unacknowledged, in order, whenever the link comes up
  (after the handshake), and again when no acknowledgement of a new entry came for
  :data:`RETRANSMIT_AFTER` seconds while some are outstanding;
* the receiver's position is committed with what the entries produced, so after a crash
  it neither loses an entry (it was not acknowledged) nor takes one twice.

What can still repeat a message is another *path* (a route change in a mesh): the
receiving node's persistent dedupe, keyed by ``(origin, incarnation, pseq)`` — ``pseq``
numbers the origin's persistent messages — drops those.

Queues are bounded (``max_msgs``, ``max_bytes`` per link): past a bound the oldest entry is
dropped and counted (``dropped_full``); frames carry ``base`` (the oldest entry the
sender still holds), so a receiver stops waiting for dropped ones.

This module holds no socket and no clock: the node passes ``now`` and sends the frames.
The SQL lives in :mod:`zbroker.store` (``fwd_*``); the dedupe by ``(origin, incarnation,
pseq)`` in :mod:`.dedupe`.
"""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ... import wire
from ...store.link_queues import ForwardStore

__all__ = ["RETRANSMIT_AFTER", "WINDOW", "Forwarder", "OutQueue"]

#: entries sent but not yet acknowledged per link: the receiver's commit paces the sender
WINDOW = 20_000
#: seconds without an acknowledgement of a new entry (while some are outstanding): resend
RETRANSMIT_AFTER = 3.0

_packb = wire.packb  # one Packer per thread (wire.codec), not one per call


@dataclass(eq=False, slots=True)
class OutQueue:
    """The outbound queue of one directed link (this node -> ``peer`` over one link)."""

    qkey: str
    engine_id: str
    peer: str
    epoch: int
    next_lseq: int
    meta: bytes | None = None
    entries: collections.deque[tuple[int, bytes]] = field(default_factory=collections.deque)
    nbytes: int = 0
    sent_upto: int = 0  # highest lseq sent on the current connection
    up: bool = False
    last_ack: float = 0.0
    down_since: float = 0.0
    acked: int = 0
    sent: int = 0
    dropped: int = 0
    too_large: int = 0  # entries no frame the peer accepts could hold (see drop_next)
    retransmits: int = 0

    @property
    def base(self) -> int:
        """The oldest lseq still held (next_lseq when empty)."""
        return self.entries[0][0] if self.entries else self.next_lseq

    def describe(self) -> dict[str, Any]:
        return {
            "peer": self.peer,
            "link": self.engine_id,
            "up": self.up,
            "queued": len(self.entries),
            "queued_bytes": self.nbytes,
            "in_flight": max(0, self.sent_upto - self.base + 1) if self.entries else 0,
            "next_lseq": self.next_lseq,
            "sent": self.sent,
            "acked": self.acked,
            "dropped": self.dropped,
            "dropped_too_large": self.too_large,
            "retransmits": self.retransmits,
        }


class Forwarder:
    """Outbound link queues and inbound link positions of one node."""

    def __init__(
        self,
        store: ForwardStore,
        *,
        max_msgs: int = 0,
        max_bytes: int = 0,
        new_epoch: Callable[[], int] | None = None,
        drop: Callable[[str, int], None] | None = None,
    ) -> None:
        self._store = store
        #: told of the entries the bounds drop (the node's drop counters)
        self._drop = drop if drop is not None else (lambda reason, n: None)
        self.max_msgs = max_msgs
        self.max_bytes = max_bytes
        self._new_epoch = new_epoch or (lambda: random.getrandbits(62) + 1)
        self.queues: dict[str, OutQueue] = {}
        self.by_engine: dict[str, OutQueue] = {}
        self.inbound: dict[str, list[int]] = {}  # ikey -> [epoch, last lseq taken]
        # counters
        self.queued = 0
        self.duplicates = 0  # entries a receiver had already (resends)
        self.gaps = 0  # entries that arrived past a missing one (waiting for a resend)
        self.lost = 0  # entries the sender dropped before we had them (its bounds)
        self.stale_acks = 0
        # entries dropped for the bounds, over every queue this node ever had (a queue's
        # own counts go with it when its link is forgotten)
        self.dropped_full = 0
        self.dropped_too_large = 0
        queues, entries, inbound = store.fwd_load()
        for qkey, engine_id, peer, epoch, next_lseq, meta in queues:
            q = OutQueue(qkey, engine_id, peer, epoch, next_lseq, meta)
            self.queues[qkey] = q
            self.by_engine[engine_id] = q
        for qkey, lseq, blob in entries:
            q2 = self.queues.get(qkey)
            if q2 is None:
                continue
            q2.entries.append((lseq, blob))
            q2.nbytes += len(blob)
            q2.next_lseq = max(q2.next_lseq, lseq + 1)
        for ikey, epoch, last in inbound:
            self.inbound[ikey] = [epoch, last]

    # -- outbound ---------------------------------------------------------------------------

    def attach(self, engine_id: str, peer: str, qkey: str, now: float) -> OutQueue:
        """The link came up (after its handshake): make its queue (named ``qkey``, stable
        across restarts) if new, and send everything unacknowledged again, in order."""
        q = self.queues.get(qkey)
        if q is None:
            q = OutQueue(qkey, engine_id, peer, self._new_epoch(), 1)
            self.queues[qkey] = q
            self._save(q)
        elif q.engine_id != engine_id:
            q.engine_id = engine_id
            self._save(q)
        old = self.by_engine.get(engine_id)
        if old is not None and old is not q:
            old.up = False
        self.by_engine[engine_id] = q
        q.up = True
        q.sent_upto = q.base - 1
        q.last_ack = now
        return q

    def detach(self, engine_id: str, now: float) -> None:
        q = self.by_engine.get(engine_id)
        if q is not None and q.up:
            q.up = False
            q.down_since = now

    def set_meta(self, engine_id: str, meta: bytes | None) -> None:
        """What the node needs to restore this link's sticky routes after a restart."""
        q = self.by_engine.get(engine_id)
        if q is not None and q.meta != meta:
            q.meta = meta
            self._save(q)

    def put(self, engine_id: str, fields: list[Any]) -> bool:
        """Append a message (``fields``: a PMSGS entry without its lseq) to the queue of
        ``engine_id``; False if this link never came up (no queue: nothing to resume)."""
        q = self.by_engine.get(engine_id)
        if q is None:
            return False
        lseq = q.next_lseq
        q.next_lseq = lseq + 1
        blob: bytes = _packb([lseq, *fields])
        q.entries.append((lseq, blob))
        q.nbytes += len(blob)
        store = self._store
        store.fwd_put(q.qkey, lseq, blob)
        self._save(q)
        self.queued += 1
        if (self.max_msgs and len(q.entries) > self.max_msgs) or (
            self.max_bytes and q.nbytes > self.max_bytes
        ):
            self._trim(q)
        return True

    def room(self, engine_id: str, size: int) -> bool:
        """Can the queue of ``engine_id`` take one more entry of about ``size`` bytes within
        its bounds? (True when it has no queue: :meth:`put` handles that.)"""
        q = self.by_engine.get(engine_id)
        if q is None:
            return True
        return not (
            (self.max_msgs and len(q.entries) >= self.max_msgs)
            or (self.max_bytes and q.nbytes + size > self.max_bytes)
        )

    def _trim(self, q: OutQueue) -> None:
        """Drop the oldest entries until the queue fits its bounds (counted)."""
        entries = q.entries
        top = n = 0
        while len(entries) > 1 and (
            (self.max_msgs and len(entries) > self.max_msgs)
            or (self.max_bytes and q.nbytes > self.max_bytes)
        ):
            top, blob = entries.popleft()
            q.nbytes -= len(blob)
            n += 1
        if n:
            self._store.fwd_delete(q.qkey, top)
            q.dropped += n
            self.dropped_full += n
            self._drop("forward_overflow", n)

    def _save(self, q: OutQueue) -> None:
        self._store.fwd_queue(q.qkey, q.engine_id, q.peer, q.epoch, q.next_lseq, q.meta)

    def ready(self) -> Iterator[OutQueue]:
        """Queues of links that are up with entries not yet sent on this connection and
        room in their window."""
        for q in self.by_engine.values():
            if (
                q.up
                and q.entries
                and q.sent_upto < q.entries[-1][0]
                and q.sent_upto - q.base + 1 < WINDOW
            ):
                yield q

    def next_frame(self, q: OutQueue, limit: int, max_bytes: int = 0) -> tuple[bytes, int, int]:
        """The next PMSGS frame of ``q`` (at most ``limit`` entries and the window, and
        entries of at most ``max_bytes`` in all unless the first alone is larger; 0: no
        byte bound): (frame, its last lseq, entries). Call :meth:`sent` when it went out."""
        entries = q.entries
        first = q.sent_upto + 1
        start = max(0, first - entries[0][0])
        room = min(limit, WINDOW - max(0, q.sent_upto - q.base + 1))
        if room <= 0 or start >= len(entries):
            return b"", q.sent_upto, 0  # the window is full (or nothing is left)
        chunk: list[bytes] = []
        size = 0
        for _, blob in _islice(entries, start, start + room):
            size += len(blob)
            if max_bytes and size > max_bytes and chunk:
                break  # the next frame takes it: the receiver refuses frames past its limit
            chunk.append(blob)
        upto = entries[start + len(chunk) - 1][0]
        return wire.encode_pmsgs(q.epoch, q.base, chunk), upto, len(chunk)

    def next_size(self, q: OutQueue) -> int:
        """Bytes of the first entry not yet sent on this connection (0: none)."""
        entries = q.entries
        if not entries:
            return 0
        i = max(0, q.sent_upto + 1 - entries[0][0])
        return len(entries[i][1]) if i < len(entries) else 0

    def drop_next(self, q: OutQueue) -> bool:
        """Drop the first entry not yet sent, which no frame the peer accepts can hold
        (its max_frame_bytes is smaller than the publisher's node's). Only once it is the
        oldest entry held: frames carry ``base``, so the receiver stops waiting for it.
        False while entries before it are unacknowledged (call again after their PACK)."""
        entries = q.entries
        if not entries or q.sent_upto + 1 != entries[0][0]:
            return False
        lseq, blob = entries.popleft()
        q.nbytes -= len(blob)
        q.too_large += 1
        self.dropped_too_large += 1  # (the caller counts the drop: link_frame_too_large)
        q.sent_upto = lseq
        self._store.fwd_delete(q.qkey, lseq)
        return True

    def sent(self, q: OutQueue, upto: int, n: int) -> None:
        q.sent_upto = upto
        q.sent += n

    def on_ack(self, engine_id: str, epoch: int, upto: int, now: float) -> int:
        """A PACK from the receiver: delete what it covers; return how many."""
        q = self.by_engine.get(engine_id)
        if q is None or epoch != q.epoch:
            self.stale_acks += 1
            return 0
        entries = q.entries
        n = 0
        top = 0
        while entries and entries[0][0] <= upto:
            top, blob = entries.popleft()
            q.nbytes -= len(blob)
            n += 1
        if n:
            # only progress postpones a resend: the same position acknowledged again
            # means the receiver waits for an entry only a resend brings
            q.last_ack = now
            q.acked += n
            self._store.fwd_delete(q.qkey, top)
        if upto > q.sent_upto:
            q.sent_upto = upto  # the receiver has more than we sent (a resend after restart)
        return n

    def retransmit(self, now: float) -> None:
        """Send again what was sent but not acknowledged for :data:`RETRANSMIT_AFTER`
        seconds (a frame lost when a connection broke without the link going down)."""
        for q in self.by_engine.values():
            if q.up and q.entries and q.sent_upto >= q.base and now - q.last_ack > RETRANSMIT_AFTER:
                q.sent_upto = q.base - 1
                q.last_ack = now
                q.retransmits += 1

    def drop_queue(self, engine_id: str) -> int:
        """Forget a link's queue and its entries (its sticky routes expired); return how
        many entries were dropped."""
        q = self.by_engine.pop(engine_id, None)
        if q is None:
            return 0
        self.queues.pop(q.qkey, None)
        self._store.fwd_drop(q.qkey)
        return len(q.entries)

    # -- inbound ----------------------------------------------------------------------------

    def accept(self, ikey: str, epoch: int, base: int, lseq: int) -> bool:
        """Is entry ``lseq`` of the sender's queue ``epoch`` new here (take it now)?"""
        state = self.inbound.get(ikey)
        if state is None or state[0] != epoch:
            state = self.inbound[ikey] = [epoch, 0]
        last = state[1]
        if last < base - 1:
            # the sender dropped entries we never had (its queue bounds): stop waiting
            # (the count is capped per frame: a lying sender cannot overflow it)
            self.lost += min(base - 1 - last, 1 << 32)
            last = state[1] = base - 1
        if lseq <= last:
            self.duplicates += 1
            return False
        if lseq != last + 1:
            self.gaps += 1
            return False
        state[1] = lseq
        self._store.fwd_inbound(ikey, epoch, lseq)
        return True

    def expected(self, ikey: str, epoch: int, base: int) -> int:
        """The lseq :meth:`accept` would take next from the sender's queue ``epoch``
        (whose oldest entry held is ``base``): 1 for a new epoch (the sender's store was
        wiped), past what the sender dropped."""
        state = self.inbound.get(ikey)
        last = state[1] if state is not None and state[0] == epoch else 0
        return max(last, base - 1) + 1

    def position(self, ikey: str) -> tuple[int, int] | None:
        """(epoch, last lseq taken) of an inbound link: what a PACK acknowledges."""
        state = self.inbound.get(ikey)
        return None if state is None else (state[0], state[1])

    # -- status -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "queued": self.queued,
            "held": sum(len(q.entries) for q in self.queues.values()),
            "held_bytes": sum(q.nbytes for q in self.queues.values()),
            "duplicates": self.duplicates,
            "gaps": self.gaps,
            "lost": self.lost,
            "stale_acks": self.stale_acks,
            "dropped_full": self.dropped_full,
            "dropped_too_large": self.dropped_too_large,
            "max_msgs": self.max_msgs,
            "max_bytes": self.max_bytes,
            "queues": [q.describe() for q in sorted(self.queues.values(), key=lambda q: q.qkey)],
        }


def _islice(
    d: collections.deque[tuple[int, bytes]], start: int, stop: int
) -> Iterator[tuple[int, bytes]]:
    return itertools.islice(d, start, stop)
