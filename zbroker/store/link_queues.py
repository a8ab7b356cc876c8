"""Link queues (tables ``fwd_queues``, ``fwd_out``, ``fwd_in``): store-and-forward of
persistent messages; the logic is :mod:`zbroker.forward`'s, the SQL is here.

Per directed link an outbound queue (``fwd_queues``: epoch, next link sequence, what is
needed to restore the link's sticky routes after a restart; ``fwd_out``: the encoded
entries not yet acknowledged by the next node), and per inbound link the last sequence
stored (``fwd_in``), written in the same transaction as what the entries produced here.
"""

from __future__ import annotations

import sqlite3
from typing import Protocol

__all__ = ["SCHEMA", "ForwardStore", "LinkQueues"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS fwd_queues (
    qkey      TEXT PRIMARY KEY,
    engine_id TEXT NOT NULL,
    peer      TEXT NOT NULL,
    epoch     INTEGER NOT NULL,
    next_lseq INTEGER NOT NULL,
    meta      BLOB
);
CREATE TABLE IF NOT EXISTS fwd_out (
    qkey      TEXT NOT NULL,
    lseq      INTEGER NOT NULL,
    entry     BLOB NOT NULL,
    PRIMARY KEY (qkey, lseq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fwd_in (
    ikey      TEXT PRIMARY KEY,
    epoch     INTEGER NOT NULL,
    last_lseq INTEGER NOT NULL
);
"""


class LinkQueues:
    """The link queues as stored, and the changes queued for the next commit: upserted
    queue rows, new entries, acknowledged entries (delete <= upto), dropped queues and
    inbound positions."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._queues: dict[str, tuple[str, str, int, int, bytes | None]] = {}
        self._put: list[tuple[str, int, bytes]] = []
        self._delete: dict[str, int] = {}
        self._drop: set[str] = set()
        self._inbound: dict[str, tuple[int, int]] = {}

    def load(
        self,
    ) -> tuple[
        list[tuple[str, str, str, int, int, bytes | None]],
        list[tuple[str, int, bytes]],
        list[tuple[str, int, int]],
    ]:
        """(queues, unacknowledged entries in order, inbound positions) as stored."""
        db = self._db
        queues = list(
            db.execute("SELECT qkey, engine_id, peer, epoch, next_lseq, meta FROM fwd_queues")
        )
        entries = list(db.execute("SELECT qkey, lseq, entry FROM fwd_out ORDER BY qkey, lseq"))
        inbound = list(db.execute("SELECT ikey, epoch, last_lseq FROM fwd_in"))
        return queues, entries, inbound

    def queue(
        self, qkey: str, engine_id: str, peer: str, epoch: int, next_lseq: int, meta: bytes | None
    ) -> None:
        # (a queue dropped this pass stays in _drop: the write deletes the old rows
        # first, then writes this one and its new entries)
        self._queues[qkey] = (engine_id, peer, epoch, next_lseq, meta)

    def put(self, qkey: str, lseq: int, entry: bytes) -> None:
        self._put.append((qkey, lseq, entry))

    def delete(self, qkey: str, upto: int) -> None:
        """Delete the entries of ``qkey`` with lseq <= upto (acknowledged, or dropped)."""
        self._delete[qkey] = max(upto, self._delete.get(qkey, 0))

    def drop(self, qkey: str) -> None:
        """Delete a queue and its entries."""
        self._queues.pop(qkey, None)
        self._put = [p for p in self._put if p[0] != qkey]
        self._delete.pop(qkey, None)
        self._drop.add(qkey)

    def inbound(self, ikey: str, epoch: int, last_lseq: int) -> None:
        self._inbound[ikey] = (epoch, last_lseq)

    def stored(self) -> int:
        """Link-queue entries in the database (committed)."""
        return int(self._db.execute("SELECT COUNT(*) FROM fwd_out").fetchone()[0])

    def dirty(self) -> bool:
        return bool(self._put or self._delete or self._inbound or self._queues or self._drop)

    def write(self) -> int:
        """Write the queued changes (inside the store's transaction); returns the number
        of entries written."""
        db = self._db
        for qkey in self._drop:
            db.execute("DELETE FROM fwd_out WHERE qkey=?", (qkey,))
            db.execute("DELETE FROM fwd_queues WHERE qkey=?", (qkey,))
        if self._queues:
            db.executemany(
                "INSERT OR REPLACE INTO fwd_queues VALUES (?,?,?,?,?,?)",
                [(k, *v) for k, v in self._queues.items()],
            )
        if self._put:
            db.executemany("INSERT OR REPLACE INTO fwd_out VALUES (?,?,?)", self._put)
        if self._delete:
            db.executemany(
                "DELETE FROM fwd_out WHERE qkey=? AND lseq<=?", list(self._delete.items())
            )
        if self._inbound:
            db.executemany(
                "INSERT OR REPLACE INTO fwd_in VALUES (?,?,?)",
                [(k, e, n) for k, (e, n) in self._inbound.items()],
            )
        n = len(self._put)
        self._drop.clear()
        self._queues.clear()
        self._put.clear()
        self._delete.clear()
        self._inbound.clear()
        return n


class ForwardStore(Protocol):
    """What the forwarder (:mod:`zbroker.features.forward.queues`) needs of
    :class:`zbroker.store.Store`: these queues, as the store binds them."""

    def fwd_load(
        self,
    ) -> tuple[
        list[tuple[str, str, str, int, int, bytes | None]],
        list[tuple[str, int, bytes]],
        list[tuple[str, int, int]],
    ]: ...

    def fwd_queue(
        self, qkey: str, engine_id: str, peer: str, epoch: int, next_lseq: int, meta: bytes | None
    ) -> None: ...

    def fwd_put(self, qkey: str, lseq: int, entry: bytes) -> None: ...

    def fwd_delete(self, qkey: str, upto: int) -> None: ...

    def fwd_drop(self, qkey: str) -> None: ...

    def fwd_inbound(self, ikey: str, epoch: int, last_lseq: int) -> None: ...
