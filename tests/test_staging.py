"""Unit tests of zbroker.staging.Staging (sans-IO): rows are held per token until a commit
takes them (all or none) or an abort / expiry drops them, and the counters say exactly how
many rows went which way. A hypothesis property drives random interleavings of chunks,
commits and aborts and checks that exactly the committed tokens' rows come out, once.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.features.staging import Staging, StagingError


def rows(n: int, topic: str = "T.A", start: int = 0) -> list[list[Any]]:
    return [[topic, f"p{start + i}".encode(), 0, None] for i in range(n)]


def test_stage_then_take_returns_rows_in_order_once() -> None:
    s = Staging()
    assert s.stage("t1", 0, rows(3)) == 3
    assert s.stage("t1", 1, rows(2, start=3)) == 5
    names, out = s.take([["t1", 5]])
    assert names == ["t1"]
    assert [r[1] for r in out] == [f"p{i}".encode() for i in range(5)]
    assert s.stats() == {
        "tokens": 0,
        "rows": 0,
        "bytes": 0,
        "commits": 1,
        "duplicate_commits": 0,
        "applied_rows": 5,
        "aborted_rows": 0,
        "expired_rows": 0,
    }
    with pytest.raises(StagingError, match="not staged here"):
        s.take([["t1", 5]])  # taken already: a second commit cannot apply it again
    assert s.was_applied(["t1"])


def test_a_chunk_sent_twice_is_held_once_and_gaps_are_refused() -> None:
    s = Staging()
    s.stage("t", 0, rows(2))
    assert s.stage("t", 0, rows(2)) == 2  # the writer retried chunk 0
    with pytest.raises(StagingError, match="chunk 2 arrived before 1"):
        s.stage("t", 2, rows(1))
    with pytest.raises(StagingError, match="unknown here"):
        s.stage("other", 1, rows(1))  # chunk 1 of a token this node never saw


def test_commit_is_all_or_nothing() -> None:
    s = Staging()
    s.stage("a", 0, rows(2))
    s.stage("b", 0, rows(3))
    with pytest.raises(StagingError, match="holds 3 rows, the writer sent 4"):
        s.take([["a", 2], ["b", 4]])
    with pytest.raises(StagingError, match="'c' is not staged"):
        s.take([["a", 2], ["c", 1]])
    with pytest.raises(StagingError, match="appears twice"):
        s.take([["a", 2], ["a", 2]])
    assert s.stats()["rows"] == 5  # nothing was taken by the refused commits
    _, out = s.take([["a", 2], ["b", 3]])
    assert len(out) == 5


def test_abort_and_expiry_drop_and_count() -> None:
    s = Staging(ttl=10.0)
    s.stage("a", 0, rows(2), now=100.0)
    s.stage("b", 0, rows(4), now=105.0)
    assert s.discard(["a", "never-staged"]) == 2
    assert s.expire(now=114.0) == 0
    assert s.expire(now=115.5) == 4
    st_ = s.stats()
    assert (st_["aborted_rows"], st_["expired_rows"], st_["tokens"], st_["bytes"]) == (2, 4, 0, 0)


def test_bad_rows_and_limits_are_refused_with_reasons() -> None:
    s = Staging(max_bytes=100)
    with pytest.raises(StagingError, match="cannot contain wildcard"):
        s.stage("t", 0, [["T.*", b"x", 0, None]])
    with pytest.raises(StagingError, match="bytes payload"):
        s.stage("t", 0, [["T.A", "text", 0, None]])
    with pytest.raises(StagingError, match="unknown payload format"):
        s.stage("t", 0, [["T.A", b"x", 7, None]])
    with pytest.raises(StagingError, match="string keys"):
        s.stage("t", 0, [["T.A", b"x", 0, {1: "v"}]])
    with pytest.raises(StagingError, match="token must be"):
        s.stage("", 0, rows(1))
    with pytest.raises(StagingError, match="staging is full"):
        s.stage("t", 0, [["T.A", b"x" * 200, 0, None]])
    assert s.stats()["tokens"] == 0  # a refused first chunk leaves no empty token behind


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["stage", "commit", "abort"]),
            st.integers(0, 4),  # token
            st.integers(0, 3),  # rows in a chunk
        ),
        max_size=40,
    )
)
def test_exactly_the_committed_rows_come_out_once(ops: list[tuple[str, int, int]]) -> None:
    s = Staging()
    sent: dict[str, list[bytes]] = {}  # what each live token holds, as the writer knows it
    parts: dict[str, int] = {}
    applied: list[bytes] = []
    expected: list[bytes] = []
    counter = 0
    for op, t, n in ops:
        token = f"t{t}"
        if op == "stage":
            if s.was_applied([token]):
                with pytest.raises(StagingError):
                    s.stage(token, 0, rows(n))
                continue
            chunk = rows(n, start=counter)
            counter += n
            s.stage(token, parts.get(token, 0), chunk)
            parts[token] = parts.get(token, 0) + 1
            sent.setdefault(token, []).extend(r[1] for r in chunk)
        elif op == "commit":
            if token not in sent:
                with pytest.raises(StagingError):
                    s.take([[token, 0]])
                continue
            _, out = s.take([[token, len(sent[token])]])
            applied.extend(r[1] for r in out)
            expected.extend(sent.pop(token))
            parts.pop(token)
        else:
            dropped = s.discard([token])
            assert dropped == len(sent.pop(token, []))
            parts.pop(token, None)
    assert applied == expected
    assert len(set(applied)) == len(applied)
    assert s.stats()["rows"] == sum(len(v) for v in sent.values())
