"""Unit tests of zbroker.store.Store (the retention log) on a real SQLite file: sequence
numbering, commit batching, the bounds (``max_msgs``, ``max_bytes``, ``max_age``) and which
rule retains a topic. Reading, reopening and stats: :mod:`test_store_reads`; the
``[[retain]]`` rules' validation: :mod:`test_store_config`; what they share:
:mod:`tests.stores`.

Every count is exact: sequences, rows kept, rows dropped and the reason they were dropped.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
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
