"""The store's SQLite connection and its transactions.

One connection per node, opened in WAL mode: ``synchronous=NORMAL`` survives a killed
process (the WAL is replayed on open), ``synchronous=FULL`` (``fsync=True``) also survives
power loss. Autocommit mode (``isolation_level=None``): the store opens its transactions
itself, one per poll pass (see :func:`transaction`). Each table's schema belongs to the
module that owns the table; this one only runs them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["connect", "transaction"]


def connect(path: Path, schemas: Iterable[str], *, fsync: bool = False) -> sqlite3.Connection:
    """Open (or create) the store at ``path`` and create the tables ``schemas`` declare."""
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
    for schema in schemas:
        db.executescript(schema)
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN ... COMMIT, rolled back when the block raises."""
    db.execute("BEGIN")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
