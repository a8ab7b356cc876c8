"""The store's SQLite connection and its transactions.

One connection per node, opened in WAL mode: ``synchronous=NORMAL`` survives a killed
process (the WAL is replayed on open), ``synchronous=FULL`` (``fsync=True``) also survives
power loss. Autocommit mode (``isolation_level=None``): the store opens its transactions
itself, one per poll pass (see :func:`transaction`). Each table's schema belongs to the
module that owns the table; this one only runs them.

A store that cannot be used is refused when it is opened, with an error naming the file
(:class:`~zbroker.errors.DataDirError`): a corrupt file, or one SQLite can only read (an
immutable file, a read-only mount: SQLite then opens it read-only without a word, and the
node would serve until its first write and die there).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DataDirError

__all__ = ["connect", "transaction"]


def connect(path: Path, schemas: Iterable[str], *, fsync: bool = False) -> sqlite3.Connection:
    """Open (or create) the store at ``path`` and create the tables ``schemas`` declare;
    raise DataDirError naming the file when it is corrupt or cannot be written."""
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise DataDirError(f"cannot open the store {path}: {exc}") from exc
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        for schema in schemas:
            db.executescript(schema)
        # a write that changes nothing: fails now if SQLite could only open it read-only
        (version,) = db.execute("PRAGMA user_version").fetchone()
        db.execute(f"PRAGMA user_version={int(version)}")
    except sqlite3.DatabaseError as exc:
        db.close()
        raise DataDirError(_unusable(path, exc)) from exc
    return db


def _unusable(path: Path, exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return f"the store {path} cannot be written ({text}): check its permissions and mount"
    if "not a database" in text or "malformed" in text:
        return (
            f"the store {path} is corrupt ({text}): move it (and its -wal, -shm files) "
            "aside to start with an empty store"
        )
    return f"cannot use the store {path}: {text}"


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN ... COMMIT, rolled back when the block raises (the block's error is what
    propagates: SQLite may have rolled back by itself, on a full disk for one)."""
    db.execute("BEGIN")
    try:
        yield db
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
