"""The retention log (table ``retained``): messages whose topic matches a ``retain`` rule.

Messages are numbered by a per-node sequence (``seq``, gap-free, starting at 1, never going
back even when the newest rows were trimmed away) and bounded per rule by ``max_msgs`` /
``max_bytes`` / ``max_age`` (oldest dropped first; what was dropped is counted). The
highest sequence each rule has lost to its bounds is kept (``expired:RULE`` in ``meta``),
so a reader can tell "expired" from "never matched" (the Spark connector's
``failOnDataLoss``). Readable by range (``Client.read``, ``zbroker replay``).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

import msgpack

from ..sublist import Sublist
from . import meta
from .bounds import age_index, oldest_cut

__all__ = ["SCHEMA", "RetainRule", "RetentionLog"]

SCHEMA = """
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
"""


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


class RetentionLog:
    """The retained rows, the rules that select and bound them, and the rows queued for
    the next commit."""

    def __init__(
        self, db: sqlite3.Connection, rules: tuple[RetainRule, ...], drops: meta.DropCounts
    ) -> None:
        self._db = db
        self._drops = drops
        self.rules = {r.pattern: r for r in rules}
        self._match: Sublist[str] = Sublist()
        for r in rules:
            self._match.insert(r.pattern, r.pattern)
        row = db.execute("SELECT MAX(seq) FROM retained").fetchone()
        # the sequence never goes back, even when the newest rows were trimmed away
        self.last_seq: int = max(row[0] or 0, meta.get(db, "last_seq") or 0)
        #: rows written by this process (committed)
        self.retained = 0
        self._pending: list[tuple[Any, ...]] = []
        # rows and bytes held per rule (committed + queued), kept exact through trims
        self._held: dict[str, list[int]] = {r.pattern: [0, 0] for r in rules}
        for rule_pattern, n, size in db.execute(
            "SELECT rule, COUNT(*), COALESCE(SUM(size), 0) FROM retained GROUP BY rule"
        ):
            self._held.setdefault(rule_pattern, [0, 0])[:] = [n, size]
        # rule -> highest sequence its bounds deleted (0: nothing lost yet)
        self._expired: dict[str, int] = meta.with_prefix(db, "expired:")
        if any(r.max_age for r in rules):
            age_index(db, "retained", "rule")

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
            self._drops.add("reject_new", 1)
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
        """Would a message of ``size`` bytes overflow ``rule`` under ``reject-new``? (Per
        message: written out rather than through :meth:`overflowing_rule`.)"""
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

    def dirty(self) -> bool:
        return bool(self._pending)

    def write(self) -> int:
        """Insert the queued rows (inside the store's transaction), then apply the bounds
        of the rules they fall under. Returns the number of rows written."""
        rows, self._pending = self._pending, []
        if not rows:
            return 0
        db = self._db
        db.executemany("INSERT INTO retained VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        meta.put(db, [("last_seq", self.last_seq)])
        for rule in {r[1] for r in rows}:
            self._trim(rule)
        return len(rows)

    # -- bounds -------------------------------------------------------------------------------

    def _trim(self, rule_pattern: str) -> None:
        rule = self.rules.get(rule_pattern)
        if rule is None:
            return
        count = self._drops.add
        if rule.max_age:
            count("max_age", self._delete(rule_pattern, "ts < ?", (time.time() - rule.max_age,)))
        if rule.overflow == "reject-new":
            return  # nothing past the bounds was accepted
        # the held counts are exact (committed rows: the queued ones were just written),
        # so a bound not reached costs nothing, and one passed reads only what goes
        held = self._held.get(rule_pattern, [0, 0])
        if rule.max_msgs and held[0] > rule.max_msgs:
            n = self._delete(
                rule_pattern,
                "seq <= (SELECT seq FROM retained WHERE rule=? ORDER BY seq LIMIT 1 OFFSET ?)",
                (rule_pattern, held[0] - rule.max_msgs - 1),
            )
            count("max_msgs", n)
        if rule.max_bytes and held[1] > rule.max_bytes:
            cut = oldest_cut(
                self._db.execute(
                    "SELECT seq, size FROM retained WHERE rule=? ORDER BY seq", (rule_pattern,)
                ),
                held[1] - rule.max_bytes,
            )
            if cut is not None:
                count("max_bytes", self._delete(rule_pattern, "seq <= ?", (cut,)))

    def expire_aged(self, now: float) -> None:
        """Apply ``max_age`` to every rule that has one, also to a rule no message came
        to lately (its bounds otherwise apply when it takes one)."""
        for rule in self.rules.values():
            if rule.max_age:  # (by the (rule, ts) index: a probe when nothing is due)
                n = self._delete(rule.pattern, "ts < ?", (now - rule.max_age,))
                self._drops.add("max_age", n)

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
            meta.put(self._db, [(f"expired:{rule_pattern}", top)])
        return len(deleted)

    # -- reading ------------------------------------------------------------------------------

    def expired_upto(self, pattern: str) -> int:
        """The highest sequence that a rule retaining topics of ``pattern`` has lost to its
        bounds (0: none). A read of ``pattern`` from ``start <= expired_upto`` may have
        missed messages; from above it, nothing of the log is missing."""
        from ..topics import patterns_overlap

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

    def row_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM retained").fetchone()[0])

    def rule_stats(self) -> list[dict[str, Any]]:
        """Each rule's bounds and what it holds now (committed + queued)."""
        return [
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
        ]
