"""Idempotent producers (table ``producers``): which ``(producer, pseq)`` this node took,
and as what, so that a persistent publish sent again (a client's retry, or a second copy
that came by another node after a client failover) is recognised and not stored twice.

A client numbers its persistent publishes ``pseq`` = 1, 2, ... under a random ``producer``
id (one per ``Client``). A node records every such message it takes — from the client, or
from a link — with the message ID it has and, for one taken from the client, its retention
log sequence, in the same store transaction as the message itself: a node restarted after
the commit still recognises the retry, one killed before it took neither.

A row is a run: ``pseq .. last`` taken as ``seq .. seq + (last - pseq)`` (and retention
sequences likewise, or none), so that a client's stream of publishes costs about a row per
store pass, not one per message.

Bounds (memory: one entry per producer; rows: runs covering at most
``PRODUCER_WINDOW + _PRUNE_EVERY`` sequences per producer, and one that straddles that):

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
from typing import Any, Final

from ..wire.frames import PRODUCER_WINDOW

__all__ = ["FORGOTTEN", "MAX_PRODUCERS", "PRODUCER_WINDOW", "SCHEMA", "Producers", "Taken"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS producers (
    producer INTEGER NOT NULL,
    pseq     INTEGER NOT NULL,
    last     INTEGER NOT NULL,
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
        #: the newest pseq taken per producer (least recently heard of first); a pseq
        #: above it was never taken (the common case, tested without a call)
        self.newest: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._pruned: dict[int, int] = {}  # producer -> newest when its rows were pruned
        for producer, newest in db.execute(
            "SELECT producer, MAX(last) FROM producers GROUP BY producer ORDER BY MAX(ts)"
        ):
            self.newest[producer] = newest
            self._pruned[producer] = newest
        # runs of this pass, as written: [producer, pseq, last, origin, inc, seq, retained, ts]
        self._pending: list[list[Any]] = []
        self._open: dict[int, list[Any]] = {}  # producer -> its run of this pass
        self._forget: list[int] = []
        #: retries and second copies recognised (answered or dropped, not stored again)
        self.duplicates = 0

    def __len__(self) -> int:
        return len(self.newest)

    def check(self, producer: int, pseq: int) -> Taken | None:
        """What ``(producer, pseq)`` was taken as; None if it never was; :data:`FORGOTTEN`
        if it is older than the window (it may have been)."""
        newest = self.newest.get(producer)
        if newest is None or pseq > newest:
            return None  # (the common case: no lookup)
        if pseq <= newest - PRODUCER_WINDOW:
            return FORGOTTEN
        for run in reversed(self._pending):  # (a retry within the pass: rare)
            if run[0] == producer and run[1] <= pseq <= run[2]:
                return _at((run[1], *run[3:7]), pseq)
        # (runs of one producer overlap only where one was taken again below the window)
        row = self._db.execute(
            "SELECT pseq, origin, inc, seq, retained FROM producers"
            " WHERE producer=? AND pseq<=? AND last>=? ORDER BY pseq DESC LIMIT 1",
            (producer, pseq, pseq),
        ).fetchone()
        return None if row is None else _at(row, pseq)

    def record(self, producer: int, pseq: int, taken: Taken, ts: float) -> None:
        """Queue the record that ``(producer, pseq)`` was taken as ``taken``; it is written
        in the pass's transaction, with the message."""
        origin, inc, seq, retained = taken
        run = self._open.get(producer)
        if (
            run is not None
            and pseq == run[2] + 1
            and seq - run[5] == pseq - run[1]
            and inc == run[4]
            and origin == run[3]
            and (
                retained - run[6] == pseq - run[1]
                if retained is not None and run[6] is not None
                else retained is run[6]  # (both None)
            )
        ):
            run[2] = pseq  # the run goes on: no new row
        else:
            run = [producer, pseq, pseq, origin, inc, seq, retained, ts]
            self._pending.append(run)
            self._open[producer] = run
        newest_of = self.newest
        newest = newest_of.get(producer)
        if newest is not None:
            newest_of.move_to_end(producer)  # (least recently heard of first)
            if pseq > newest:
                newest_of[producer] = pseq
        else:
            newest_of[producer] = pseq
            self._pruned[producer] = pseq
            if len(self.newest) > MAX_PRODUCERS:
                gone, _ = self.newest.popitem(last=False)
                self._pruned.pop(gone, None)
                self._forget.append(gone)

    def dirty(self) -> bool:
        return bool(self._pending or self._forget)

    def write(self) -> None:
        """Write the queued records (inside the store's transaction) and prune."""
        pending, self._pending = self._pending, []
        self._open.clear()
        forget, self._forget = self._forget, []
        db = self._db
        if pending:
            # a pair taken again below the window (a late copy) may start where a stored
            # run starts: that run stays whole (replacing it would forget its pairs
            # inside the window), and it says the pair was taken, which is still true
            db.executemany("INSERT OR IGNORE INTO producers VALUES (?,?,?,?,?,?,?,?)", pending)
        newest, pruned = self.newest, self._pruned
        for producer in set(map(_first, pending)):  # (at C speed: one pass, few producers)
            top = newest.get(producer)
            if top is not None and top - pruned.get(producer, top) >= _PRUNE_EVERY:
                db.execute(
                    "DELETE FROM producers WHERE producer=? AND last<=?",
                    (producer, top - PRODUCER_WINDOW),
                )
                pruned[producer] = top
        for producer in forget:
            if producer not in newest:  # (not heard of again since)
                db.execute("DELETE FROM producers WHERE producer=?", (producer,))


def _at(run: Any, pseq: int) -> Taken:
    """What ``pseq`` was taken as, in a run ``(pseq, origin, inc, seq, retained)``."""
    k = pseq - run[0]
    retained = run[4]
    return (run[1], run[2], run[3] + k, None if retained is None else retained + k)
