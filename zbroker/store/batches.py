"""Writer batches (table ``writer_batches``): the ``(writer, batch)`` pairs of staged
writes already applied (see :mod:`zbroker.staging`), so a batch Spark replays after a
restart is applied once. The newest :data:`WRITER_BATCHES_KEPT` per writer are kept.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["SCHEMA", "WRITER_BATCHES_KEPT", "WriterBatches"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS writer_batches (
    writer   TEXT NOT NULL,
    batch    INTEGER NOT NULL,
    rows     INTEGER NOT NULL,
    at       REAL NOT NULL,
    PRIMARY KEY (writer, batch)
) WITHOUT ROWID;
"""

#: Committed batch records kept per writer: Spark replays at most the last few batches.
WRITER_BATCHES_KEPT = 1000


class WriterBatches:
    """The applied batches as stored, and those recorded for the next commit."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._pending: list[tuple[str, int, int, float]] = []

    def applied(self, writer: str, batch: int) -> bool:
        """Was ``(writer, batch)`` applied already (committed, or queued in this pass)?"""
        if any(w == writer and b == batch for w, b, _, _ in self._pending):
            return True
        row = self._db.execute(
            "SELECT 1 FROM writer_batches WHERE writer=? AND batch=?", (writer, batch)
        ).fetchone()
        return row is not None

    def record(self, writer: str, batch: int, rows: int) -> None:
        """Queue the record that ``(writer, batch)`` was applied; it is written in the same
        transaction as the retained rows of this pass."""
        self._pending.append((writer, batch, rows, time.time()))

    def dirty(self) -> bool:
        return bool(self._pending)

    def write(self) -> None:
        """Write the queued records (inside the store's transaction), keeping the newest
        :data:`WRITER_BATCHES_KEPT` per writer."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        db = self._db
        db.executemany("INSERT OR REPLACE INTO writer_batches VALUES (?,?,?,?)", pending)
        for writer in {w for w, _, _, _ in pending}:
            db.execute(
                "DELETE FROM writer_batches WHERE writer=? AND batch < (SELECT batch FROM "
                "writer_batches WHERE writer=? ORDER BY batch DESC LIMIT 1 OFFSET ?)",
                (writer, writer, WRITER_BATCHES_KEPT - 1),
            )
