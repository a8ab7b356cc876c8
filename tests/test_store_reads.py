"""The store (retention log) read back: ``last_seq`` never going back (trimmed, reopened,
uncommitted rows lost), reads (half-open ranges, limits, topic filters, order), reopening
and a second reader, stats, and drop counts surviving a reopen (:mod:`tests.stores`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.stores import (
    INC,
    ORIGIN,
    StoreFactory,
    all_rows,
    external_count,
    put,
    seqs,
)
from tests.stores import db_path as db_path  # (a fixture)
from tests.stores import open_store as open_store  # (a fixture)
from zbroker.config import RetainRule
from zbroker.store import Store

# -- last_seq never goes back ----------------------------------------------------------------


def test_last_seq_survives_trimming_every_row(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("O.>", max_age=60.0))
    old = time.time() - 3600
    for _ in range(3):
        put(store, "O.X", ts=old)
    store.commit()
    assert all_rows(store) == []  # all three trimmed in the same commit
    assert store.dropped == {"max_age": 3}
    assert store.last_seq == 3
    assert store.first_seq() == 4
    assert put(store, "O.X") == 4
    store.commit()
    assert seqs(all_rows(store)) == [4]


def test_last_seq_survives_reopening_an_emptied_log(
    open_store: StoreFactory, db_path: Path
) -> None:
    store = open_store(RetainRule("O.>", max_age=60.0))
    old = time.time() - 3600
    for _ in range(5):
        put(store, "O.X", ts=old)
    store.close()
    assert external_count(db_path) == 0
    again = open_store(RetainRule("O.>", max_age=60.0))
    assert again.last_seq == 5  # MAX(seq) of an empty table would say 0
    assert again.first_seq() == 6
    assert put(again, "O.X") == 6
    again.commit()
    assert seqs(all_rows(again)) == [6]


def test_last_seq_survives_reopening_after_max_msgs(
    open_store: StoreFactory, db_path: Path
) -> None:
    store = open_store(RetainRule("M.>", max_msgs=2))
    for _ in range(9):
        put(store, "M.X")
    store.close()
    again = open_store(RetainRule("M.>", max_msgs=2))
    assert again.last_seq == 9
    assert again.first_seq() == 8
    assert [put(again, "M.X") for _ in range(2)] == [10, 11]
    again.commit()
    assert seqs(all_rows(again)) == [10, 11]


def test_uncommitted_rows_are_lost_but_never_reuse_a_committed_seq(
    open_store: StoreFactory, db_path: Path
) -> None:
    """A store abandoned without commit (a crash): what was committed is intact and the
    next store continues right after it."""
    store = open_store(RetainRule("A.>"))
    for _ in range(3):
        put(store, "A.X")
    store.commit()
    put(store, "A.X")  # seq 4, never committed
    other = open_store(RetainRule("A.>"), path=db_path)  # a fresh connection, as on restart
    assert other.last_seq == 3
    assert seqs(all_rows(other)) == [1, 2, 3]


# -- reading -------------------------------------------------------------------------------------


@pytest.fixture
def filled(open_store: StoreFactory) -> Store:
    """20 rows: odd seqs on R.A, even seqs on R.B; payload = seq as text."""
    store = open_store(RetainRule("R.>"))
    for i in range(1, 21):
        assert put(store, "R.A" if i % 2 else "R.B", str(i).encode()) == i
    store.commit()
    return store


def test_read_is_half_open(filled: Store) -> None:
    assert seqs(filled.read(5, 10, 100)) == [5, 6, 7, 8, 9]
    assert seqs(filled.read(1, 2, 100)) == [1]
    assert seqs(filled.read(20, 21, 100)) == [20]
    assert seqs(filled.read(7, 7, 100)) == []


def test_read_end_none_means_to_the_newest(filled: Store) -> None:
    assert seqs(filled.read(15, None, 100)) == [15, 16, 17, 18, 19, 20]
    assert seqs(filled.read(0, None, 100)) == list(range(1, 21))
    assert filled.read(21, None, 100) == []


def test_read_out_of_range(filled: Store) -> None:
    assert filled.read(10, 5, 100) == []  # inverted
    assert filled.read(100, 200, 100) == []
    assert seqs(filled.read(18, 1000, 100)) == [18, 19, 20]


def test_read_limit(filled: Store) -> None:
    assert seqs(filled.read(5, None, 3)) == [5, 6, 7]
    assert seqs(filled.read(5, 7, 3)) == [5, 6]
    assert seqs(filled.read(1, None, 1)) == [1]
    assert seqs(filled.read(1, None, 20)) == list(range(1, 21))


def test_read_topic_filter(filled: Store) -> None:
    def only_b(topic: str) -> bool:
        return topic == "R.B"

    assert seqs(filled.read(1, None, 100, only_b)) == list(range(2, 21, 2))
    # the limit counts matching rows only; the range still bounds them
    assert seqs(filled.read(5, None, 3, only_b)) == [6, 8, 10]
    assert seqs(filled.read(5, 12, 100, only_b)) == [6, 8, 10]
    assert filled.read(1, None, 100, lambda t: False) == []


def test_read_rows_in_order_with_payloads(filled: Store) -> None:
    rows = filled.read(3, 6, 10)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (3, "R.A", b"3"),
        (4, "R.B", b"4"),
        (5, "R.A", b"5"),
    ]


def test_read_does_not_see_queued_rows(filled: Store) -> None:
    put(filled, "R.A", b"21")
    assert seqs(filled.read(19, None, 100)) == [19, 20]  # seq 21 is queued, not committed
    filled.commit()
    assert seqs(filled.read(19, None, 100)) == [19, 20, 21]


# -- reopening -------------------------------------------------------------------------------


def test_reopening_keeps_everything(open_store: StoreFactory, db_path: Path) -> None:
    rules = (RetainRule("A.>", max_msgs=100), RetainRule("B.*", max_bytes=10_000))
    store = open_store(*rules)
    for i in range(30):
        put(store, "A.X" if i % 3 else "B.Y", str(i).encode(), headers={"i": i}, fmt=i % 2)
    store.commit()
    before = all_rows(store)
    assert len(before) == 30
    store.close()
    again = open_store(*rules)
    assert all_rows(again) == before
    assert again.last_seq == 30
    assert again.first_seq() == 1
    stats = again.stats()
    assert stats["retained_rows"] == 30
    assert stats["first_seq"] == 1
    assert stats["last_seq"] == 30
    assert put(again, "A.Z") == 31
    again.commit()
    assert seqs(all_rows(again)) == list(range(1, 32))


def test_committed_rows_visible_to_a_second_store_without_close(
    open_store: StoreFactory, db_path: Path
) -> None:
    store = open_store(RetainRule("A.>"))
    for _ in range(4):
        put(store, "A.X")
    store.commit()
    second = open_store(RetainRule("A.>"))
    assert seqs(all_rows(second)) == [1, 2, 3, 4]
    assert second.last_seq == 4


# -- stats ------------------------------------------------------------------------------------


STATS_KEYS = ("path", "first_seq", "last_seq", "retained_rows", "dropped", "rules")
RULE_KEYS = ("pattern", "max_msgs", "max_bytes", "max_age")


def test_stats(open_store: StoreFactory, db_path: Path) -> None:
    store = open_store(RetainRule("S.>", max_msgs=3), RetainRule("T.*", max_age=5.5))
    for _ in range(5):
        put(store, "S.X")
    put(store, "T.Y")
    store.commit()
    stats = store.stats()
    # held counts are exact: what the rule keeps after trimming
    assert [(r["overflow"], r["held_msgs"]) for r in stats["rules"]] == [
        ("drop-oldest", 3),
        ("drop-oldest", 1),
    ]
    stats["rules"] = [{k: r[k] for k in RULE_KEYS} for r in stats["rules"]]
    assert {k: stats[k] for k in STATS_KEYS} == {
        "path": str(db_path),
        "first_seq": 3,
        "last_seq": 6,
        "retained_rows": 4,
        "dropped": {"max_msgs": 2},
        "rules": [
            {"pattern": "S.>", "max_msgs": 3, "max_bytes": 0, "max_age": 0.0},
            {"pattern": "T.*", "max_msgs": 0, "max_bytes": 0, "max_age": 5.5},
        ],
    }


def test_drop_counts_and_expired_watermarks_survive_a_reopen(
    open_store: StoreFactory, db_path: Path
) -> None:
    """What the bounds dropped (by reason) and the highest sequence each rule lost are
    stored with the data, so status and the Spark reader's failOnDataLoss see them after a
    restart."""
    rules = (RetainRule("A.>", max_msgs=3), RetainRule("B.>", max_msgs=2, overflow="reject-new"))
    store = open_store(*rules)
    for _ in range(5):
        put(store, "A.X")
    store.commit()
    assert put(store, "B.X") and put(store, "B.X")
    assert store.retain("B.>", "B.X", b"p", 0, None, ORIGIN, INC, 1, time.time()) is None
    store.commit()
    assert store.dropped == {"max_msgs": 2, "reject_new": 1}
    assert (store.expired_upto("A.>"), store.expired_upto(">"), store.expired_upto("B.>")) == (
        2,
        2,
        0,
    )
    store.close()
    again = open_store(*rules, path=db_path)
    assert again.dropped == {"max_msgs": 2, "reject_new": 1}
    assert again.expired_upto("A.X") == 2 and again.expired_upto("B.*") == 0
    assert again.stats()["dropped"] == {"max_msgs": 2, "reject_new": 1}
