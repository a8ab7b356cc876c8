"""Unit tests of zbroker.store.Store (the retention log) on a real SQLite file in tmp_path,
and of the validation of ``[[retain]]`` rules in config files and keywords.

Every count is exact: sequences, rows kept, rows dropped and the reason they were dropped.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from zbroker.config import NodeConfig, RetainRule, load_config
from zbroker.errors import ConfigError
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
) -> int:
    """Queue one message under the rule that retains ``topic``; return its sequence."""
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


# -- sequence numbering ---------------------------------------------------------------------------


def test_empty_store(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("A.>"))
    assert store.last_seq == 0
    assert store.first_seq() == 1  # last_seq + 1 when empty
    assert store.read(0, None, 10) == []
    assert store.commit() == 0
    assert store.dropped == {}
    assert store.retained == 0


def test_sequences_are_gap_free_from_one(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("A.>"), RetainRule("B.*"))
    got = [put(store, "A.X"), put(store, "B.Y"), put(store, "A.Y.Z")]
    assert got == [1, 2, 3]  # assigned when queued
    assert store.last_seq == 3
    assert store.commit() == 3
    got += [put(store, "B.Z") for _ in range(4)]
    assert store.commit() == 4
    got.append(put(store, "A.Q"))
    assert store.commit() == 1
    assert got == list(range(1, 9))
    assert seqs(all_rows(store)) == list(range(1, 9))
    assert store.first_seq() == 1
    assert store.last_seq == 8
    assert store.retained == 8


def test_read_page_stops_after_max_scan_rows_examined(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("A.>"), RetainRule("B.>"))
    for i in range(1, 21):
        put(store, "A.X" if i % 5 == 0 else "B.X")  # A.X at 5, 10, 15, 20
    store.commit()

    def only_a(topic: str) -> bool:
        return topic == "A.X"

    rows, resume = store.read_page(1, None, 100, 0, only_a, max_scan=7)
    assert (seqs(rows), resume) == ([5], 8)  # 1..7 examined
    rows, resume = store.read_page(8, None, 100, 0, only_a, max_scan=7)
    assert (seqs(rows), resume) == ([10], 15)
    rows, resume = store.read_page(15, None, 100, 0, only_a, max_scan=7)
    assert (seqs(rows), resume) == ([15, 20], None)  # the range ended first
    # the limit still ends a page at the row that reached it
    rows, resume = store.read_page(1, None, 1, 0, only_a, max_scan=7)
    assert (seqs(rows), resume) == ([5], 6)
    # no bound: one page, whatever the filter skips
    rows, resume = store.read_page(1, 13, 100, 0, only_a)
    assert (seqs(rows), resume) == ([5, 10], None)
    # nothing matches: an empty page that still moves on
    rows, resume = store.read_page(1, None, 100, 0, lambda t: False, max_scan=7)
    assert (rows, resume) == ([], 8)


def test_durable_bounds_skip_what_is_in_flight_to_an_attached_subscriber(
    open_store: StoreFactory,
) -> None:
    """The node's order in a pass: commit the new rows (their trim held while the pump
    is due), mark what the pump sends, commit (bounds apply to what waits). Once the
    subscriber leaves, what was in flight counts again."""
    store = open_store()
    store.create_durable("d", "D.>", max_msgs=3)
    for q in range(1, 9):
        store.enqueue("d", q, ("D.X", str(q).encode(), 0, None, ORIGIN, INC, q, time.time()))
    store.set_attached("d", True)
    store.trim_hold = {"d"}
    assert store.commit() == 8
    assert store.durable_depth("d") == 8  # held: nothing trimmed yet
    store.trim_hold = set()
    store.mark_delivered("d", [1, 2, 3, 4, 5])  # credit 5: these leave now
    store.commit()
    assert (store.durable_depth("d"), store.durable_dropped("d")) == (8, 0)  # 3 wait
    store.enqueue("d", 9, ("D.X", b"9", 0, None, ORIGIN, INC, 9, time.time()))
    store.commit()
    # 4 wait behind the 5 in flight: the oldest waiting one goes
    pending = store.pending_durable("d", 0, 100)
    in_flight = [(q, 1) for q in range(1, 6)]
    assert [(r[0], r[9]) for r in pending] == [*in_flight, (7, 0), (8, 0), (9, 0)]
    assert store.durable_dropped("d") == 1
    store.set_attached("d", False)
    store.commit()  # the subscriber left: all 8 count, the newest 3 stay
    assert [r[0] for r in store.pending_durable("d", 0, 100)] == [7, 8, 9]
    assert store.durable_dropped("d") == 6
    assert store.commit() == 0  # nothing further due


def test_rows_hold_exactly_what_was_retained(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("A.>"))
    put(store, "A.B", b"\x00\xffraw", fmt=0, headers=None, ts=1000.5, oseq=41)
    packed = msgpack.packb({"k": [1, 2]})
    put(store, "A.C", packed, fmt=1, headers={"h": "v", "n": 7}, ts=1001.25, oseq=42)
    store.commit()
    rows = all_rows(store)
    assert len(rows) == 2
    seq, topic, payload, fmt, headers, origin, inc, oseq, ts = rows[0]
    assert (seq, topic, payload, fmt, headers, origin, inc, oseq, ts) == (
        1,
        "A.B",
        b"\x00\xffraw",
        0,
        None,
        ORIGIN,
        INC,
        41,
        1000.5,
    )
    seq, topic, payload, fmt, headers, origin, inc, oseq, ts = rows[1]
    assert (seq, topic, payload, fmt, origin, inc, oseq, ts) == (
        2,
        "A.C",
        packed,
        1,
        ORIGIN,
        INC,
        42,
        1001.25,
    )
    assert msgpack.unpackb(headers) == {"h": "v", "n": 7}  # headers are stored msgpacked


# -- commit batching ---------------------------------------------------------------------------


def test_rows_are_invisible_until_commit_then_all_visible(
    open_store: StoreFactory, db_path: Path
) -> None:
    store = open_store(RetainRule("A.>"))
    n = 250
    for i in range(n):
        put(store, "A.X", str(i).encode())
    assert store.last_seq == n
    assert external_count(db_path) == 0  # queued, not written
    assert store.commit() == n  # one transaction
    assert external_count(db_path) == n
    assert store.commit() == 0  # nothing left queued
    assert external_count(db_path) == n
    assert store.retained == n
    # a second batch: again nothing until the commit, then exactly all of it
    for i in range(7):
        put(store, "A.Y", str(i).encode())
    assert external_count(db_path) == n
    assert store.commit() == 7
    assert external_count(db_path) == n + 7
    assert store.retained == n + 7


def test_store_uses_wal_and_the_fsync_setting(open_store: StoreFactory, tmp_path: Path) -> None:
    normal = open_store(RetainRule("A.>"), path=tmp_path / "normal.sqlite3")
    full = open_store(RetainRule("A.>"), path=tmp_path / "full.sqlite3", fsync=True)
    for store in (normal, full):
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert normal.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert full.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_close_commits_what_is_queued(open_store: StoreFactory, db_path: Path) -> None:
    store = open_store(RetainRule("A.>"))
    for _ in range(5):
        put(store, "A.X")
    store.close()
    assert external_count(db_path) == 5
    again = open_store(RetainRule("A.>"))
    assert again.last_seq == 5
    assert seqs(all_rows(again)) == [1, 2, 3, 4, 5]


# -- bounds -------------------------------------------------------------------------------------


def test_max_msgs_keeps_the_newest(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("M.>", max_msgs=3))
    for i in range(10):
        put(store, "M.X", str(i).encode())
    assert store.commit() == 10
    rows = all_rows(store)
    assert seqs(rows) == [8, 9, 10]
    assert [r[2] for r in rows] == [b"7", b"8", b"9"]
    assert store.dropped == {"max_msgs": 7}
    assert store.first_seq() == 8
    # one at a time: each commit drops exactly the oldest one
    for i in range(10, 12):
        put(store, "M.Y", str(i).encode())
        store.commit()
    assert seqs(all_rows(store)) == [10, 11, 12]
    assert store.dropped == {"max_msgs": 9}
    assert store.last_seq == 12
    assert store.retained == 12


def test_max_msgs_not_reached_drops_nothing(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("M.>", max_msgs=5))
    for _ in range(5):
        put(store, "M.X")
    store.commit()
    assert seqs(all_rows(store)) == [1, 2, 3, 4, 5]
    assert store.dropped == {}


def test_max_bytes_drops_oldest_until_the_rest_fits(open_store: StoreFactory) -> None:
    # size of a row = len(payload) + len(topic); "B.X" + 7 bytes = 10
    store = open_store(RetainRule("B.>", max_bytes=35))
    for i in range(10):
        put(store, "B.X", b"%07d" % i)
    store.commit()
    rows = all_rows(store)
    assert seqs(rows) == [8, 9, 10]  # 30 bytes <= 35; a fourth row would make 40
    assert [r[2] for r in rows] == [b"0000007", b"0000008", b"0000009"]
    assert store.dropped == {"max_bytes": 7}
    # a 25-byte row: 55 in all -> drop 8 (45), drop 9 (35 fits) -> keep 10 and 11
    put(store, "B.X", b"y" * 22)
    store.commit()
    assert seqs(all_rows(store)) == [10, 11]
    assert store.dropped == {"max_bytes": 9}


def test_max_bytes_exactly_at_the_bound_is_kept(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("B.>", max_bytes=30))
    for _ in range(3):
        put(store, "B.X", b"1234567")  # 10 bytes each: 30 in all
    store.commit()
    assert seqs(all_rows(store)) == [1, 2, 3]
    assert store.dropped == {}


def test_max_bytes_a_single_oversized_row_is_dropped(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("B.>", max_bytes=10))
    put(store, "B.X", b"1234567")  # 10: fits
    put(store, "B.X", b"x" * 50)  # 53: can never fit
    store.commit()
    assert all_rows(store) == []
    assert store.dropped == {"max_bytes": 2}
    assert store.last_seq == 2
    assert store.first_seq() == 3


def test_max_age_drops_the_old_rows(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("G.>", max_age=60.0))
    now = time.time()
    for i in range(4):
        put(store, "G.OLD", str(i).encode(), ts=now - 3600 + i)
    for i in range(3):
        put(store, "G.NEW", str(i).encode(), ts=now)
    store.commit()
    rows = all_rows(store)
    assert seqs(rows) == [5, 6, 7]
    assert {r[1] for r in rows} == {"G.NEW"}
    assert store.dropped == {"max_age": 4}


def test_max_age_applies_at_the_next_commit_of_the_rule(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(RetainRule("G.>", max_age=60.0))
    now = time.time()
    put(store, "G.X", ts=now - 30)  # 30 s old when written: kept ...
    put(store, "G.X", ts=now - 30)
    store.commit()
    assert seqs(all_rows(store)) == [1, 2]
    assert store.dropped == {}
    # ... until a later commit of the same rule, 45 s on, finds them 75 s old
    monkeypatch.setattr(time, "time", lambda: now + 45)
    put(store, "G.X")
    store.commit()
    monkeypatch.undo()
    assert seqs(all_rows(store)) == [3]
    assert store.dropped == {"max_age": 2}


def test_bounds_apply_per_rule(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("A.>", max_msgs=2), RetainRule("B.>"))
    for i in range(6):
        put(store, "A.X", b"a%d" % i)
        put(store, "B.X", b"b%d" % i)
    store.commit()
    rows = all_rows(store)
    # A: seq 1,3,5,7,9,11 -> keep 9, 11; B: 2,4,...,12 all kept
    assert seqs(rows) == [2, 4, 6, 8, 9, 10, 11, 12]
    assert [r[2] for r in rows if r[1] == "A.X"] == [b"a4", b"a5"]
    assert store.dropped == {"max_msgs": 4}


def test_several_bounds_on_one_rule_count_by_reason(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("C.>", max_msgs=4, max_bytes=25, max_age=60.0))
    now = time.time()
    put(store, "C.X", b"1234567", ts=now - 600)  # too old
    put(store, "C.X", b"1234567", ts=now - 600)  # too old
    for _ in range(6):
        put(store, "C.X", b"1234567", ts=now)  # 10 bytes each
    store.commit()
    # age drops 1-2; max_msgs keeps 4 of the 6 young ones (5..8); bytes keeps 2 (7, 8)
    assert seqs(all_rows(store)) == [7, 8]
    assert store.dropped == {"max_age": 2, "max_bytes": 2, "max_msgs": 2}


# -- which rule retains a topic ----------------------------------------------------------------


def test_retain_rule_picks_the_most_specific(open_store: StoreFactory) -> None:
    store = open_store(
        RetainRule(">"),
        RetainRule("A.>"),
        RetainRule("A.B.>"),
        RetainRule("A.B.C"),
        RetainRule("A.*"),
        RetainRule("*.Q.R"),
    )
    assert store.retain_rule("A.B.C") == "A.B.C"  # no wildcard beats any wildcard
    assert store.retain_rule("A.B.D") == "A.B.>"  # longer beats "A.>" and ">"
    assert store.retain_rule("A.B.C.D") == "A.B.>"
    assert store.retain_rule("A.X") == "A.*"  # "A.*" is narrower than "A.>"
    assert store.retain_rule("A.X.Y") == "A.>"
    assert store.retain_rule("A.Q.R") == "*.Q.R"  # same wildcard count, longer
    assert store.retain_rule("Z") == ">"
    assert store.retain_rule("Z.Q.R") == "*.Q.R"


def test_retain_rule_none_when_nothing_matches(open_store: StoreFactory) -> None:
    store = open_store(RetainRule("A.>"), RetainRule("B.*"))
    assert store.retain_rule("A") is None  # '>' needs at least one more segment
    assert store.retain_rule("B.X.Y") is None
    assert store.retain_rule("C.X") is None
    assert open_store(path=Path(str(store.path) + ".norules")).retain_rule("A.X") is None


def test_overlapping_rules_each_message_counts_against_the_winner_only(
    open_store: StoreFactory,
) -> None:
    store = open_store(
        RetainRule(">", max_msgs=1), RetainRule("A.>", max_msgs=2), RetainRule("A.B.>", max_msgs=3)
    )
    for i in range(5):
        put(store, "Z.1", b"z%d" % i)
        put(store, "A.X", b"x%d" % i)
        put(store, "A.B.Y", b"y%d" % i)
    store.commit()
    rows = all_rows(store)
    by_topic: dict[str, list[bytes]] = {}
    for r in rows:
        by_topic.setdefault(r[1], []).append(r[2])
    assert by_topic == {
        "Z.1": [b"z4"],
        "A.X": [b"x3", b"x4"],
        "A.B.Y": [b"y2", b"y3", b"y4"],
    }
    assert store.dropped == {"max_msgs": 4 + 3 + 2}
    assert len(rows) == 6


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


# -- [[retain]] configuration -----------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text, "utf-8")
    return path


def test_config_retain_tables_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[node]
fsync = true

[[retain]]
pattern = "TRADES.>"
max_msgs = 1000
max_bytes = 65536
max_age = 3600

[[retain]]
pattern = "AUDIT.*"
max_age = 1.5
""",
    )
    cfg = load_config(path)
    assert cfg.retain == (
        RetainRule("TRADES.>", max_msgs=1000, max_bytes=65536, max_age=3600.0),
        RetainRule("AUDIT.*", max_msgs=0, max_bytes=0, max_age=1.5),
    )
    assert isinstance(cfg.retain[0].max_age, float)
    assert cfg.fsync is True


def test_config_without_retain(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[node]\nport = 7300\n"))
    assert cfg.retain == ()
    assert cfg.fsync is False


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msg = 5\n',
            ("[[retain]] #1", "unknown key", "max_msg"),
            id="unknown-key",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\n\n[[retain]]\npattern = "B.>"\nlimit = 1\n',
            ("[[retain]] #2", "unknown key", "limit"),
            id="unknown-key-second-table",
        ),
        pytest.param(
            "[[retain]]\nmax_msgs = 5\n",
            ("[[retain]] #1", "missing key", "pattern"),
            id="missing-pattern",
        ),
        pytest.param(
            '[[retain]]\npattern = "A..B"\n',
            ("retain #1", "A..B", "empty segment"),
            id="bad-pattern-empty-segment",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>.B"\n',
            ("retain #1", "A.>.B"),
            id="bad-pattern-inner-gt",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.B*"\n',
            ("retain #1", "A.B*"),
            id="bad-pattern-glued-wildcard",
        ),
        pytest.param(
            "[[retain]]\npattern = 5\n",
            ("retain #1", "pattern must be a string"),
            id="pattern-not-a-string",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\n\n[[retain]]\npattern = "B.>"\n\n'
            '[[retain]]\npattern = "A.>"\n',
            ("retain #3", "'A.>'", "twice"),
            id="duplicate-pattern",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msgs = -1\n',
            ("retain #1", "max_msgs", "-1", "out of range"),
            id="negative-max-msgs",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_bytes = -100\n',
            ("retain #1", "max_bytes", "-100", "out of range"),
            id="negative-max-bytes",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_age = -0.5\n',
            ("retain #1", "max_age", "-0.5", "out of range"),
            id="negative-max-age",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msgs = 1.5\n',
            ("retain #1", "max_msgs", "not an integer"),
            id="float-max-msgs",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_bytes = "10k"\n',
            ("retain #1", "max_bytes", "not an integer"),
            id="string-max-bytes",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_age = "1h"\n',
            ("retain #1", "max_age", "not a number"),
            id="string-max-age",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msgs = true\n',
            ("retain #1", "max_msgs", "not an integer"),
            id="bool-max-msgs",
        ),
        pytest.param(
            'retain = "A.>"\n',
            ("[[retain]] tables",),
            id="retain-not-tables",
        ),
        pytest.param(
            'retain = ["A.>"]\n',
            ("[[retain]] #1", "not a table"),
            id="retain-list-of-strings",
        ),
        pytest.param(
            '[node]\nfsync = "yes"\n',
            ("node.fsync",),
            id="fsync-not-bool",
        ),
    ],
)
def test_config_retain_errors_name_file_and_key(
    tmp_path: Path, text: str, needles: tuple[str, ...]
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    for needle in needles:
        assert needle in message, (needle, message)


@pytest.mark.parametrize(
    ("rules", "needles"),
    [
        ((RetainRule("A..B"),), ("keyword: retain #1", "A..B")),
        ((RetainRule("A.>"), RetainRule("A.>")), ("keyword: retain #2", "twice")),
        ((RetainRule("A.>", max_msgs=-1),), ("keyword: retain #1", "max_msgs")),
        ((RetainRule("A.>", max_bytes=-1),), ("keyword: retain #1", "max_bytes")),
        ((RetainRule("A.>", max_age=-1.0),), ("keyword: retain #1", "max_age")),
        (("A.>",), ("keyword: retain #1", "not a RetainRule")),
    ],
    ids=["bad-pattern", "duplicate", "neg-msgs", "neg-bytes", "neg-age", "not-a-rule"],
)
def test_keyword_retain_errors(rules: tuple[Any, ...], needles: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(retain=rules)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_replace_names_its_source_for_retain_errors() -> None:
    cfg = NodeConfig(retain=(RetainRule("A.>"),))
    with pytest.raises(ConfigError, match=r"^command line: retain #1: .*A\.\.B"):
        cfg.replace(source="command line", retain=(RetainRule("A..B"),))
    assert cfg.replace(fsync=True).fsync is True
    with pytest.raises(ConfigError, match=r"node\.fsync"):
        NodeConfig(fsync=1)  # type: ignore[arg-type]


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
