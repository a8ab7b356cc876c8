"""Unit tests for zbroker.routing.dedupe.DedupeWindow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.routing.dedupe import FIRST_SLACK, DedupeWindow


def _floor(w: DedupeWindow, origin: str, incarnation: int) -> int:
    return w._origins[(origin, incarnation)].floor


def _above(w: DedupeWindow, origin: str, incarnation: int) -> set[int]:
    return set(w._origins[(origin, incarnation)].above)


def test_first_message_is_new_and_sets_the_floor() -> None:
    w = DedupeWindow()
    assert len(w) == 0
    assert w.seen("A", 1, 10) is False
    assert len(w) == 1
    assert _floor(w, "A", 1) == 10
    assert _above(w, "A", 1) == set()
    # a seq just below the first arrived late by another way (a hosted branch): taken
    # once; further below, it predates our interest and counts as seen
    assert w.seen("A", 1, 9) is False
    assert w.seen("A", 1, 9) is True
    assert w.seen("A", 1, 10) is True
    w2 = DedupeWindow()
    assert w2.seen("B", 1, 10_000) is False
    assert w2.seen("B", 1, 10_000 - FIRST_SLACK - 1) is True
    assert w2.seen("B", 1, 10_000 - FIRST_SLACK) is False
    assert w.duplicates + w2.duplicates == 3


def test_in_order_only_moves_the_floor() -> None:
    w = DedupeWindow(window=4)
    results = [w.seen("A", 1, s) for s in range(1, 101)]
    assert results == [False] * 100
    assert _floor(w, "A", 1) == 100
    assert _above(w, "A", 1) == set()
    assert w.duplicates == 0


def test_duplicates_are_reported_and_counted() -> None:
    w = DedupeWindow()
    assert [w.seen("A", 1, s) for s in (1, 2, 2, 3, 1, 3)] == [
        False,
        False,
        True,
        False,
        True,
        True,
    ]
    assert w.duplicates == 3
    assert _floor(w, "A", 1) == 3


def test_out_of_order_waits_above_the_floor_then_fills() -> None:
    w = DedupeWindow()
    assert w.seen("A", 1, 1) is False
    assert w.seen("A", 1, 4) is False
    assert w.seen("A", 1, 3) is False
    assert _floor(w, "A", 1) == 1
    assert _above(w, "A", 1) == {3, 4}
    assert w.seen("A", 1, 4) is True  # duplicate above the floor
    assert w.seen("A", 1, 2) is False  # fills the gap: floor jumps over 3 and 4
    assert _floor(w, "A", 1) == 4
    assert _above(w, "A", 1) == set()
    assert w.seen("A", 1, 3) is True
    assert w.seen("A", 1, 5) is False
    assert _floor(w, "A", 1) == 5
    assert w.duplicates == 2


def test_window_overflow_declares_the_gap_lost() -> None:
    w = DedupeWindow(window=3)
    assert w.seen("A", 1, 0) is False
    for s in (2, 3, 4):
        assert w.seen("A", 1, s) is False
    # three pending is exactly the window: nothing lost yet
    assert _floor(w, "A", 1) == 0
    assert _above(w, "A", 1) == {2, 3, 4}
    # a fourth pending overflows: seq 1 is declared lost, the floor runs up to 4
    assert w.seen("A", 1, 6) is False
    assert _floor(w, "A", 1) == 4
    assert _above(w, "A", 1) == {6}
    # the lost seq (and everything at or below the floor) now counts as a duplicate
    assert w.seen("A", 1, 1) is True
    assert w.seen("A", 1, 3) is True
    assert w.duplicates == 2
    # the remaining gap still fills normally
    assert w.seen("A", 1, 5) is False
    assert _floor(w, "A", 1) == 6
    assert _above(w, "A", 1) == set()
    assert w.seen("A", 1, 6) is True
    assert w.duplicates == 3


def test_window_overflow_jumps_only_to_the_oldest_pending() -> None:
    w = DedupeWindow(window=2)
    w.seen("A", 1, 0)
    w.seen("A", 1, 5)
    w.seen("A", 1, 10)
    assert w.seen("A", 1, 20) is False  # overflow: 1..4 lost, floor = 5
    assert _floor(w, "A", 1) == 5
    assert _above(w, "A", 1) == {10, 20}
    assert w.seen("A", 1, 4) is True
    assert w.seen("A", 1, 6) is False  # not lost: above the new floor
    assert _floor(w, "A", 1) == 6


def test_new_incarnation_is_a_fresh_stream() -> None:
    w = DedupeWindow()
    for s in range(1, 6):
        assert w.seen("A", 1, s) is False
    # the restarted origin counts from 1 again: not a duplicate
    assert w.seen("A", 2, 1) is False
    assert w.seen("A", 2, 2) is False
    assert w.seen("A", 2, 1) is True
    assert len(w) == 2
    # the old incarnation's state is untouched
    assert w.seen("A", 1, 5) is True
    assert w.seen("A", 1, 6) is False
    assert w.duplicates == 2


def test_origins_are_independent() -> None:
    w = DedupeWindow()
    assert w.seen("A", 1, 1) is False
    assert w.seen("B", 1, 1) is False
    assert w.seen("B", 1, 1) is True
    assert w.seen("A", 1, 2) is False
    assert len(w) == 2


def test_max_origins_forgets_the_oldest_registered() -> None:
    w = DedupeWindow(max_origins=2)
    assert w.seen("A", 1, 1) is False
    assert w.seen("B", 1, 1) is False
    assert len(w) == 2
    assert w.seen("A", 1, 2) is False  # activity does not refresh registration order
    assert w.seen("C", 1, 1) is False  # evicts A, the oldest registered
    assert len(w) == 2
    assert ("A", 1) not in w._origins
    assert set(w._origins) == {("B", 1), ("C", 1)}
    # A is a stranger again: its next message (even an old seq) is fresh
    assert w.seen("A", 1, 1) is False  # evicts B
    assert set(w._origins) == {("C", 1), ("A", 1)}
    assert w.seen("C", 1, 1) is True
    assert len(w) == 2


def test_forget_drops_every_incarnation_of_one_origin() -> None:
    w = DedupeWindow()
    w.seen("A", 1, 1)
    w.seen("A", 2, 1)
    w.seen("B", 1, 1)
    assert len(w) == 3
    w.forget("A")
    assert len(w) == 1
    assert set(w._origins) == {("B", 1)}
    assert w.seen("A", 1, 1) is False
    assert w.seen("A", 2, 1) is False
    assert w.seen("B", 1, 1) is True
    w.forget("nobody")  # no-op
    assert len(w) == 3


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(min_value=1, max_value=16),
    base=st.integers(min_value=0, max_value=1_000),
    data=st.data(),
)
def test_property_seen_is_true_exactly_for_repeats(
    window: int, base: int, data: st.DataObject
) -> None:
    # the first seq registers the origin; every later seq stays within the window above it,
    # so no gap is ever declared lost and the answer depends on repetition alone
    seqs = data.draw(
        st.lists(st.integers(min_value=base + 1, max_value=base + window), max_size=60)
    )
    w = DedupeWindow(window=window)
    assert w.seen("O", 1, base) is False
    seen_before: set[int] = {base}
    repeats = 0
    for s in seqs:
        expected = s in seen_before
        assert w.seen("O", 1, s) is expected
        repeats += expected
        seen_before.add(s)
    assert w.duplicates == repeats
    # the state is exactly "floor + pending": every seq at or below the floor was seen
    floor = _floor(w, "O", 1)
    assert set(range(base, floor + 1)) <= seen_before
    assert _above(w, "O", 1) == {s for s in seen_before if s > floor}
    assert floor + 1 not in seen_before


@given(st.lists(st.integers(min_value=1, max_value=60), max_size=300))
@settings(max_examples=300, deadline=None)
def test_the_in_order_fast_path_answers_as_seen_does(seqs: list[int]) -> None:
    """The relay's inline path (:meth:`DedupeWindow.state`): a seq one above the floor
    with nothing pending above is new, and taking it is moving the floor; two windows
    fed the same seqs, one by that path where it applies, agree on every answer and end
    in the same state."""
    plain = DedupeWindow(window=8)
    fast = DedupeWindow(window=8)
    inline = 0
    for seq in seqs:
        state = fast.state("A", 1)
        if state is not None and seq - 1 == state.floor and not state.above:
            state.floor = seq
            answer = False
            inline += 1
        else:
            answer = fast.seen("A", 1, seq)
        assert plain.seen("A", 1, seq) is answer
        assert (_floor(fast, "A", 1), _above(fast, "A", 1)) == (
            _floor(plain, "A", 1),
            _above(plain, "A", 1),
        )
    assert fast.duplicates == plain.duplicates
    assert fast.state("B", 1) is None
