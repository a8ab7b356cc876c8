"""The node's store: SQLite in the data directory (WAL mode, batched commits), one module
per table family.

* :mod:`~zbroker.store.retention` -- the **retention log** (``retained``): messages whose
  topic matches a configured ``retain`` rule, numbered by a per-node sequence, bounded per
  rule, readable by range;
* :mod:`~zbroker.store.durables` -- **durable subscriptions** (``durables``, ``dqueue``):
  per-subscription queues kept until acknowledged, bounded per subscription;
* :mod:`~zbroker.store.link_queues` -- **link queues** (``fwd_*``): store-and-forward of
  persistent messages per directed link (the logic is :mod:`zbroker.forward`'s);
* :mod:`~zbroker.store.batches` -- **writer batches** (``writer_batches``): staged writes
  already applied, so a batch Spark replays is applied once;
* :mod:`~zbroker.store.producers` -- **idempotent producers** (``producers``): the
  ``(producer, pseq)`` of persistent publishes taken, so a retry is not stored twice;
* :mod:`~zbroker.store.staged` -- **staged commits** (``staged_*``): a commit stored whole
  before it is published, its slices removed as they go out, so a killed node resumes it;
* :mod:`~zbroker.store.seen` -- **persistent messages seen** (``pseen_*``): the
  store-and-forward dedupe's state, so a restarted node still drops a second path's copy;
* :mod:`~zbroker.store.meta` -- the ``meta`` table (the sequence, expiry watermarks, drop
  counters); :mod:`~zbroker.store.bounds` -- what the bounded tables share;
* :mod:`~zbroker.store.db` -- the connection and its transactions;
* :mod:`~zbroker.store.facade` -- :class:`Store`, the one object the node uses.

Writes are queued during a poll pass and committed once at its end (:meth:`Store.commit`),
so a burst of messages costs one transaction; a persistent publish is confirmed only after
the commit that holds it. WAL with ``synchronous=NORMAL`` survives a killed process (the
WAL is replayed on open); ``synchronous=FULL`` (``fsync=True``) also survives power loss.

The store is used by one thread only (the node's I/O thread).
"""

from __future__ import annotations

from .batches import WRITER_BATCHES_KEPT
from .bounds import OVERFLOW_POLICIES
from .facade import Store
from .retention import RetainRule

__all__ = ["OVERFLOW_POLICIES", "WRITER_BATCHES_KEPT", "RetainRule", "Store"]
