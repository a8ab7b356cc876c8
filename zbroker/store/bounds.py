"""What the retention log and durable queues share about their bounds: the overflow
policies, where a byte bound cuts (oldest first), and the index ``max_age`` uses."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

__all__ = ["OVERFLOW_POLICIES", "age_index", "oldest_cut"]

#: ``drop-oldest`` trims the oldest messages to fit the bounds; ``reject-new`` keeps what
#: is stored and refuses what does not fit
OVERFLOW_POLICIES = ("drop-oldest", "reject-new")


def oldest_cut(rows: Iterable[tuple[int, int]], excess: int) -> int | None:
    """The key up to which (inclusive) the oldest rows go so that at least ``excess``
    bytes go. ``rows``: (key, size), oldest first; read only as far as needed (the caller
    runs the query only once it knows the rows are over their bound)."""
    cut = None
    for key, size in rows:
        excess -= size
        cut = key
        if excess <= 0:
            break
    return cut


def age_index(db: sqlite3.Connection, table: str, key: str) -> None:
    """Index ``table`` by ``(key, ts)``: ``max_age`` then finds what expired by the
    index, not by a scan of every row of the rule or durable. Every insert pays for it,
    so it is made only once a bound needs it. (``table`` and ``key``: literals.)"""
    db.execute(f"CREATE INDEX IF NOT EXISTS {table}_{key}_ts ON {table} ({key}, ts)")
