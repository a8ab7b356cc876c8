"""Persistent messages seen (tables ``pseen_floors``, ``pseen_above``): the state of the
store-and-forward dedupe (``features.forward.PersistentDedupe``) kept with the store, so
that a node restarted in a mesh still drops a copy that comes a second time by another path.

Per ``(origin, incarnation)``: the floor (every pseq up to it was seen) and the pseqs seen
above it. The dedupe changes its state in memory and notes here what changed during the
pass (:attr:`SeenJournal.changed`: the origins whose state moved, :attr:`SeenJournal.added`:
pseqs put above a floor); :meth:`SeenJournal.write` writes that in the pass's transaction
— the one that stores what those messages produced — so no commit is added: a floor row
per origin that moved and a row per pseq above its floor, and the rows a floor caught up
with deleted. A node killed before that commit took neither the messages nor their marks.
"""

from __future__ import annotations

import sqlite3

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
    pseq     INTEGER NOT NULL,
    PRIMARY KEY (origin, inc, pseq)
) WITHOUT ROWID;
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
        for origin, inc, pseq in db.execute("SELECT origin, inc, pseq FROM pseen_above"):
            state = out.get((origin, inc))
            if state is not None:
                state[1].add(pseq)
        return out

    def forget(self, key: tuple[str, int]) -> None:
        """An origin the dedupe dropped (it holds too many): its rows go too."""
        self.changed.pop(key, None)
        self._forgotten.append(key)

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
        # rows the floor caught up with (or folded) are below it now
        db.executemany("DELETE FROM pseen_above WHERE origin=? AND inc=? AND pseq<=?", floors)
        if self.added:
            added, self.added = self.added, []
            keep = []
            for o, i, p in added:
                state = changed.get((o, i))
                if state is not None and p in state[1]:
                    keep.append((o, i, p))
            db.executemany("INSERT OR IGNORE INTO pseen_above VALUES (?,?,?)", keep)
