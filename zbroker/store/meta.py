"""The ``meta`` table: named integers kept across restarts, and the drop counters in it.

Keys: ``last_seq`` (the retention sequence, which never goes back), ``expired:RULE`` (the
highest sequence a retain rule lost to its bounds) and ``dropped:WHY`` (what the bounds of
the retention log and of durable queues dropped, by reason: status survives a restart).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

__all__ = ["SCHEMA", "DropCounts", "get", "put", "with_prefix"]

SCHEMA = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"


def get(db: sqlite3.Connection, key: str) -> int | None:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return int(row[0]) if row else None


def with_prefix(db: sqlite3.Connection, prefix: str) -> dict[str, int]:
    """The keys starting with ``prefix`` (given without it) and their values."""
    return {
        key[len(prefix) :]: value
        for key, value in db.execute(
            "SELECT key, value FROM meta WHERE key LIKE ?", (prefix + "%",)
        )
    }


def put(db: sqlite3.Connection, items: Iterable[tuple[str, int]]) -> None:
    db.executemany(
        "INSERT INTO meta(key, value) VALUES(?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        items,
    )


class DropCounts:
    """What the bounds dropped, by reason (``counts``, shown in status); the reasons that
    changed are written to ``meta`` with the next commit."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.counts: dict[str, int] = with_prefix(db, "dropped:")
        self._dirty: set[str] = set()

    def add(self, why: str, n: int) -> None:
        if n > 0:
            self.counts[why] = self.counts.get(why, 0) + n
            self._dirty.add(why)

    def dirty(self) -> bool:
        return bool(self._dirty)

    def write(self, db: sqlite3.Connection) -> None:
        if self._dirty:
            put(db, [(f"dropped:{why}", self.counts[why]) for why in self._dirty])
            self._dirty.clear()
