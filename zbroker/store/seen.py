"""Persistent messages seen (tables ``pseen_floors``, ``pseen_above``): the state of the
store-and-forward dedupe (``features.forward.PersistentDedupe``) kept with the store, so
that a node restarted in a mesh still drops a copy that comes a second time by another path.

Per ``(origin, incarnation)``: the floor (every pseq up to it was seen) and the pseqs seen
above it. The dedupe changes its state in memory and notes here what changed during the
pass (:attr:`SeenJournal.changed`: the origins whose state moved, :attr:`SeenJournal.added`:
pseqs put above a floor); :meth:`SeenJournal.write` writes that in the pass's transaction
— the one that stores what those messages produced — so no commit is added. Per origin
that moved: its floor row, and one row holding the pass's pseqs above the floor (packed,
with the highest: a branch that sees every third message costs a row per pass, not one per
message); rows wholly below the floor are deleted, and numbers a floor caught up with in a
row that stays are skipped on load. A node killed before that commit took neither the
messages nor their marks.
"""

from __future__ import annotations

import sqlite3

import msgpack

__all__ = ["SCHEMA", "SeenJournal", "SeenState"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS pseen_floors (
    origin   TEXT NOT NULL,
    inc      INTEGER NOT NULL,
    floor    INTEGER NOT NULL,
    UNIQUE (origin, inc)
);
CREATE TABLE IF NOT EXISTS pseen_above (
    origin   TEXT NOT NULL,
    inc      INTEGER NOT NULL,
    hi       INTEGER NOT NULL,
    pseqs    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS pseen_above_hi ON pseen_above (origin, inc, hi);
"""

#: one origin's state as the dedupe holds it: ([floor], pseqs seen above the floor)
SeenState = tuple[list[int], set[int]]


class SeenJournal:
    """The stored dedupe state, and what changed in it during this pass."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        #: origins whose state changed this pass -> their state (read when written)
        self.changed: dict[tuple[str, int], SeenState] = {}
        #: (origin, inc, pseq) put above the floor this pass (absorbed ones are skipped)
        self.added: list[tuple[str, int, int]] = []
        self._forgotten: list[tuple[str, int]] = []

    def load(self) -> dict[tuple[str, int], SeenState]:
        """The state as committed, origins in the order first heard of."""
        out: dict[tuple[str, int], SeenState] = {}
        db = self._db
        for origin, inc, floor in db.execute(
            "SELECT origin, inc, floor FROM pseen_floors ORDER BY rowid"
        ):
            out[(origin, inc)] = ([floor], set())
        for origin, inc, pseqs in db.execute("SELECT origin, inc, pseqs FROM pseen_above"):
            state = out.get((origin, inc))
            if state is not None:
                floor = state[0][0]
                state[1].update(p for p in msgpack.unpackb(pseqs) if p > floor)
        return out

    def forget(self, key: tuple[str, int]) -> None:
        """An origin the dedupe dropped (it holds too many): its rows go too."""
        self.changed.pop(key, None)
        self._forgotten.append(key)
        # (rare: past 65,536 origins) its numbers of this pass are not its state any more
        self.added = [a for a in self.added if (a[0], a[1]) != key]

    def dirty(self) -> bool:
        return bool(self.changed or self._forgotten)

    def write(self) -> None:
        """Write this pass's changes (inside the store's transaction)."""
        db = self._db
        if self._forgotten:
            db.executemany("DELETE FROM pseen_floors WHERE origin=? AND inc=?", self._forgotten)
            db.executemany("DELETE FROM pseen_above WHERE origin=? AND inc=?", self._forgotten)
            self._forgotten = []
        if not self.changed:
            return
        changed, self.changed = self.changed, {}
        floors = [(o, i, s[0][0]) for (o, i), s in changed.items()]
        db.executemany(
            "INSERT INTO pseen_floors VALUES (?,?,?) "
            "ON CONFLICT (origin, inc) DO UPDATE SET floor=excluded.floor",
            floors,
        )
        # rows the floor caught up with (or folded) wholly: gone
        db.executemany("DELETE FROM pseen_above WHERE origin=? AND inc=? AND hi<=?", floors)
        if self.added:
            added, self.added = self.added, []
            by_origin: dict[tuple[str, int], list[int]] = {}
            for o, i, p in added:
                by_origin.setdefault((o, i), []).append(p)
            rows = []
            for (o, i), pseqs in by_origin.items():
                floor = changed[(o, i)][0][0]
                keep = [p for p in pseqs if p > floor]
                if keep:
                    rows.append((o, i, max(keep), msgpack.packb(keep)))
            db.executemany("INSERT INTO pseen_above VALUES (?,?,?,?)", rows)
