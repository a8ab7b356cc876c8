"""The node's store: SQLite in the data directory (WAL mode, batched commits).

What is kept here today:

* **durable subscriptions**: a named pattern whose matching messages are queued here
  (``dqueue``, per-subscription sequence ``q``) until the subscriber acknowledges them,
  bounded by ``max_msgs`` (oldest dropped first, counted per subscription).
* the **retention log**: messages whose topic matches a configured ``retain`` pattern,
  numbered by a per-node sequence (``seq``, gap-free, starting at 1), bounded per pattern by
  ``max_msgs`` / ``max_bytes`` / ``max_age`` (oldest dropped first; what was dropped is
  counted). Readable by range (``Client.read``, ``zbroker replay``). The highest sequence
  each rule has lost to its bounds is kept (``expired:RULE`` in ``meta``), so a reader can
  tell "expired" from "never matched" (the Spark connector's ``failOnDataLoss``).
* **link queues** (store-and-forward of persistent messages, see :mod:`zbroker.forward`):
  per directed link an outbound queue (``fwd_queues``: epoch, next link sequence, what is
  needed to restore the link's sticky routes after a restart; ``fwd_out``: the encoded
  entries not yet acknowledged by the next node) and per inbound link the last sequence
  stored (``fwd_in``), written in the same transaction as what the entries produced here.
* **writer batches**: ``(writer, batch)`` pairs of staged writes already applied (see
  :mod:`zbroker.staging`), so a batch Spark replays after a restart is applied once. The
  newest :data:`WRITER_BATCHES_KEPT` per writer are kept.

Writes are queued during a poll pass and committed once at its end (:meth:`Store.commit`),
so a burst of messages costs one transaction; a persistent publish is confirmed only after
the commit that holds it. WAL with ``synchronous=NORMAL`` survives a killed process (the
WAL is replayed on open); ``synchronous=FULL`` (``fsync=True``) also survives power loss.

The store is used by one thread only (the node's I/O thread).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from .sublist import Sublist

__all__ = ["RetainRule", "Store"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS retained (
    seq      INTEGER PRIMARY KEY,
    rule     TEXT NOT NULL,
    topic    TEXT NOT NULL,
    payload  BLOB NOT NULL,
    fmt      INTEGER NOT NULL,
    headers  BLOB,
    origin   TEXT NOT NULL,
    inc      INTEGER NOT NULL,
    oseq     INTEGER NOT NULL,
    ts       REAL NOT NULL,
    size     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS retained_rule ON retained (rule, seq);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
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
CREATE TABLE IF NOT EXISTS writer_batches (
    writer   TEXT NOT NULL,
    batch    INTEGER NOT NULL,
    rows     INTEGER NOT NULL,
    at       REAL NOT NULL,
    PRIMARY KEY (writer, batch)
) WITHOUT ROWID;
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


OVERFLOW_POLICIES = ("drop-oldest", "reject-new")

#: Committed batch records kept per writer: Spark replays at most the last few batches.
WRITER_BATCHES_KEPT = 1000


@dataclass(frozen=True, slots=True)
class RetainRule:
    """Keep messages on topics matching ``pattern``; 0 means unbounded.

    ``overflow``: ``drop-oldest`` (default) trims the oldest messages to fit the bounds;
    ``reject-new`` keeps what is stored and refuses what does not fit: a persistent publish
    gets an error, a non-persistent message is not retained (counted as ``reject_new``).
    ``max_age`` always expires old messages.
    """

    pattern: str
    max_msgs: int = 0
    max_bytes: int = 0
    max_age: float = 0.0
    overflow: str = "drop-oldest"


Row = tuple[int, str, bytes, int, Any, str, int, int, float]


class Store:
    """SQLite-backed retention log for one node."""

    def __init__(
        self, path: Path, rules: tuple[RetainRule, ...] = (), *, fsync: bool = False
    ) -> None:
        self.path = path
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(durables)")}
        for column, decl in (
            ("max_bytes", "INTEGER NOT NULL DEFAULT 0"),
            ("max_age", "REAL NOT NULL DEFAULT 0"),
            ("overflow", "TEXT NOT NULL DEFAULT 'drop-oldest'"),
        ):
            if column not in columns:  # a store written before durable byte/age bounds
                self._db.execute(f"ALTER TABLE durables ADD COLUMN {column} {decl}")
        self.rules = {r.pattern: r for r in rules}
        self._match: Sublist[str] = Sublist()
        for r in rules:
            self._match.insert(r.pattern, r.pattern)
        row = self._db.execute("SELECT MAX(seq) FROM retained").fetchone()
        stored = self._db.execute("SELECT value FROM meta WHERE key='last_seq'").fetchone()
        # the sequence never goes back, even when the newest rows were trimmed away
        self.last_seq = max(row[0] or 0, stored[0] if stored else 0)
        self._pending: list[tuple[Any, ...]] = []
        # rows and bytes held per rule (committed + queued), kept exact through trims
        self._held: dict[str, list[int]] = {r.pattern: [0, 0] for r in rules}
        for rule_pattern, n, size in self._db.execute(
            "SELECT rule, COUNT(*), COALESCE(SUM(size), 0) FROM retained GROUP BY rule"
        ):
            self._held.setdefault(rule_pattern, [0, 0])[:] = [n, size]
        self._dpending: list[tuple[Any, ...]] = []
        self._dmarks: list[tuple[str, int]] = []
        self._dacks: list[tuple[str, int]] = []
        # Durables whose drop-oldest bounds are due (new rows, or a subscriber left), and
        # those whose trim waits this pass: the node pumps them first, so a burst an
        # attached subscriber has credit for is sent, not trimmed (see trim_hold).
        self._trim_due: set[str] = set()
        #: durables the node will pump this pass: their trims wait for the pump's commit
        self.trim_hold: set[str] = set()
        # durables with a subscriber attached: their messages in flight (sent, not yet
        # acknowledged; bounded by its credit) are not counted against the bounds
        self._attached: set[str] = set()
        self._sizes: dict[str, list[int]] = {}  # rule -> [count, bytes] (lazy)
        # what the bounds dropped, by reason: kept in meta, so status survives a restart
        self.dropped: dict[str, int] = {
            key[len("dropped:") :]: value
            for key, value in self._db.execute(
                "SELECT key, value FROM meta WHERE key LIKE 'dropped:%'"
            )
        }
        self._drops_dirty: set[str] = set()
        self.retained = 0
        # rule -> highest sequence its bounds deleted (0: nothing lost yet)
        self._expired: dict[str, int] = {
            key[len("expired:") :]: value
            for key, value in self._db.execute(
                "SELECT key, value FROM meta WHERE key LIKE 'expired:%'"
            )
        }
        self._wpending: list[tuple[str, int, int, float]] = []
        # durable -> [messages, bytes] held (committed + queued), exact through acks and
        # trims, and its (max_msgs, max_bytes) when its overflow policy is reject-new
        self._dheld: dict[str, list[int]] = {
            name: [n, size]
            for name, n, size in self._db.execute(
                "SELECT name, COUNT(*), COALESCE(SUM(length(payload) + length(topic)), 0) "
                "FROM dqueue GROUP BY name"
            )
        }
        self._dreject: dict[str, tuple[int, int]] = {
            name: (max_msgs, max_bytes)
            for name, max_msgs, max_bytes in self._db.execute(
                "SELECT name, max_msgs, max_bytes FROM durables WHERE overflow='reject-new'"
            )
        }
        # link queues: upserted queue rows, new entries, acknowledged (delete <= upto),
        # dropped queues, inbound positions; all written by the next commit
        self._fq: dict[str, tuple[str, str, int, int, bytes | None]] = {}
        self._fput: list[tuple[str, int, bytes]] = []
        self._fdel: dict[str, int] = {}
        self._fdrop: set[str] = set()
        self._fin: dict[str, tuple[int, int]] = {}

    def close(self) -> None:
        self.commit()
        self._db.close()

    # -- writing ------------------------------------------------------------------------------

    def retain_rule(self, topic: str) -> str | None:
        """The rule (pattern) that retains ``topic``, or None. The most specific rule wins
        when several match (fewest wildcards, then longest)."""
        rules = self._match.match(topic)
        if not rules:
            return None
        if len(rules) == 1:
            return next(iter(rules))
        return min(rules, key=lambda p: (p.count("*") + p.count(">"), -len(p), p))

    def retain(
        self,
        rule: str,
        topic: str,
        payload: bytes,
        fmt: int,
        headers: dict[str, Any] | None,
        origin: str,
        inc: int,
        oseq: int,
        ts: float,
    ) -> int | None:
        """Queue a message for the retention log; return its retention sequence, or None
        when a ``reject-new`` rule is full (counted)."""
        size = len(payload) + len(topic)
        if self.rejects(rule, size):
            self._count_drop("reject_new", 1)
            return None
        held = self._held.setdefault(rule, [0, 0])
        held[0] += 1
        held[1] += size
        self.last_seq += 1
        self._pending.append(
            (
                self.last_seq,
                rule,
                topic,
                payload,
                fmt,
                None if headers is None else msgpack.packb(headers),
                origin,
                inc,
                oseq,
                ts,
                size,
            )
        )
        return self.last_seq

    def rejects(self, rule: str, size: int) -> bool:
        """Would a message of ``size`` bytes overflow ``rule`` under ``reject-new``?"""
        r = self.rules.get(rule)
        if r is None or r.overflow != "reject-new":
            return False
        held = self._held.get(rule, [0, 0])
        return bool(
            (r.max_msgs and held[0] + 1 > r.max_msgs)
            or (r.max_bytes and held[1] + size > r.max_bytes)
        )

    def overflowing_rule(self, adds: dict[str, list[int]]) -> RetainRule | None:
        """The first ``reject-new`` rule that ``adds`` (rule -> [messages, bytes]) would
        overflow, or None: a staged commit is refused whole rather than half-retained."""
        for rule, (n, size) in adds.items():
            r = self.rules.get(rule)
            if r is None or r.overflow != "reject-new":
                continue
            held = self._held.get(rule, [0, 0])
            if (r.max_msgs and held[0] + n > r.max_msgs) or (
                r.max_bytes and held[1] + size > r.max_bytes
            ):
                return r
        return None

    def commit(self) -> int:
        """Write everything queued in one transaction, then apply the bounds. Returns the
        number of rows written."""
        if not (
            self._pending
            or self._dpending
            or self._dmarks
            or self._dacks
            or self._wpending
            or self._drops_dirty
            or self._fput
            or self._fdel
            or self._fin
            or self._fq
            or self._fdrop
            or (self._trim_due and not self._trim_due <= self.trim_hold)
        ):
            return 0
        rows = self._pending
        self._pending = []
        drows, self._dpending = self._dpending, []
        marks, self._dmarks = self._dmarks, []
        acks, self._dacks = self._dacks, []
        db = self._db
        db.execute("BEGIN")
        try:
            if drows:
                db.executemany(
                    "INSERT OR REPLACE INTO dqueue(name, q, topic, payload, fmt, headers, origin, "
                    "inc, oseq, ts) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    drows,
                )
                tops: dict[str, int] = {}
                for r in drows:
                    tops[r[0]] = max(tops.get(r[0], 0), r[1])
                for name, top in tops.items():
                    db.execute("UPDATE durables SET next_q=? WHERE name=?", (top + 1, name))
                self._trim_due.update(tops)
            if marks:
                db.executemany("UPDATE dqueue SET delivered=1 WHERE name=? AND q=?", marks)
            for name, upto in acks:
                self._dforget(
                    name,
                    db.execute(
                        "DELETE FROM dqueue WHERE name=? AND q<=? "
                        "RETURNING length(payload) + length(topic)",
                        (name, upto),
                    ).fetchall(),
                )
            if self._trim_due:
                # after the marks: what was just sent to an attached subscriber is in flight
                hold = self.trim_hold
                for name in [n for n in self._trim_due if n not in hold]:
                    self._trim_durable(name)
                    self._trim_due.discard(name)
            if self._wpending:
                self._write_batches()
            nf = len(self._fput)
            self._write_forward()
            if not rows:
                self._write_drops()
                db.execute("COMMIT")
                return len(drows) + nf
            db.executemany("INSERT INTO retained VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.execute(
                "INSERT INTO meta(key, value) VALUES('last_seq', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (self.last_seq,),
            )
            touched = {r[1] for r in rows}
            for rule in touched:
                self._trim(rule)
            self._write_drops()
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.retained += len(rows)
        return len(rows)

    def _delete(self, rule_pattern: str, where: str, args: tuple[Any, ...]) -> int:
        """Delete retained rows of a rule, keeping the held counters and the rule's expired
        watermark exact."""
        deleted = self._db.execute(
            f"DELETE FROM retained WHERE rule=? AND {where} RETURNING seq, size",
            (rule_pattern, *args),
        ).fetchall()
        if not deleted:
            return 0
        held = self._held.setdefault(rule_pattern, [0, 0])
        held[0] -= len(deleted)
        held[1] -= sum(size for _, size in deleted)
        top = max(seq for seq, _ in deleted)
        if top > self._expired.get(rule_pattern, 0):
            self._expired[rule_pattern] = top
            self._db.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (f"expired:{rule_pattern}", top),
            )
        return len(deleted)

    def _trim(self, rule_pattern: str) -> None:
        rule = self.rules.get(rule_pattern)
        if rule is None:
            return
        db = self._db
        if rule.max_age:
            n = self._delete(rule_pattern, "ts < ?", (time.time() - rule.max_age,))
            self._count_drop("max_age", n)
        if rule.overflow == "reject-new":
            return  # nothing past the bounds was accepted
        if rule.max_msgs:
            n = self._delete(
                rule_pattern,
                "seq <= (SELECT seq FROM retained WHERE rule=? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (rule_pattern, rule.max_msgs),
            )
            self._count_drop("max_msgs", n)
        if rule.max_bytes:
            total = db.execute(
                "SELECT COALESCE(SUM(size),0) FROM retained WHERE rule=?", (rule_pattern,)
            ).fetchone()[0]
            if total > rule.max_bytes:
                # drop oldest rows until the rest fits
                cut_seq = None
                acc = total
                for seq, size in db.execute(
                    "SELECT seq, size FROM retained WHERE rule=? ORDER BY seq", (rule_pattern,)
                ):
                    acc -= size
                    cut_seq = seq
                    if acc <= rule.max_bytes:
                        break
                if cut_seq is not None:
                    n = self._delete(rule_pattern, "seq <= ?", (cut_seq,))
                    self._count_drop("max_bytes", n)

    def set_attached(self, name: str, attached: bool) -> None:
        """A subscriber attached to (or left) durable ``name``. While one is attached, its
        messages in flight do not count against the bounds (its credit bounds them); when
        it leaves they count again, and the bounds apply at the next commit."""
        if attached:
            self._attached.add(name)
        elif name in self._attached:
            self._attached.discard(name)
            if name in self._dheld:
                self._trim_due.add(name)

    def _trim_durable(self, name: str) -> None:
        """Apply a durable's bounds, oldest first (size = topic + payload bytes). With a
        subscriber attached, max_msgs and max_bytes bound what waits to be sent; what is in
        flight to it is not counted."""
        if name not in self._dheld:
            return  # deleted meanwhile
        # (a literal clause, no user input)
        waiting = " AND delivered=0" if name in self._attached else ""
        db = self._db
        row = db.execute(
            "SELECT max_msgs, max_bytes, max_age FROM durables WHERE name=?", (name,)
        ).fetchone()
        if not row:
            return
        max_msgs, max_bytes, max_age = row
        dropped = 0
        if max_age:
            n = self._dforget(
                name,
                db.execute(
                    "DELETE FROM dqueue WHERE name=? AND ts < ? "
                    "RETURNING length(payload) + length(topic)",
                    (name, time.time() - max_age),
                ).fetchall(),
            )
            self._count_drop("durable_max_age", n)
            dropped += n
        if name in self._dreject:
            max_msgs = max_bytes = 0  # nothing past the bounds was accepted
        if max_msgs:
            n = self._dforget(
                name,
                db.execute(
                    f"DELETE FROM dqueue WHERE name=?{waiting} AND q <= (SELECT q FROM dqueue "
                    f"WHERE name=?{waiting} ORDER BY q DESC LIMIT 1 OFFSET ?) "
                    "RETURNING length(payload) + length(topic)",
                    (name, name, max_msgs),
                ).fetchall(),
            )
            self._count_drop("durable_max_msgs", n)
            dropped += n
        if max_bytes:
            total = db.execute(
                "SELECT COALESCE(SUM(length(payload) + length(topic)), 0) FROM dqueue "
                f"WHERE name=?{waiting}",
                (name,),
            ).fetchone()[0]
            if total > max_bytes:
                cut = None
                for q, size in db.execute(
                    "SELECT q, length(payload) + length(topic) FROM dqueue "
                    f"WHERE name=?{waiting} ORDER BY q",
                    (name,),
                ):
                    total -= size
                    cut = q
                    if total <= max_bytes:
                        break
                n = self._dforget(
                    name,
                    db.execute(
                        f"DELETE FROM dqueue WHERE name=?{waiting} AND q <= ? "
                        "RETURNING length(payload) + length(topic)",
                        (name, cut),
                    ).fetchall(),
                )
                self._count_drop("durable_max_bytes", n)
                dropped += n
        if dropped:
            db.execute("UPDATE durables SET dropped = dropped + ? WHERE name=?", (dropped, name))

    def _dforget(self, name: str, deleted: list[tuple[int]]) -> int:
        """Take deleted queue rows (their sizes) off a durable's held counts."""
        held = self._dheld.get(name)
        if held is not None and deleted:
            held[0] -= len(deleted)
            held[1] -= sum(size for (size,) in deleted)
        return len(deleted)

    def durable_rejects(self, name: str, n: int = 1, size: int = 0) -> bool:
        """Would ``n`` more messages of ``size`` bytes overflow durable ``name`` under its
        ``reject-new`` policy?"""
        bounds = self._dreject.get(name)
        if bounds is None:
            return False
        held = self._dheld.get(name, [0, 0])
        return bool(
            (bounds[0] and held[0] + n > bounds[0]) or (bounds[1] and held[1] + size > bounds[1])
        )

    def _count_drop(self, why: str, n: int) -> None:
        if n > 0:
            self.dropped[why] = self.dropped.get(why, 0) + n
            self._drops_dirty.add(why)

    def _write_drops(self) -> None:
        if self._drops_dirty:
            self._db.executemany(
                "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                [(f"dropped:{why}", self.dropped[why]) for why in self._drops_dirty],
            )
            self._drops_dirty.clear()

    # -- durable subscriptions -----------------------------------------------------------------

    def durables(self) -> dict[str, tuple[str, int, int]]:
        """name -> (pattern, next queue sequence, max_msgs)."""
        return {
            name: (pattern, next_q, max_msgs)
            for name, pattern, next_q, max_msgs in self._db.execute(
                "SELECT name, pattern, next_q, max_msgs FROM durables"
            )
        }

    def create_durable(
        self,
        name: str,
        pattern: str,
        max_msgs: int,
        max_bytes: int = 0,
        max_age: float = 0.0,
        overflow: str = "drop-oldest",
    ) -> None:
        self._db.execute(
            "INSERT INTO durables(name, pattern, created, next_q, max_msgs, max_bytes, max_age, "
            "overflow) VALUES (?,?,?,?,?,?,?,?)",
            (name, pattern, time.time(), 1, max_msgs, max_bytes, max_age, overflow),
        )
        self._dheld[name] = [0, 0]
        if overflow == "reject-new":
            self._dreject[name] = (max_msgs, max_bytes)

    def delete_durable(self, name: str) -> int:
        """Delete a durable subscription and its stored messages; return how many."""
        self.commit()
        db = self._db
        db.execute("BEGIN")
        n = db.execute("DELETE FROM dqueue WHERE name=?", (name,)).rowcount
        db.execute("DELETE FROM durables WHERE name=?", (name,))
        db.execute("COMMIT")
        self._dheld.pop(name, None)
        self._dreject.pop(name, None)
        self._trim_due.discard(name)
        self._attached.discard(name)
        return int(n)

    def enqueue(self, name: str, q: int, row: tuple[Any, ...]) -> None:
        """Queue a message for durable ``name`` under queue sequence ``q`` (committed with
        the pass). ``row``: topic, payload, fmt, headers, origin, inc, oseq, ts."""
        topic, payload, fmt, headers, origin, inc, oseq, ts = row
        held = self._dheld.setdefault(name, [0, 0])
        held[0] += 1
        held[1] += len(payload) + len(topic)
        self._dpending.append(
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

    def pending_durable(self, name: str, after: int, limit: int) -> list[tuple[Any, ...]]:
        """Stored messages of ``name`` with q > after, oldest first."""
        return list(
            self._db.execute(
                "SELECT q, topic, payload, fmt, headers, origin, inc, oseq, ts, delivered "
                "FROM dqueue WHERE name=? AND q>? ORDER BY q LIMIT ?",
                (name, after, limit),
            )
        )

    def mark_delivered(self, name: str, qs: list[int]) -> None:
        self._dmarks.extend((name, q) for q in qs)

    def ack(self, name: str, upto: int) -> None:
        self._dacks.append((name, upto))

    def durable_depth(self, name: str) -> int:
        return int(
            self._db.execute("SELECT COUNT(*) FROM dqueue WHERE name=?", (name,)).fetchone()[0]
        )

    def durable_dropped(self, name: str) -> int:
        row = self._db.execute("SELECT dropped FROM durables WHERE name=?", (name,)).fetchone()
        return int(row[0]) if row else 0

    # -- link queues (store-and-forward; the logic is zbroker.forward's) ---------------------

    def fwd_load(
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

    def fwd_queue(
        self, qkey: str, engine_id: str, peer: str, epoch: int, next_lseq: int, meta: bytes | None
    ) -> None:
        self._fdrop.discard(qkey)
        self._fq[qkey] = (engine_id, peer, epoch, next_lseq, meta)

    def fwd_put(self, qkey: str, lseq: int, entry: bytes) -> None:
        self._fput.append((qkey, lseq, entry))

    def fwd_delete(self, qkey: str, upto: int) -> None:
        """Delete the entries of ``qkey`` with lseq <= upto (acknowledged, or dropped)."""
        self._fdel[qkey] = max(upto, self._fdel.get(qkey, 0))

    def fwd_drop(self, qkey: str) -> None:
        """Delete a queue and its entries."""
        self._fq.pop(qkey, None)
        self._fput = [p for p in self._fput if p[0] != qkey]
        self._fdel.pop(qkey, None)
        self._fdrop.add(qkey)

    def fwd_inbound(self, ikey: str, epoch: int, last_lseq: int) -> None:
        self._fin[ikey] = (epoch, last_lseq)

    def _write_forward(self) -> None:
        db = self._db
        for qkey in self._fdrop:
            db.execute("DELETE FROM fwd_out WHERE qkey=?", (qkey,))
            db.execute("DELETE FROM fwd_queues WHERE qkey=?", (qkey,))
        if self._fq:
            db.executemany(
                "INSERT OR REPLACE INTO fwd_queues VALUES (?,?,?,?,?,?)",
                [(k, *v) for k, v in self._fq.items()],
            )
        if self._fput:
            db.executemany("INSERT OR REPLACE INTO fwd_out VALUES (?,?,?)", self._fput)
        if self._fdel:
            db.executemany("DELETE FROM fwd_out WHERE qkey=? AND lseq<=?", list(self._fdel.items()))
        if self._fin:
            db.executemany(
                "INSERT OR REPLACE INTO fwd_in VALUES (?,?,?)",
                [(k, e, n) for k, (e, n) in self._fin.items()],
            )
        self._fdrop.clear()
        self._fq.clear()
        self._fput.clear()
        self._fdel.clear()
        self._fin.clear()

    def fwd_stored(self) -> int:
        """Link-queue entries in the database (committed)."""
        return int(self._db.execute("SELECT COUNT(*) FROM fwd_out").fetchone()[0])

    # -- writer batches (exactly-once staged writes) ------------------------------------------

    def batch_applied(self, writer: str, batch: int) -> bool:
        """Was ``(writer, batch)`` applied already (committed, or queued in this pass)?"""
        if any(w == writer and b == batch for w, b, _, _ in self._wpending):
            return True
        row = self._db.execute(
            "SELECT 1 FROM writer_batches WHERE writer=? AND batch=?", (writer, batch)
        ).fetchone()
        return row is not None

    def record_batch(self, writer: str, batch: int, rows: int) -> None:
        """Queue the record that ``(writer, batch)`` was applied; it is written in the same
        transaction as the retained rows of this pass."""
        self._wpending.append((writer, batch, rows, time.time()))

    def _write_batches(self) -> None:
        pending, self._wpending = self._wpending, []
        db = self._db
        db.executemany("INSERT OR REPLACE INTO writer_batches VALUES (?,?,?,?)", pending)
        for writer in {w for w, _, _, _ in pending}:
            db.execute(
                "DELETE FROM writer_batches WHERE writer=? AND batch < (SELECT batch FROM "
                "writer_batches WHERE writer=? ORDER BY batch DESC LIMIT 1 OFFSET ?)",
                (writer, writer, WRITER_BATCHES_KEPT - 1),
            )

    # -- reading ------------------------------------------------------------------------------

    def expired_upto(self, pattern: str) -> int:
        """The highest sequence that a rule retaining topics of ``pattern`` has lost to its
        bounds (0: none). A read of ``pattern`` from ``start <= expired_upto`` may have
        missed messages; from above it, nothing of the log is missing."""
        from .topics import patterns_overlap

        return max(
            (seq for rule, seq in self._expired.items() if patterns_overlap(pattern, rule)),
            default=0,
        )

    def first_seq(self) -> int:
        """The oldest retained sequence (last_seq + 1 when the log is empty)."""
        row = self._db.execute("SELECT MIN(seq) FROM retained").fetchone()
        return int(row[0]) if row[0] is not None else self.last_seq + 1

    def read(
        self, start: int, end: int | None, limit: int, topic_filter: Any = None
    ) -> list[tuple[Any, ...]]:
        """Retained rows with ``start <= seq < end`` (end None: to the newest), oldest
        first, at most ``limit``; ``topic_filter(topic) -> bool`` selects rows."""
        return self.read_page(start, end, limit, 0, topic_filter)[0]

    def read_page(
        self,
        start: int,
        end: int | None,
        limit: int,
        max_bytes: int,
        topic_filter: Any = None,
        max_scan: int = 0,
    ) -> tuple[list[tuple[Any, ...]], int | None]:
        """:meth:`read`, also stopping once the rows hold ``max_bytes`` (topic + payload;
        0: no bound; at least one row is returned) or ``max_scan`` rows were examined (0:
        no bound; what a sparse ``topic_filter`` costs the caller's thread). Returns (rows,
        the sequence to resume from, or None when the range is done)."""
        out: list[tuple[Any, ...]] = []
        size = 0
        cur = self._db.execute(
            "SELECT seq, topic, payload, fmt, headers, origin, inc, oseq, ts FROM retained "
            "WHERE seq >= ? AND seq < ? ORDER BY seq",
            (start, end if end is not None else self.last_seq + 1),
        )
        for scanned, row in enumerate(cur, 1):
            if topic_filter is None or topic_filter(row[1]):
                out.append(row)
                size += len(row[1]) + len(row[2])
                if len(out) >= limit or (max_bytes and size >= max_bytes):
                    return out, row[0] + 1
            if scanned == max_scan:
                return out, row[0] + 1
        return out, None

    def stats(self) -> dict[str, Any]:
        first = self.first_seq()
        return {
            "path": str(self.path),
            "first_seq": first,
            "last_seq": self.last_seq,
            "retained_rows": self._db.execute("SELECT COUNT(*) FROM retained").fetchone()[0],
            "dropped": dict(sorted(self.dropped.items())),
            "rules": [
                {
                    "pattern": r.pattern,
                    "max_msgs": r.max_msgs,
                    "max_bytes": r.max_bytes,
                    "max_age": r.max_age,
                    "overflow": r.overflow,
                    "held_msgs": self._held.get(r.pattern, [0, 0])[0],
                    "held_bytes": self._held.get(r.pattern, [0, 0])[1],
                }
                for r in self.rules.values()
            ],
        }
