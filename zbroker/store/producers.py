"""Idempotent producers (table ``producers``): which ``(producer, pseq)`` this node took,
and as what, so that a persistent publish sent again (a client's retry, or a second copy
that came by another node after a client failover) is recognised and not stored twice.

A client numbers its persistent publishes ``pseq`` = 1, 2, ... under a random ``producer``
id (one per ``Client``). A node records every such message it takes — from the client, or
from a link — with the message ID it has and, for one taken from the client, its retention
log sequence, in the same store transaction as the message itself: a node restarted after
the commit still recognises the retry, one killed before it took neither.

Bounds (memory: one entry per producer; rows: at most ``PRODUCER_WINDOW + _PRUNE_EVERY``
per producer):

* per producer, the sequences above ``newest - PRODUCER_WINDOW`` (``newest``: the highest
  taken): :meth:`Producers.check` answers exactly for them. An older one is
  :data:`FORGOTTEN` (it may or may not have been taken);
* at most :data:`MAX_PRODUCERS` producers: past it, the one least recently heard of is
  forgotten whole (its retries are then taken as new).
"""

from __future__ import annotations

import collections
import operator
import sqlite3
from typing import Final

from ..wire.frames import PRODUCER_WINDOW

__all__ = ["FORGOTTEN", "MAX_PRODUCERS", "PRODUCER_WINDOW", "SCHEMA", "Producers", "Taken"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS producers (
    producer INTEGER NOT NULL,
    pseq     INTEGER NOT NULL,
    origin   TEXT NOT NULL,
    inc      INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    retained INTEGER,
    ts       REAL NOT NULL,
    PRIMARY KEY (producer, pseq)
) WITHOUT ROWID;
"""

#: producers remembered; the one least recently heard of is forgotten first
MAX_PRODUCERS = 10_000
#: rows of a producer are pruned once its newest sequence moved this far
_PRUNE_EVERY = 256

#: what a taken ``(producer, pseq)`` was: (origin, incarnation, seq, retention log seq or None)
Taken = tuple[str, int, int, int | None]
#: :meth:`Producers.check`'s answer for a sequence older than the window: cannot tell
FORGOTTEN: Final[Taken] = ("", -1, -1, None)
_first = operator.itemgetter(0)


class Producers:
    """The ``(producer, pseq)`` this node took: the newest per producer in memory (least
    recently heard of first), the rows in the store, those of this pass queued."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._newest: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._pruned: dict[int, int] = {}  # producer -> newest when its rows were pruned
        for producer, newest in db.execute(
            "SELECT producer, MAX(pseq) FROM producers GROUP BY producer ORDER BY MAX(ts)"
        ):
            self._newest[producer] = newest
            self._pruned[producer] = newest
        # rows of this pass, as written (a list: no per-message dict or tuple key)
        self._pending: list[tuple[int, int, str, int, int, int | None, float]] = []
        self._forget: list[int] = []
        #: retries and second copies recognised (answered or dropped, not stored again)
        self.duplicates = 0

    def __len__(self) -> int:
        return len(self._newest)

    def check(self, producer: int, pseq: int) -> Taken | None:
        """What ``(producer, pseq)`` was taken as; None if it never was; :data:`FORGOTTEN`
        if it is older than the window (it may have been)."""
        newest = self._newest.get(producer)
        if newest is None or pseq > newest:
            return None  # (the common case: no lookup)
        if pseq <= newest - PRODUCER_WINDOW:
            return FORGOTTEN
        for row in reversed(self._pending):  # (a retry within the pass: rare)
            if row[1] == pseq and row[0] == producer:
                return row[2:6]
        row = self._db.execute(
            "SELECT origin, inc, seq, retained FROM producers WHERE producer=? AND pseq=?",
            (producer, pseq),
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def record(self, producer: int, pseq: int, taken: Taken, ts: float) -> None:
        """Queue the record that ``(producer, pseq)`` was taken as ``taken``; it is written
        in the pass's transaction, with the message."""
        self._pending.append((producer, pseq, *taken, ts))
        newest_of = self._newest
        newest = newest_of.get(producer)
        if newest is not None:
            newest_of.move_to_end(producer)  # (least recently heard of first)
            if pseq > newest:
                newest_of[producer] = pseq
        else:
            newest_of[producer] = pseq
            self._pruned[producer] = pseq
            if len(self._newest) > MAX_PRODUCERS:
                gone, _ = self._newest.popitem(last=False)
                self._pruned.pop(gone, None)
                self._forget.append(gone)

    def dirty(self) -> bool:
        return bool(self._pending or self._forget)

    def write(self) -> None:
        """Write the queued records (inside the store's transaction) and prune."""
        pending, self._pending = self._pending, []
        forget, self._forget = self._forget, []
        db = self._db
        if pending:
            db.executemany("INSERT OR REPLACE INTO producers VALUES (?,?,?,?,?,?,?)", pending)
        newest, pruned = self._newest, self._pruned
        for producer in set(map(_first, pending)):  # (at C speed: one pass, few producers)
            top = newest.get(producer)
            if top is not None and top - pruned.get(producer, top) >= _PRUNE_EVERY:
                db.execute(
                    "DELETE FROM producers WHERE producer=? AND pseq<=?",
                    (producer, top - PRODUCER_WINDOW),
                )
                pruned[producer] = top
        for producer in forget:
            if producer not in newest:  # (not heard of again since)
                db.execute("DELETE FROM producers WHERE producer=?", (producer,))
