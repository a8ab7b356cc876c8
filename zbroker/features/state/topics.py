"""The stateful topics one node holds: its table (:mod:`zbroker.store.state`), a trie to
find what a pattern matches, and the writes: set, remove, and replicas taken from a
primary. Each write returns the message that tells subscribers (the feature publishes it).

Tombstones expire: one written more than ``[state] tombstone_ttl`` ago is no longer
listed and is deleted (:meth:`StateTopics.expire`, from the feature's tick, in bounded
batches). Without it, topics named after sessions or orders, each set once and removed,
would grow the table, the store and every fetch and snapshot answer without bound. The
ttl is bounded below by what relies on a tombstone (the minimum's comment in
:mod:`zbroker.config.node`); beyond it, what a tombstone stops no longer can: a node that
was cut off while a removal ran, and still holds the topic's older value (its own, or a
replica whose primary it never heard from again), makes it visible again once every
tombstone of it expired, as a node down longer than Cassandra's ``gc_grace_seconds``
does. A new value set after the expiry is stamped from the clock as any first value is.
"""

from __future__ import annotations

import time
from typing import Any

from ...stateful import OWNER, REMOVED, VERSION, Value, next_version
from ...store.state import StateRow, StateTable
from ...sublist import TopicTrie

__all__ = ["EXPIRE_BATCH", "StateTopics", "update_headers"]

#: tombstones deleted per call of :meth:`StateTopics.expire` (each tick, and each pass
#: while more are due): a few milliseconds of the loop, whatever piled up (a restart
#: after days away)
EXPIRE_BATCH = 1000

#: a message to publish: (topic, payload, fmt, headers)
Publish = tuple[str, bytes, int, dict[str, Any]]


def update_headers(
    headers: dict[str, Any] | None, version: int, owner: str, removed: bool = False
) -> dict[str, Any]:
    """The headers of the message that carries a value (or a removal: with the headers
    of the value it removes, so a subscription whose selector took the value takes its
    removal too)."""
    out = dict(headers) if headers else {}
    out[VERSION] = version
    out[OWNER] = owner
    if removed:
        out[REMOVED] = True
    return out


class StateTopics:
    def __init__(self, table: StateTable, me: str, tombstone_ttl: float = 86_400.0) -> None:
        self.table = table
        self.me = me
        self.tombstone_ttl = tombstone_ttl
        self.trie = TopicTrie()
        for topic in table.rows:
            self.trie.add(topic)
        self.expired = 0  # tombstones expired since the node started
        self.expiry_due = False  # the last batch was full: more may be due now

    def expire(self, now: float) -> int:
        """Delete up to :data:`EXPIRE_BATCH` tombstones older than the ttl at wall-clock
        time ``now``, from memory now and from the store at the next write; how many."""
        gone = self.table.expire(now - self.tombstone_ttl, EXPIRE_BATCH)
        for topic in gone:
            self.trie.discard(topic)
        self.expired += len(gone)
        self.expiry_due = len(gone) == EXPIRE_BATCH
        return len(gone)

    def _version(self, topic: str) -> int:
        row = self.table.rows.get(topic)
        return next_version(time.time_ns() // 1000, 0 if row is None else row.version)

    def set(
        self, topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None
    ) -> tuple[int, Publish]:
        """This node becomes (or stays) the topic's owner: its version, and the update."""
        version = self._version(topic)
        self.table.put(StateRow(topic, payload, fmt, headers, version, self.me, time.time()))
        self.trie.add(topic)
        return version, (topic, payload, fmt, update_headers(headers, version, self.me))

    def remove(self, pattern: str) -> list[Publish]:
        """Remove the topics ``pattern`` matches that this node owns (replicas go when
        their primary removes them): a tombstone each, and the removal to publish."""
        out: list[Publish] = []
        rows = self.table.rows
        for topic in self.trie.match(pattern):
            row = rows[topic]
            if row.removed or row.replica_of is not None:
                continue
            version = self._version(topic)
            self.table.put(StateRow(topic, b"", 0, None, version, self.me, time.time(), True))
            out.append((topic, b"", 0, update_headers(row.headers, version, self.me, True)))
        return out

    def values(self, pattern: str) -> tuple[list[Value], list[list[Any]]]:
        """(current values, removals ``[topic, version, owner]``) ``pattern`` matches; a
        tombstone past the ttl that the next batches have yet to delete is not listed."""
        rows = self.table.rows
        values: list[Value] = []
        gone: list[list[Any]] = []
        oldest = time.time() - self.tombstone_ttl
        for topic in self.trie.match(pattern):
            row = rows[topic]
            if row.removed:
                if row.updated >= oldest:
                    gone.append([topic, row.version, row.owner])
            else:
                values.append(row.value())
        return values, gone

    def count(self) -> dict[str, int]:
        owned = replicas = tombstones = 0
        for row in self.table.rows.values():
            if row.removed:
                tombstones += 1
            elif row.replica_of is None:
                owned += 1
            else:
                replicas += 1
        return {"owned": owned, "replicas": replicas, "tombstones": tombstones}
