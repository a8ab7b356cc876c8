"""The store's record of idempotent producers (``zbroker.store.producers``): exact within
the window, FORGOTTEN below it, bounded in producers, kept across a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from zbroker import wire
from zbroker.errors import ProtocolError
from zbroker.store import Store
from zbroker.store import producers as mod
from zbroker.store.producers import FORGOTTEN, PRODUCER_WINDOW


def taken(seq: int) -> tuple[str, int, int, int | None]:
    return ("N", 1, seq, None)


def test_exact_within_the_window_and_kept_across_a_reopen(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    p = store.producers
    assert p.check(5, 1) is None
    p.record(5, 1, ("N", 1, 10, 3), 1.0)
    assert p.check(5, 1) == ("N", 1, 10, 3)  # queued in this pass
    p.record(5, 3, taken(11), 1.0)
    store.commit()
    assert p.check(5, 1) == ("N", 1, 10, 3)
    assert p.check(5, 2) is None  # never taken (a gap: another node took it)
    assert p.check(5, 4) is None
    store.close()
    again = Store(tmp_path / "s.sqlite3").producers
    assert again.check(5, 1) == ("N", 1, 10, 3) and again.check(5, 3) == taken(11)
    assert again.check(5, 2) is None and len(again) == 1


def test_older_than_the_window_is_forgotten_and_pruned(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    p = store.producers
    for s in range(1, 2 * PRODUCER_WINDOW + 1):
        p.record(9, s, taken(s), 1.0)
        if s % 100 == 0:
            store.commit()
    store.commit()
    top = 2 * PRODUCER_WINDOW
    assert p.check(9, top - PRODUCER_WINDOW) is FORGOTTEN
    assert p.check(9, top - PRODUCER_WINDOW + 1) == taken(top - PRODUCER_WINDOW + 1)
    # rows are runs (here one per commit, of 100): the sequences they cover are counted
    (kept,) = store.db.execute("SELECT SUM(last - pseq + 1) FROM producers").fetchone()
    assert PRODUCER_WINDOW <= kept <= PRODUCER_WINDOW + 256 + 100


def test_producers_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mod, "MAX_PRODUCERS", 3)
    store = Store(tmp_path / "s.sqlite3")
    p = store.producers
    for producer in (1, 2, 3):
        p.record(producer, 1, taken(producer), 1.0)
    p.record(1, 2, taken(4), 1.0)  # 1 heard of again: 2 is now the least recent
    p.record(4, 1, taken(5), 1.0)
    store.commit()
    assert len(p) == 3 and p.check(2, 1) is None  # forgotten whole
    assert p.check(1, 1) == taken(1) and p.check(3, 1) == taken(3)
    assert store.db.execute("SELECT COUNT(*) FROM producers WHERE producer=2").fetchone() == (0,)


@pytest.mark.parametrize(
    "value", [[1], [0, 1], [1, 0], [1 << 63, 1], ["1", 1], [1, 2.0], (1, 2), None]
)
def test_bad_producer_fields_are_refused(value: object) -> None:
    with pytest.raises(ProtocolError):
        wire.check_producer(value)


def test_pmsgs_entry_may_carry_a_producer() -> None:
    entry = [1, "T.X", b"p", 0, None, "A", 1, 1, 1.0, ["A"], None, 1]
    assert wire.check_pmsgs_entry(entry) == 1
    assert wire.check_pmsgs_entry([*entry, [7, 3]]) == 1
    with pytest.raises(ProtocolError):
        wire.check_pmsgs_entry([*entry, [7, 0]])
    with pytest.raises(ProtocolError):
        wire.check_pmsgs_entry([*entry, [7, 3], 1])


def test_a_stream_of_publishes_is_stored_as_runs(tmp_path: Path) -> None:
    """Consecutive pseqs taken as consecutive seqs (and retention seqs) share one row;
    a gap, another producer or another seq step starts a new one; every pseq is exact."""
    store = Store(tmp_path / "s.sqlite3")
    p = store.producers
    for s in range(1, 6):
        p.record(7, s, ("N", 1, 100 + s, 10 + s), 1.0)  # 1..5: one run
        p.record(8, s, ("N", 1, 200 + 2 * s, None), 1.0)  # seqs step by 2: a row each
    p.record(7, 7, ("N", 1, 107, 17), 1.0)  # a gap in pseq: a new run
    p.record(7, 8, ("N", 1, 109, 18), 1.0)  # seq jumps: a new run
    p.record(7, 9, ("N", 1, 110, None), 1.0)  # no retention seq: a new run
    p.record(7, 10, ("N", 1, 111, None), 1.0)
    assert p.check(7, 3) == ("N", 1, 103, 13) and p.check(7, 6) is None  # in the pass
    store.commit()
    rows = store.db.execute("SELECT producer, COUNT(*) FROM producers GROUP BY producer")
    assert dict(rows.fetchall()) == {7: 4, 8: 5}
    store.close()
    p = Store(tmp_path / "s.sqlite3").producers
    assert [p.check(7, s) for s in range(1, 11)] == [
        *[("N", 1, 100 + s, 10 + s) for s in range(1, 6)],
        None,
        ("N", 1, 107, 17),
        ("N", 1, 109, 18),
        ("N", 1, 110, None),
        ("N", 1, 111, None),
    ]
    assert [p.check(8, s) for s in range(1, 6)] == [
        ("N", 1, 200 + 2 * s, None) for s in range(1, 6)
    ]


def test_a_copy_older_than_the_window_keeps_the_run_it_starts(tmp_path: Path) -> None:
    # a run taken in one pass reaches into the window; a copy of its first pair, older
    # than the window, comes from a link (a backlog) and is taken and recorded: the run's
    # pairs inside the window must stay known, or their retries are stored again
    store = Store(tmp_path / "s.db")
    p = store.producers
    for pseq in range(1, 11):
        p.record(5, pseq, taken(pseq), 1.0)
    store.commit()
    top = 10 + PRODUCER_WINDOW + 50
    for pseq in range(11, top + 1):  # one pass: one run
        p.record(5, pseq, taken(pseq), 2.0)
    store.commit()
    assert p.check(5, 11) is FORGOTTEN
    p.record(5, 11, ("B", 9, 1, None), 3.0)  # the late copy, taken
    store.commit()
    assert p.check(5, top - 10) == taken(top - 10)
    assert p.check(5, 61) == taken(61)  # (the oldest pair inside the window)
    store.close()
    again = Store(tmp_path / "s.db")
    assert again.producers.check(5, top - 10) == taken(top - 10)
    again.close()
