"""``Store``: the one object the node uses; it composes the per-table parts over one
SQLite connection and commits what they queued in one transaction per poll pass.

The parts' operations are bound to the store as attributes (``store.retain`` is
``store.retention.retain``): the node calls several of them per message, and a delegating
method would add a Python call to each. What spans parts is written here: the commit
(its order), deleting a durable (commits first), closing, the status.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import batches, db, durables, link_queues, meta, producers, retention, seen, staged
from .batches import WriterBatches
from .durable_moves import DurableMoves
from .durables import DurableQueues
from .link_queues import LinkQueues
from .producers import Producers
from .retention import RetainRule, RetentionLog
from .seen import SeenJournal
from .staged import StagedCommits

__all__ = ["AGE_SWEEP", "Store"]

#: seconds between two applications of ``max_age`` to rules and durables that took
#: nothing new (what takes a message has its bounds applied in that commit)
AGE_SWEEP = 1.0

_SCHEMAS = (
    retention.SCHEMA,
    meta.SCHEMA,
    durables.SCHEMA,
    batches.SCHEMA,
    link_queues.SCHEMA,
    producers.SCHEMA,
    staged.SCHEMA,
    seen.SCHEMA,
)


class Store:
    """SQLite-backed store of one node: retention log, durable queues, link queues, writer
    batches, idempotent producers (used by the node's I/O thread only)."""

    def __init__(
        self, path: Path, rules: tuple[RetainRule, ...] = (), *, fsync: bool = False
    ) -> None:
        self.path = path
        #: the connection the parts share (the node's I/O thread only)
        self.db = db.connect(path, _SCHEMAS, fsync=fsync)
        self.drops = meta.DropCounts(self.db)
        #: what the bounds dropped, by reason (retention log and durable queues)
        self.dropped = self.drops.counts
        self.retention = log = RetentionLog(self.db, rules, self.drops)
        self.rules = log.rules
        self.retain_rule = log.retain_rule
        self.retain = log.retain
        self.rejects = log.rejects
        self.overflowing_rule = log.overflowing_rule
        self.expired_upto = log.expired_upto
        self.first_seq = log.first_seq
        self.read = log.read
        self.read_page = log.read_page
        self.durable_queues = dq = DurableQueues(self.db, self.drops)
        self.durables = dq.load
        self.durable_selectors = dq.selectors
        self.create_durable = dq.create
        self.set_attached = dq.set_attached
        self.durable_depth = dq.depth
        self.durable_dropped = dq.dropped
        self.durable_rejects = dq.rejects
        self.durable_overflow = dq.overflowed
        self.enqueue = dq.enqueue
        self.pending_durable = dq.pending
        self.mark_delivered = dq.mark_delivered
        self.ack = dq.ack
        self.ack_each = dq.ack_each
        self.durable_rows = dq.rows
        #: how often each stored message has moved between nodes (a shared durable's moves)
        self.durable_moves = DurableMoves(self.db)
        self.link_queues = lq = LinkQueues(self.db)
        self.fwd_load = lq.load
        self.fwd_queue = lq.queue
        self.fwd_put = lq.put
        self.fwd_delete = lq.delete
        self.fwd_drop = lq.drop
        self.fwd_inbound = lq.inbound
        self.fwd_stored = lq.stored
        self.writer_batches = wb = WriterBatches(self.db)
        self.batch_applied = wb.applied
        self.record_batch = wb.record
        #: the (producer, pseq) of idempotent persistent publishes taken
        self.producers = Producers(self.db)
        #: staged commits stored and not yet wholly published
        self.staged = StagedCommits(self.db)
        #: the persistent-message dedupe's state (store-and-forward)
        self.seen = SeenJournal(self.db)
        self._next_sweep = 0.0  # (monotonic) the next max_age sweep

    @property
    def last_seq(self) -> int:
        """The newest retention sequence handed out (queued or committed)."""
        return self.retention.last_seq

    @property
    def retained(self) -> int:
        """Rows this process wrote to the retention log (committed)."""
        return self.retention.retained

    def refuses_new(self) -> bool:
        """Does a retention rule or a durable here refuse what does not fit
        (``reject-new``)? Only then can admission refuse for them."""
        return self.durable_queues.any_reject_new() or any(
            r.overflow == "reject-new" for r in self.rules.values()
        )

    @property
    def trim_hold(self) -> set[str]:
        """Durables the node will pump this pass: their trims wait for the pump's commit."""
        return self.durable_queues.trim_hold

    @trim_hold.setter
    def trim_hold(self, names: set[str]) -> None:
        self.durable_queues.trim_hold = names

    def commit(self) -> int:
        """Write everything queued in one transaction, then apply the bounds (``max_age``
        also every :data:`AGE_SWEEP` seconds without new rows). Returns the number of
        retained rows written, or, when there are none, of durable and link queue
        entries."""
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + AGE_SWEEP
        if not (
            sweep
            or self.retention.dirty()
            or self.durable_queues.dirty()
            or self.durable_moves.dirty()
            or self.link_queues.dirty()
            or self.writer_batches.dirty()
            or self.producers.dirty()
            or self.staged.dirty()
            or self.seen.dirty()
            or self.drops.dirty()
        ):
            return 0
        with db.transaction(self.db):
            # durable marks before trims (in flight is not trimmed), all before the drop
            # counts, which every trim adds to
            queued = self.durable_queues.write()
            self.durable_moves.write()  # (after the rows they are about)
            self.writer_batches.write()
            self.producers.write()
            self.staged.write()
            self.seen.write()
            queued += self.link_queues.write()
            retained = self.retention.write()
            if sweep:
                wall = time.time()
                self.retention.expire_aged(wall)
                self.durable_queues.expire_aged(wall)
            self.drops.write(self.db)
        if not retained:
            return queued
        self.retention.retained += retained
        return retained

    def delete_durable(self, name: str) -> int:
        """Delete a durable subscription and its stored messages; return how many."""
        self.commit()
        return self.durable_queues.delete(name)

    def close(self) -> None:
        try:
            self.commit()
        finally:  # (a write that fails, a full disk, still releases the file)
            self.db.close()

    def stats(self) -> dict[str, Any]:
        log = self.retention
        return {
            "path": str(self.path),
            "first_seq": log.first_seq(),
            "last_seq": log.last_seq,
            "retained_rows": log.row_count(),
            "dropped": dict(sorted(self.dropped.items())),
            "rules": log.rule_stats(),
        }
