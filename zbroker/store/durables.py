"""Durable subscriptions (tables ``durables`` and ``dqueue``).

A durable subscription is a named pattern whose matching messages are queued here (per
subscription sequence ``q``) until the subscriber acknowledges them. Its bounds
(``max_msgs``, ``max_bytes`` = topic + payload bytes, ``max_age``) drop the oldest first,
counted per subscription, or, under ``reject-new``, refuse what does not fit. While a
subscriber is attached, what is in flight to it (sent, not yet acknowledged; its credit
bounds it) does not count against ``max_msgs`` and ``max_bytes``.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import msgpack

from . import meta
from .bounds import age_index, oldest_cut
from .db import transaction

__all__ = ["SCHEMA", "DurableQueues"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS durables (
    name     TEXT PRIMARY KEY,
    pattern  TEXT NOT NULL,
    created  REAL NOT NULL,
    next_q   INTEGER NOT NULL,
    max_msgs INTEGER NOT NULL,
    dropped  INTEGER NOT NULL DEFAULT 0,
    max_bytes INTEGER NOT NULL DEFAULT 0,
    max_age  REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dqueue (
    name      TEXT NOT NULL,
    q         INTEGER NOT NULL,
    topic     TEXT NOT NULL,
    payload   BLOB NOT NULL,
    fmt       INTEGER NOT NULL,
    headers   BLOB,
    origin    TEXT NOT NULL,
    inc       INTEGER NOT NULL,
    oseq      INTEGER NOT NULL,
    ts        REAL NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (name, q)
) WITHOUT ROWID;
"""

# columns added after the first release: a store written before them gets them on open
_ADDED_COLUMNS = (
    ("max_bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("max_age", "REAL NOT NULL DEFAULT 0"),
    ("overflow", "TEXT NOT NULL DEFAULT 'drop-oldest'"),
    ("selector", "TEXT"),  # canonical text; NULL: every message of the pattern
)

# what a deleted queue row weighed against max_bytes
_SIZE = "length(payload) + length(topic)"


class DurableQueues:
    """The durable subscriptions, their queued messages, and the writes queued for the
    next commit (new messages, delivery marks, acknowledgements, due trims)."""

    def __init__(self, db: sqlite3.Connection, drops: meta.DropCounts) -> None:
        self._db = db
        self._drops = drops
        columns = {row[1] for row in db.execute("PRAGMA table_info(durables)")}
        for column, decl in _ADDED_COLUMNS:
            if column not in columns:
                db.execute(f"ALTER TABLE durables ADD COLUMN {column} {decl}")
        self._pending: list[tuple[Any, ...]] = []
        self._marks: list[tuple[str, int]] = []
        self._acks: list[tuple[str, int]] = []
        self._acks_each: list[tuple[str, list[int]]] = []  # (a shared durable's acks)
        # Durables whose drop-oldest bounds are due (new rows, or a subscriber left), and
        # those whose trim waits this pass: the node pumps them first, so a burst an
        # attached subscriber has credit for is sent, not trimmed (see trim_hold).
        self._trim_due: set[str] = set()
        #: durables the node will pump this pass: their trims wait for the pump's commit
        self.trim_hold: set[str] = set()
        #: messages the count and byte bounds dropped per durable since the node last
        #: looked (its overflow advisory); emptied in place by the reader, never rebound
        self.overflowed: dict[str, int] = {}
        # durables with a subscriber attached: their messages in flight (sent, not yet
        # acknowledged; bounded by its credit) are not counted against the bounds
        self._attached: set[str] = set()
        # durable -> [messages, bytes] held (committed + queued), exact through acks and
        # trims, and its (max_msgs, max_bytes) when its overflow policy is reject-new
        self._held: dict[str, list[int]] = {
            name: [n, size]
            for name, n, size in db.execute(
                f"SELECT name, COUNT(*), COALESCE(SUM({_SIZE}), 0) FROM dqueue GROUP BY name"
            )
        }
        self._reject: dict[str, tuple[int, int]] = {
            name: (max_msgs, max_bytes)
            for name, max_msgs, max_bytes in db.execute(
                "SELECT name, max_msgs, max_bytes FROM durables WHERE overflow='reject-new'"
            )
        }
        if db.execute("SELECT 1 FROM durables WHERE max_age > 0 LIMIT 1").fetchone():
            age_index(db, "dqueue", "name")

    # -- subscriptions --------------------------------------------------------------------------

    def load(self) -> dict[str, tuple[str, int, int]]:
        """name -> (pattern, next queue sequence, max_msgs)."""
        return {
            name: (pattern, next_q, max_msgs)
            for name, pattern, next_q, max_msgs in self._db.execute(
                "SELECT name, pattern, next_q, max_msgs FROM durables"
            )
        }

    def selectors(self) -> dict[str, str]:
        """name -> selector (canonical text) of the durables that have one."""
        return dict(
            self._db.execute("SELECT name, selector FROM durables WHERE selector IS NOT NULL")
        )

    def create(
        self,
        name: str,
        pattern: str,
        max_msgs: int,
        max_bytes: int = 0,
        max_age: float = 0.0,
        overflow: str = "drop-oldest",
        selector: str | None = None,
    ) -> None:
        self._db.execute(
            "INSERT INTO durables(name, pattern, created, next_q, max_msgs, max_bytes, max_age, "
            "overflow, selector) VALUES (?,?,?,?,?,?,?,?,?)",
            (name, pattern, time.time(), 1, max_msgs, max_bytes, max_age, overflow, selector),
        )
        self._held[name] = [0, 0]
        if overflow == "reject-new":
            self._reject[name] = (max_msgs, max_bytes)
        if max_age:
            age_index(self._db, "dqueue", "name")

    def delete(self, name: str) -> int:
        """Delete a durable subscription and its stored messages in one transaction (the
        caller has committed what was queued); return how many messages."""
        with transaction(self._db) as db:
            n = db.execute("DELETE FROM dqueue WHERE name=?", (name,)).rowcount
            db.execute("DELETE FROM durables WHERE name=?", (name,))
        self._held.pop(name, None)
        self._reject.pop(name, None)
        self._trim_due.discard(name)
        self._attached.discard(name)
        return int(n)

    def set_attached(self, name: str, attached: bool) -> None:
        """A subscriber attached to (or left) durable ``name``. While one is attached, its
        messages in flight do not count against the bounds (its credit bounds them); when
        it leaves they count again, and the bounds apply at the next commit."""
        if attached:
            self._attached.add(name)
        elif name in self._attached:
            self._attached.discard(name)
            if name in self._held:
                self._trim_due.add(name)

    def depth(self, name: str) -> int:
        return int(
            self._db.execute("SELECT COUNT(*) FROM dqueue WHERE name=?", (name,)).fetchone()[0]
        )

    def dropped(self, name: str) -> int:
        row = self._db.execute("SELECT dropped FROM durables WHERE name=?", (name,)).fetchone()
        return int(row[0]) if row else 0

    # -- messages -----------------------------------------------------------------------------

    def any_reject_new(self) -> bool:
        """Does some durable refuse what does not fit (``reject-new``)?"""
        return bool(self._reject)

    def rejects(self, name: str, n: int = 1, size: int = 0) -> bool:
        """Would ``n`` more messages of ``size`` bytes overflow durable ``name`` under its
        ``reject-new`` policy?"""
        bounds = self._reject.get(name)
        if bounds is None:
            return False
        held = self._held.get(name, [0, 0])
        return bool(
            (bounds[0] and held[0] + n > bounds[0]) or (bounds[1] and held[1] + size > bounds[1])
        )

    def enqueue(self, name: str, q: int, row: tuple[Any, ...]) -> None:
        """Queue a message for durable ``name`` under queue sequence ``q`` (committed with
        the pass). ``row``: topic, payload, fmt, headers, origin, inc, oseq, ts."""
        topic, payload, fmt, headers, origin, inc, oseq, ts = row
        held = self._held.setdefault(name, [0, 0])
        held[0] += 1
        held[1] += len(payload) + len(topic)
        self._pending.append(
            (
                name,
                q,
                topic,
                payload,
                fmt,
                None if headers is None else msgpack.packb(headers),
                origin,
                inc,
                oseq,
                ts,
            )
        )

    def pending(self, name: str, after: int, limit: int) -> list[tuple[Any, ...]]:
        """Stored messages of ``name`` with q > after, oldest first."""
        return list(
            self._db.execute(
                "SELECT q, topic, payload, fmt, headers, origin, inc, oseq, ts, delivered "
                "FROM dqueue WHERE name=? AND q>? ORDER BY q LIMIT ?",
                (name, after, limit),
            )
        )

    def mark_delivered(self, name: str, qs: list[int]) -> None:
        self._marks.extend((name, q) for q in qs)

    def ack(self, name: str, upto: int) -> None:
        self._acks.append((name, upto))

    def ack_each(self, name: str, qs: list[int]) -> None:
        """Acknowledge exactly these messages (a shared durable's consumers each hold
        their own, interleaved, so a cumulative ``upto`` would take others' too)."""
        self._acks_each.append((name, qs))

    def rows(self, name: str, qs: list[int]) -> list[tuple[Any, ...]]:
        """Stored messages of ``name`` with these q (those still held), oldest first."""
        out: list[tuple[Any, ...]] = []
        for i in range(0, len(qs), 500):
            chunk = qs[i : i + 500]
            out.extend(
                self._db.execute(
                    "SELECT q, topic, payload, fmt, headers, origin, inc, oseq, ts, delivered "
                    f"FROM dqueue WHERE name=? AND q IN ({','.join('?' * len(chunk))}) "
                    "ORDER BY q",
                    (name, *chunk),
                )
            )
        return out

    # -- the commit -----------------------------------------------------------------------------

    def dirty(self) -> bool:
        """Is anything queued, or a trim due that this pass's pump does not hold back?"""
        return bool(
            self._pending
            or self._marks
            or self._acks
            or self._acks_each
            or (self._trim_due and not self._trim_due <= self.trim_hold)
        )

    def write(self) -> int:
        """Write the queued messages, marks and acknowledgements (inside the store's
        transaction), then the trims due. Returns the number of messages written."""
        rows, self._pending = self._pending, []
        marks, self._marks = self._marks, []
        acks, self._acks = self._acks, []
        db = self._db
        if rows:
            db.executemany(
                "INSERT OR REPLACE INTO dqueue(name, q, topic, payload, fmt, headers, origin, "
                "inc, oseq, ts) VALUES (?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            tops: dict[str, int] = {}
            for r in rows:
                tops[r[0]] = max(tops.get(r[0], 0), r[1])
            for name, top in tops.items():
                db.execute("UPDATE durables SET next_q=? WHERE name=?", (top + 1, name))
            self._trim_due.update(tops)
        if marks:
            db.executemany("UPDATE dqueue SET delivered=1 WHERE name=? AND q=?", marks)
        for name, upto in acks:
            self._delete(name, "q<=?", (upto,))
        each, self._acks_each = self._acks_each, []
        for name, qs in each:
            for i in range(0, len(qs), 500):
                chunk = qs[i : i + 500]
                self._delete(name, f"q IN ({','.join('?' * len(chunk))})", tuple(chunk))
        if self._trim_due:
            # after the marks: what was just sent to an attached subscriber is in flight
            hold = self.trim_hold
            for name in [n for n in self._trim_due if n not in hold]:
                self._trim(name)
                self._trim_due.discard(name)
        return len(rows)

    # -- bounds -------------------------------------------------------------------------------

    def _trim(self, name: str) -> None:
        """Apply a durable's bounds, oldest first. With a subscriber attached, max_msgs and
        max_bytes bound what waits to be sent; what is in flight to it is not counted."""
        if name not in self._held:
            return  # deleted meanwhile
        row = self._db.execute(
            "SELECT max_msgs, max_bytes, max_age FROM durables WHERE name=?", (name,)
        ).fetchone()
        if not row:
            return
        max_msgs, max_bytes, max_age = row
        dropped = 0
        if max_age:
            dropped += self._expire(name, max_age)
        if name not in self._reject:  # under reject-new nothing past the bounds was accepted
            # (a literal clause, no user input)
            waiting = " AND delivered=0" if name in self._attached else ""
            # at most what is held (exact) counts: a bound not reached costs nothing
            held = self._held.get(name, [0, 0])
            trimmed = 0
            if max_msgs and held[0] > max_msgs:
                trimmed += self._trim_count(name, waiting, max_msgs, held[0])
            if max_bytes and held[1] > max_bytes:
                trimmed += self._trim_bytes(name, waiting, max_bytes, held[1])
            if trimmed:
                self.overflowed[name] = self.overflowed.get(name, 0) + trimmed
                dropped += trimmed
        if dropped:
            self._db.execute(
                "UPDATE durables SET dropped = dropped + ? WHERE name=?", (dropped, name)
            )

    def _expire(self, name: str, max_age: float) -> int:
        n = self._delete(name, "ts < ?", (time.time() - max_age,))
        self._drops.add("durable_max_age", n)
        return n

    def expire_aged(self, now: float) -> None:
        """Apply ``max_age`` to every durable that has one, also to one no message came
        to lately (its bounds otherwise apply when it takes one, or its subscriber
        leaves)."""
        for name, max_age in self._db.execute(
            "SELECT name, max_age FROM durables WHERE max_age > 0"
        ).fetchall():
            n = self._delete(name, "ts < ?", (now - max_age,))  # (by the (name, ts) index)
            self._drops.add("durable_max_age", n)
            if n:
                self._db.execute(
                    "UPDATE durables SET dropped = dropped + ? WHERE name=?", (n, name)
                )

    def _trim_count(self, name: str, waiting: str, max_msgs: int, held: int) -> int:
        """Keep the newest ``max_msgs`` messages that count (``waiting``: those not in
        flight to an attached subscriber; else all ``held``: only what goes is read)."""
        if waiting:
            where = (
                f"q <= (SELECT q FROM dqueue WHERE name=?{waiting} ORDER BY q DESC LIMIT 1 "
                f"OFFSET ?){waiting}"
            )
            args: tuple[Any, ...] = (name, max_msgs)
        else:
            where = "q <= (SELECT q FROM dqueue WHERE name=? ORDER BY q LIMIT 1 OFFSET ?)"
            args = (name, held - max_msgs - 1)
        n = self._delete(name, where, args)
        self._drops.add("durable_max_msgs", n)
        return n

    def _trim_bytes(self, name: str, waiting: str, max_bytes: int, held: int) -> int:
        """Drop the oldest messages that count until the rest fits in ``max_bytes``."""
        db = self._db
        total = held
        if waiting:
            total = db.execute(
                f"SELECT COALESCE(SUM({_SIZE}), 0) FROM dqueue WHERE name=?{waiting}", (name,)
            ).fetchone()[0]
        if total <= max_bytes:
            return 0
        cut = oldest_cut(
            db.execute(f"SELECT q, {_SIZE} FROM dqueue WHERE name=?{waiting} ORDER BY q", (name,)),
            total - max_bytes,
        )
        n = self._delete(name, "q <= ?" + waiting, (cut,))
        self._drops.add("durable_max_bytes", n)
        return n

    def _delete(self, name: str, where: str, args: tuple[Any, ...]) -> int:
        """Delete queue rows of a durable, taking them off its held counts."""
        deleted = self._db.execute(
            f"DELETE FROM dqueue WHERE name=? AND {where} RETURNING {_SIZE}", (name, *args)
        ).fetchall()
        held = self._held.get(name)
        if held is not None and deleted:
            held[0] -= len(deleted)
            held[1] -= sum(size for (size,) in deleted)
        return len(deleted)
