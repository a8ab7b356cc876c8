"""The persistent dedupe's state kept with the store (``store/seen.py``): after any run of
messages and commits, a dedupe loaded from the store holds exactly the state the running
one had at its last commit — floors, numbers above them, folds and forgotten origins."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from zbroker.features.forward import PersistentDedupe
from zbroker.store import Store


@pytest.mark.parametrize("seed", range(6))
def test_the_dedupe_loaded_from_the_store_is_the_one_committed(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "s.db"
    store = Store(path)
    live = PersistentDedupe(window=20, max_origins=3, journal=store.seen)
    committed: dict[tuple[str, int], tuple[int, set[int]]] = {}
    for _ in range(60):
        for _ in range(rng.randrange(1, 40)):
            origin = rng.choice("ABCD")
            # mostly a stream with gaps (a branch), some repeats and stragglers
            live.seen(origin, rng.choice((1, 1, 2)), rng.randrange(1, 200))
        store.commit()
        committed = {k: (f[0], set(a)) for k, (f, a) in live._origins.items()}
        if rng.random() < 0.2:
            store.close()
            store = Store(path)
            live = PersistentDedupe(window=20, max_origins=3, journal=store.seen)
            loaded = {k: (f[0], set(a)) for k, (f, a) in live._origins.items()}
            assert loaded == committed
            assert list(live._origins) == list(committed)  # the order origins are forgotten in
    store.close()
    reloaded = PersistentDedupe(journal=Store(path).seen)
    assert {k: (f[0], set(a)) for k, (f, a) in reloaded._origins.items()} == committed


def test_what_a_pass_did_not_commit_is_not_remembered(tmp_path: Path) -> None:
    """A node killed before its pass's commit took neither the messages nor their marks."""
    store = Store(tmp_path / "s.db")
    d = PersistentDedupe(journal=store.seen)
    assert not d.seen("A", 1, 1) and not d.seen("A", 1, 5)
    store.commit()
    assert not d.seen("A", 1, 2) and not d.seen("A", 1, 9)  # never committed
    store.db.close()  # killed: no commit
    again = PersistentDedupe(journal=Store(tmp_path / "s.db").seen)
    assert again.seen("A", 1, 1) and again.seen("A", 1, 5)
    assert not again.seen("A", 1, 2) and not again.seen("A", 1, 9)
