"""The ``state_topics`` table: the current value of every stateful topic this node holds
(its own, and replicas of a primary's), and the tombstones of removed ones.

Held in memory too (the node answers fetches and snapshots from memory); writes are queued
and written by :meth:`StateTable.write` in one transaction per pass, before the pass's
replies leave, so a ``set`` that was answered survives ``kill -9``.

A tombstone's ``updated`` is when this node wrote it (wall clock, so it holds across a
restart): :meth:`StateTable.expire` deletes those older than the node's ``[state]
tombstone_ttl``, oldest first, from memory and (at the next :meth:`~StateTable.write`)
from the file.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgpack

from .db import transaction

__all__ = ["SCHEMA", "StateRow", "StateTable"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS state_topics (
    topic TEXT PRIMARY KEY,
    payload BLOB NOT NULL,
    fmt INTEGER NOT NULL,
    headers BLOB,
    version INTEGER NOT NULL,
    owner TEXT NOT NULL,
    updated REAL NOT NULL,
    removed INTEGER NOT NULL DEFAULT 0,
    replica_of TEXT
);
"""


class StateRow:
    """One topic's current value (or tombstone, ``removed``)."""

    __slots__ = (
        "fmt",
        "headers",
        "owner",
        "payload",
        "removed",
        "replica_of",
        "topic",
        "updated",
        "version",
    )

    def __init__(
        self,
        topic: str,
        payload: bytes,
        fmt: int,
        headers: dict[str, Any] | None,
        version: int,
        owner: str,
        updated: float,
        removed: bool = False,
        replica_of: str | None = None,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.fmt = fmt
        self.headers = headers
        self.version = version
        self.owner = owner
        self.updated = updated
        self.removed = removed
        self.replica_of = replica_of

    def value(self) -> list[Any]:
        """As nodes exchange it (:data:`zbroker.stateful.Value`)."""
        return [
            self.topic,
            self.payload,
            self.fmt,
            self.headers,
            self.version,
            self.owner,
            self.updated,
            self.replica_of,
        ]


class StateTable:
    """Rows by topic, and the writes the next :meth:`write` makes."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        db.executescript(SCHEMA)
        self.rows: dict[str, StateRow] = {}
        self._dirty: dict[str, StateRow | None] = {}  # topic -> row to write, None: delete
        #: the tombstones' topics in the order they were written, the oldest first (a
        #: tombstone written again moves to the end): :meth:`expire` looks at the head
        #: only, and a topic churned through set and remove is one entry, not one per
        #: removal. (A wall clock stepped back puts a younger stamp behind an older one:
        #: it expires late, by the step, never early.)
        self._tombstones: dict[str, None] = {}
        # (by time written: the tombstones' order survives the restart)
        for r in db.execute(
            "SELECT topic, payload, fmt, headers, version, owner, updated, removed, replica_of"
            " FROM state_topics ORDER BY updated"
        ):
            headers = msgpack.unpackb(r[3]) if r[3] is not None else None
            row = StateRow(r[0], r[1], r[2], headers, r[4], r[5], r[6], bool(r[7]), r[8])
            self.rows[r[0]] = row
            if row.removed:
                self._tombstones[r[0]] = None

    def put(self, row: StateRow) -> None:
        self.rows[row.topic] = row
        self._dirty[row.topic] = row
        self._tombstones.pop(row.topic, None)
        if row.removed:
            self._tombstones[row.topic] = None

    def delete(self, topic: str) -> None:
        if self.rows.pop(topic, None) is not None:
            self._dirty[topic] = None
        self._tombstones.pop(topic, None)

    def expire(self, before: float, limit: int) -> list[str]:
        """Delete up to ``limit`` tombstones written before ``before`` (wall clock), the
        oldest first; return their topics."""
        out: list[str] = []
        rows, tombstones = self.rows, self._tombstones
        for topic in tombstones:
            if len(out) >= limit or rows[topic].updated >= before:
                break
            out.append(topic)
        for topic in out:
            del rows[topic], tombstones[topic]
            self._dirty[topic] = None
        return out

    def dirty(self) -> bool:
        return bool(self._dirty)

    def write(self) -> int:
        """Write the queued changes in one transaction; return how many."""
        if not self._dirty:
            return 0
        changes, self._dirty = self._dirty, {}
        puts = [
            (
                r.topic,
                r.payload,
                r.fmt,
                None if r.headers is None else msgpack.packb(r.headers),
                r.version,
                r.owner,
                r.updated,
                int(r.removed),
                r.replica_of,
            )
            for r in changes.values()
            if r is not None
        ]
        gone = [(t,) for t, r in changes.items() if r is None]
        with transaction(self._db) as db:
            if puts:
                db.executemany(
                    "INSERT OR REPLACE INTO state_topics (topic, payload, fmt, headers, "
                    "version, owner, updated, removed, replica_of) VALUES (?,?,?,?,?,?,?,?,?)",
                    puts,
                )
            if gone:
                db.executemany("DELETE FROM state_topics WHERE topic = ?", gone)
        return len(changes)
