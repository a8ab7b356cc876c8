"""How often each stored message of a durable has moved between nodes, and a durable's
settings as a move hands them to the new home.

A shared durable whose home has no consumer of its own moves to a node that has them
(``features/durables/moves.py``); each message it carries counts one move more. The count
lives in ``dqueue.moves`` (0 for a message stored where it was published), so a message
cannot travel back and forth for ever: a durable holding a message that has moved
``max_moves`` times stays where it is until that message is consumed (from there, over
the network), and the messages that hit the bound are counted. ``durables.moving_to``
names the node a durable is moving to, so an old home restarted mid-move offers it again.
"""

from __future__ import annotations

import sqlite3
from typing import Any

__all__ = ["DurableMoves"]


class DurableMoves:
    """The ``moves`` column of ``dqueue`` (added to a store written before it)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        columns = {row[1] for row in db.execute("PRAGMA table_info(dqueue)")}
        if "moves" not in columns:
            db.execute("ALTER TABLE dqueue ADD COLUMN moves INTEGER NOT NULL DEFAULT 0")
        columns = {row[1] for row in db.execute("PRAGMA table_info(durables)")}
        if "moving_to" not in columns:  # (a move under way: resumed after a restart)
            db.execute("ALTER TABLE durables ADD COLUMN moving_to TEXT")
        self._pending: list[tuple[int, str, int]] = []
        self._moving: list[tuple[str | None, str]] = []

    def set_moves(self, name: str, q: int, moves: int) -> None:
        """Message ``q`` of ``name`` (enqueued this pass) has moved ``moves`` times
        (written with the pass's commit, after the message itself)."""
        self._pending.append((moves, name, q))

    def set_moving(self, name: str, target: str | None) -> None:
        """Durable ``name`` is moving to node ``target`` (None: not moving); written with
        the pass's commit, beside the offer that starts the move."""
        self._moving.append((target, name))

    def moving(self) -> dict[str, str]:
        """name -> target of the moves under way when the node last stopped."""
        sql = "SELECT name, moving_to FROM durables WHERE moving_to IS NOT NULL"
        return dict(self._db.execute(sql))

    def dirty(self) -> bool:
        return bool(self._pending or self._moving)

    def write(self) -> None:
        rows, self._pending = self._pending, []
        if rows:
            self._db.executemany("UPDATE dqueue SET moves=? WHERE name=? AND q=?", rows)
        moving, self._moving = self._moving, []
        if moving:
            self._db.executemany("UPDATE durables SET moving_to=? WHERE name=?", moving)

    def moved(self, name: str) -> dict[int, int]:
        """q -> moves of the messages of ``name`` that have moved at least once."""
        sql = "SELECT q, moves FROM dqueue WHERE name=? AND moves>0"
        return dict(self._db.execute(sql, (name,)))

    def stored_ids(self, name: str) -> set[tuple[str, int, int]]:
        """The ids (origin, incarnation, sequence) of the messages ``name`` stores."""
        sql = "SELECT origin, inc, oseq FROM dqueue WHERE name=?"
        return {(o, i, s) for o, i, s in self._db.execute(sql, (name,))}

    def at_bound(self, name: str, limit: int) -> list[int]:
        """The messages of ``name`` that have moved ``limit`` times or more."""
        return [
            q
            for (q,) in self._db.execute(
                "SELECT q FROM dqueue WHERE name=? AND moves>=? ORDER BY q", (name, limit)
            )
        ]

    def spec(self, name: str) -> dict[str, Any] | None:
        """The settings a new home creates durable ``name`` with (None: not held here)."""
        row = self._db.execute(
            "SELECT pattern, max_msgs, max_bytes, max_age, overflow, selector FROM durables "
            "WHERE name=?",
            (name,),
        ).fetchone()
        if row is None:
            return None
        keys = ("pattern", "max_msgs", "max_bytes", "max_age", "overflow", "selector")
        return dict(zip(keys, row, strict=True))
