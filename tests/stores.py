"""What the store's tests (``tests/test_store*.py``) share: a real SQLite file in
``tmp_path`` (``db_path``), a factory of stores closed at the end (``open_store``), and
writers and readers of its rows. Every count in those tests is exact: sequences, rows kept,
rows dropped and the reason they were dropped."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from zbroker.config import RetainRule
from zbroker.store import Store

ORIGIN = "origin-1"
INC = 3

StoreFactory = Callable[..., Store]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite3"


@pytest.fixture
def open_store(db_path: Path) -> Iterator[StoreFactory]:
    """Open Store objects on ``db_path`` (or another path); every one is closed at teardown."""
    opened: list[Store] = []

    def make(*rules: RetainRule, path: Path | None = None, fsync: bool = False) -> Store:
        store = Store(path or db_path, rules, fsync=fsync)
        opened.append(store)
        return store

    try:
        yield make
    finally:
        for store in reversed(opened):
            try:
                store.close()
            except sqlite3.ProgrammingError:  # closed by the test already
                pass


_oseq = iter(range(1, 1 << 30))


def put(
    store: Store,
    topic: str,
    payload: bytes = b"payload",
    *,
    fmt: int = 0,
    headers: dict[str, Any] | None = None,
    ts: float | None = None,
    oseq: int | None = None,
) -> int | None:
    """Queue one message under the rule that retains ``topic``; return its sequence (None:
    a ``reject-new`` rule was full, as :meth:`Store.retain` says)."""
    rule = store.retain_rule(topic)
    assert rule is not None, f"no rule retains {topic!r}"
    return store.retain(
        rule,
        topic,
        payload,
        fmt,
        headers,
        ORIGIN,
        INC,
        next(_oseq) if oseq is None else oseq,
        time.time() if ts is None else ts,
    )


def seqs(rows: list[tuple[Any, ...]]) -> list[int]:
    return [int(r[0]) for r in rows]


def all_rows(store: Store) -> list[tuple[Any, ...]]:
    return store.read(0, None, 1_000_000)


def external_count(path: Path) -> int:
    """Rows visible to a second, independent SQLite connection."""
    con = sqlite3.connect(str(path))
    try:
        return int(con.execute("SELECT COUNT(*) FROM retained").fetchone()[0])
    finally:
        con.close()
