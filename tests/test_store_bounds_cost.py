"""What a bound costs per commit: a retention rule or durable holding many rows pays for its
bounds in proportion to what they remove, not to what it holds (the node's loop waits for
every commit). Measured deterministically in SQLite virtual-machine steps, on real files.
Bounds at or just past what is held, so that each commit trims."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zbroker.store import RetainRule, Store

HELD = 20_000
#: SQLite VM steps a one-message commit may take (a scan of HELD rows takes far more)
BUDGET = 20_000


def steps(store: Store, work: Callable[[], Any]) -> int:
    """SQLite VM steps ``work`` takes (counted in hundreds)."""
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    store.db.set_progress_handler(tick, 100)
    try:
        work()
    finally:
        store.db.set_progress_handler(None, 100)
    return count[0] * 100


RULES = {
    "max_msgs": RetainRule("A.>", max_msgs=HELD),
    "max_bytes": RetainRule("A.>", max_bytes=HELD * 103),
    "max_age": RetainRule("A.>", max_age=3600.0),
}


@pytest.mark.parametrize("bound", sorted(RULES))
def test_a_retention_bound_costs_what_it_removes(tmp_path: Path, bound: str) -> None:
    store = Store(tmp_path / "s.sqlite3", (RULES[bound],))
    try:
        now = time.time()
        for i in range(HELD):
            store.retain("A.>", "A.X", b"p" * 100, 0, None, "o", 1, i, now - 1800)
        store.commit()

        def one() -> None:
            store.retain("A.>", "A.X", b"p" * 100, 0, None, "o", 1, HELD, now)
            store.commit()

        assert steps(store, one) < BUDGET
        held = store.retention.rule_stats()[0]["held_msgs"]
        assert held == (HELD if bound != "max_age" else HELD + 1)
        assert store.retention.row_count() == held
        # the oldest went, the newest stayed
        assert store.first_seq() == (2 if bound != "max_age" else 1)
    finally:
        store.close()


DURABLES = {
    "max_msgs": (HELD, 0, 0.0),
    "max_bytes": (0, HELD * 103, 0.0),  # (a row weighs topic + payload: 103)
    "max_age": (0, 0, 3600.0),
}


@pytest.mark.parametrize("bound", sorted(DURABLES))
def test_a_durable_bound_costs_what_it_removes(tmp_path: Path, bound: str) -> None:
    store = Store(tmp_path / "s.sqlite3")
    try:
        store.create_durable("D", "A.>", *DURABLES[bound])
        now = time.time()
        for q in range(1, HELD + 1):
            store.enqueue("D", q, ("A.X", b"p" * 100, 0, None, "o", 1, q, now - 1800))
        store.commit()

        def one() -> None:
            store.enqueue("D", HELD + 1, ("A.X", b"p" * 100, 0, None, "o", 1, HELD + 1, now))
            store.commit()

        assert steps(store, one) < BUDGET
        kept = [r[0] for r in store.pending_durable("D", 0, 3)]
        assert kept == ([2, 3, 4] if bound != "max_age" else [1, 2, 3])
        assert store.durable_depth("D") == (HELD if bound != "max_age" else HELD + 1)
    finally:
        store.close()
