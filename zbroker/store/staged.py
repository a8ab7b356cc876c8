"""Staged commits being applied (tables ``staged_commits``, ``staged_slices``): what makes
a staged commit all-or-nothing across a node killed while it publishes it.

A commit the node accepted is stored whole — its rows, cut into the slices the node
publishes one per pass, with its tokens — in one transaction, together with its
``(writer, batch)`` record (:mod:`.batches`). Only after that commit does its first slice
go out. Each slice's row is deleted in the transaction that stores what publishing the
slice produced (retained rows, durable and link queue entries), so the slices left in the
table are exactly those not yet published; a restarted node publishes them (and only
them) before anything else of the commit is asked of it. The commit's row goes with its
last slice.

The tokens of every commit stored (table ``staged_tokens``, the newest
:data:`APPLIED_TOKENS_KEPT`) are kept past it, so that the same commit sent again after a
restart (its reply was lost with the node) is recognised as applied, not refused as if
nothing of it had been.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import msgpack

__all__ = ["APPLIED_TOKENS_KEPT", "SCHEMA", "StagedCommits", "StoredCommit"]

#: tokens of applied commits kept (also in memory: ``Staging`` remembers as many)
APPLIED_TOKENS_KEPT = 100_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS staged_commits (
    id       INTEGER PRIMARY KEY,
    writer   TEXT,
    batch    INTEGER,
    tokens   BLOB NOT NULL,
    rows     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS staged_slices (
    id       INTEGER NOT NULL,
    part     INTEGER NOT NULL,
    rows     BLOB NOT NULL,
    PRIMARY KEY (id, part)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS staged_tokens (
    token    TEXT PRIMARY KEY
);
"""


@dataclass(slots=True)
class StoredCommit:
    """A commit stored and not yet wholly published (as loaded after a restart)."""

    id: int
    key: tuple[str, int] | None
    tokens: list[str]
    rows: int  # all its rows, published or not (the reply's ``applied``)
    slices: list[tuple[int, list[Any]]]  # (part, rows) not yet published, in order


class StagedCommits:
    """The stored commits, and the writes queued for the pass's transaction."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        row = db.execute("SELECT MAX(id) FROM staged_commits").fetchone()
        self._next = (row[0] or 0) + 1
        self._put: list[tuple[int, str | None, int | None, bytes, int]] = []
        self._put_slices: list[tuple[int, int, bytes]] = []
        self._done: list[tuple[int, int]] = []
        self._finished: list[tuple[int]] = []
        self._tokens: list[tuple[str]] = []  # tokens applied this pass

    def store(self, key: tuple[str, int] | None, tokens: list[str], slices: list[list[Any]]) -> int:
        """Queue a commit's rows (cut into ``slices``) for this pass's transaction; returns
        its id."""
        cid = self._next
        self._next += 1
        writer, batch = key if key is not None else (None, None)
        total = sum(len(s) for s in slices)
        self._put.append((cid, writer, batch, msgpack.packb(tokens), total))
        pack = msgpack.packb
        self._put_slices.extend((cid, part, pack(rows)) for part, rows in enumerate(slices))
        self.applied(tokens)
        return cid

    def applied(self, tokens: list[str]) -> None:
        """Record these tokens as applied (with this pass's transaction)."""
        self._tokens.extend((t,) for t in tokens)

    def applied_tokens(self) -> list[str]:
        """The tokens of applied commits kept, oldest first."""
        return [
            token
            for (token,) in self._db.execute(
                "SELECT token FROM (SELECT rowid, token FROM staged_tokens "
                "ORDER BY rowid DESC LIMIT ?) ORDER BY rowid",
                (APPLIED_TOKENS_KEPT,),
            )
        ]

    def published(self, cid: int, part: int, last: bool) -> None:
        """Slice ``part`` of commit ``cid`` was published this pass (``last``: the commit
        is done): its row goes in the same transaction as what it produced."""
        self._done.append((cid, part))
        if last:
            self._finished.append((cid,))

    def load(self) -> list[StoredCommit]:
        """The commits a killed node left unfinished, oldest first, with their slices not
        yet published."""
        db = self._db
        out: list[StoredCommit] = []
        for cid, writer, batch, tokens, rows in db.execute(
            "SELECT id, writer, batch, tokens, rows FROM staged_commits ORDER BY id"
        ).fetchall():
            slices = [
                (part, msgpack.unpackb(blob, raw=False))
                for part, blob in db.execute(
                    "SELECT part, rows FROM staged_slices WHERE id=? ORDER BY part", (cid,)
                )
            ]
            key = None if writer is None else (writer, batch)
            out.append(StoredCommit(cid, key, msgpack.unpackb(tokens, raw=False), rows, slices))
        return out

    def dirty(self) -> bool:
        return bool(self._put or self._done or self._tokens)

    def write(self) -> None:
        """Write the queued commits and remove what was published (inside the store's
        transaction): stored before removed, so a commit stored and started in one pass
        is still consistent."""
        db = self._db
        if self._put:
            db.executemany("INSERT INTO staged_commits VALUES (?,?,?,?,?)", self._put)
            db.executemany("INSERT INTO staged_slices VALUES (?,?,?)", self._put_slices)
            self._put, self._put_slices = [], []
        if self._tokens:
            db.executemany("INSERT OR IGNORE INTO staged_tokens VALUES (?)", self._tokens)
            self._tokens = []
            db.execute(
                "DELETE FROM staged_tokens WHERE rowid <= "
                "(SELECT MAX(rowid) FROM staged_tokens) - ?",
                (APPLIED_TOKENS_KEPT,),
            )
        if self._done:
            db.executemany("DELETE FROM staged_slices WHERE id=? AND part=?", self._done)
            db.executemany("DELETE FROM staged_commits WHERE id=?", self._finished)
            self._done, self._finished = [], []
