"""Unit tests for zbroker.sublist.Sublist, each run with the match cache on and off:
insert and remove with their reference counts, wildcard matching, and the pruning of
branches left empty. The match cache: ``tests/test_sublist_cache.py``; random patterns
against ``topics.match``: ``tests/test_sublist_properties.py``."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.sublists import MakeSublist, assert_empty_trie
from tests.sublists import cached as cached  # (a fixture)
from tests.sublists import make as make  # (a fixture)
from zbroker import topics
from zbroker.const import MATCH_CACHE_SIZE
from zbroker.sublist import Sublist

# ---------------------------------------------------------------------------------------
# insert / remove / reference counts
# ---------------------------------------------------------------------------------------


def test_new_sublist_is_empty(make: MakeSublist) -> None:
    sl = make()
    assert_empty_trie(sl)
    assert sl.match("A") == frozenset()
    assert sl.match("A.B.C") == frozenset()


def test_cache_size_setting(make: MakeSublist, cached: bool) -> None:
    assert make()._cache_size == (MATCH_CACHE_SIZE if cached else 0)


@pytest.mark.parametrize("pattern", ["A", "A.B", "*", ">", "A.*", "A.>", "*.B.>", "$ZB.>"])
def test_insert_then_remove_single(make: MakeSublist, pattern: str) -> None:
    sl = make()
    assert sl.insert(pattern, "x") is True
    assert len(sl) == 1
    assert list(sl.patterns()) == [(pattern, "x")]
    assert sl.remove(pattern, "x") is True
    assert_empty_trie(sl)


def test_refcount_insert_twice_needs_two_removals(make: MakeSublist) -> None:
    sl = make()
    assert sl.insert("A.*", "x") is True
    assert sl.insert("A.*", "x") is False  # not new: refcount 2
    assert len(sl) == 2
    assert list(sl.patterns()) == [("A.*", "x")]  # listed once
    assert sl.match("A.B") == frozenset({"x"})

    assert sl.remove("A.*", "x") is False  # one reference left
    assert len(sl) == 1
    assert sl.match("A.B") == frozenset({"x"})
    assert list(sl.patterns()) == [("A.*", "x")]

    assert sl.remove("A.*", "x") is True  # that was the last one
    assert len(sl) == 0
    assert sl.match("A.B") == frozenset()
    assert_empty_trie(sl)

    assert sl.remove("A.*", "x") is False  # absent: no-op
    assert len(sl) == 0


def test_refcount_three_times(make: MakeSublist) -> None:
    sl = make()
    assert [sl.insert(">", "x") for _ in range(3)] == [True, False, False]
    assert [sl.remove(">", "x") for _ in range(4)] == [False, False, True, False]
    assert_empty_trie(sl)


def test_refcounts_are_per_pattern_and_per_item(make: MakeSublist) -> None:
    sl = make()
    assert sl.insert("A.B", "x") is True
    assert sl.insert("A.B", "y") is True  # same pattern, other item: new
    assert sl.insert("A.*", "x") is True  # same item, other pattern: new
    assert len(sl) == 3
    assert sl.match("A.B") == frozenset({"x", "y"})
    assert sl.remove("A.B", "x") is True
    assert sl.match("A.B") == frozenset({"x", "y"})  # x still there through A.*
    assert sl.remove("A.*", "x") is True
    assert sl.match("A.B") == frozenset({"y"})
    assert sorted(sl.patterns()) == [("A.B", "y")]
    assert len(sl) == 1


@pytest.mark.parametrize(
    ("pattern", "item"),
    [
        ("A.B", "y"),  # right pattern, wrong item
        ("A", "x"),  # a prefix of the stored pattern (an inner level with no items)
        ("A.B.C", "x"),  # deeper than anything stored
        ("Z.B", "x"),  # first segment absent
        ("A.*", "x"),  # '*' where a literal is stored
        ("*.B", "x"),
        ("A.>", "x"),  # '>' where a literal is stored
        (">", "x"),
        ("A.B.>", "x"),
    ],
)
def test_remove_absent_is_a_noop(make: MakeSublist, pattern: str, item: str) -> None:
    sl = make()
    sl.insert("A.B", "x")
    assert sl.match("A.B") == frozenset({"x"})
    assert sl.remove(pattern, item) is False
    assert len(sl) == 1
    assert list(sl.patterns()) == [("A.B", "x")]
    assert sl.match("A.B") == frozenset({"x"})


def test_star_and_gt_and_literal_are_distinct_slots(make: MakeSublist) -> None:
    sl = make()
    sl.insert("A.*", "star")
    sl.insert("A.>", "gt")
    sl.insert("A.B", "lit")
    assert sl.remove("A.>", "star") is False
    assert sl.remove("A.*", "gt") is False
    assert sl.remove("A.B", "star") is False
    assert sl.match("A.B") == frozenset({"star", "gt", "lit"})
    assert sl.match("A.C") == frozenset({"star", "gt"})
    assert sl.match("A.B.C") == frozenset({"gt"})
    assert sl.match("A") == frozenset()


# ---------------------------------------------------------------------------------------
# match
# ---------------------------------------------------------------------------------------

PATTERNS = [
    "A",
    "A.B",
    "A.B.C",
    "A.*",
    "A.*.C",
    "A.>",
    "A.B.>",
    "*",
    "*.B",
    "*.*",
    "*.>",
    ">",
    "B.>",
    "$ZB.>",
]


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("A", {"A", "*", ">"}),
        ("B", {"*", ">"}),
        ("A.B", {"A.B", "A.*", "A.>", "*.B", "*.*", "*.>", ">"}),
        ("A.C", {"A.*", "A.>", "*.*", "*.>", ">"}),
        ("C.B", {"*.B", "*.*", "*.>", ">"}),
        ("B.C", {"*.*", "*.>", ">", "B.>"}),
        ("A.B.C", {"A.B.C", "A.*.C", "A.>", "A.B.>", "*.>", ">"}),
        ("A.X.C", {"A.*.C", "A.>", "*.>", ">"}),
        ("A.B.D", {"A.>", "A.B.>", "*.>", ">"}),
        ("A.B.C.D", {"A.>", "A.B.>", "*.>", ">"}),
        # reserved topics: only patterns that name them (no leading wildcard)
        ("$ZB", set()),
        ("$ZB.STATUS", {"$ZB.>"}),
        ("Z.Y.X.W", {"*.>", ">"}),
    ],
)
def test_match_table(make: MakeSublist, topic: str, expected: set[str]) -> None:
    sl = make()
    for p in PATTERNS:
        sl.insert(p, p)  # the item is its own pattern
    # cross-check the table itself against topics.match
    assert expected == {p for p in PATTERNS if topics.match(p, topic)}
    for _ in range(2):  # the second call is served from the cache when there is one
        result = sl.match(topic)
        assert isinstance(result, frozenset)
        assert result == frozenset(expected)


def test_match_returns_each_item_once(make: MakeSublist) -> None:
    sl = make()
    for p in ["A.B", "A.*", "*.B", "*.*", "A.>", "*.>", ">"]:
        sl.insert(p, "x")
        sl.insert(p, "x")  # refcount 2 as well
    sl.insert("A.>", "y")
    result = sl.match("A.B")
    assert result == frozenset({"x", "y"})
    assert len(result) == 2
    assert sorted(result) == ["x", "y"]


def test_items_may_be_any_hashable(cached: bool) -> None:
    sl: Sublist[tuple[str, int]] = Sublist() if cached else Sublist(cache_size=0)
    sl.insert("A.*", ("client", 1))
    sl.insert("A.>", ("client", 2))
    sl.insert("A.B", ("client", 1))
    assert sl.match("A.B") == frozenset({("client", 1), ("client", 2)})
    assert sorted(sl.patterns()) == [
        ("A.*", ("client", 1)),
        ("A.>", ("client", 2)),
        ("A.B", ("client", 1)),
    ]


def test_patterns_lists_every_pair_once(make: MakeSublist) -> None:
    sl = make()
    pairs = [("A", "1"), ("A.B", "1"), ("A.B", "2"), ("A.*", "1"), ("A.>", "3"), (">", "4")]
    pairs += [("*.*.>", "5"), ("*", "6"), ("A.B.C.D", "7")]
    for p, i in pairs:
        sl.insert(p, i)
    sl.insert("A.B", "2")  # refcount does not duplicate
    assert sorted(sl.patterns()) == sorted(pairs)
    assert len(sl) == len(pairs) + 1


# ---------------------------------------------------------------------------------------
# pruning
# ---------------------------------------------------------------------------------------


def test_removing_everything_prunes_the_trie(make: MakeSublist) -> None:
    sl = make()
    inserted: Counter[tuple[str, str]] = Counter()
    for n, p in enumerate(PATTERNS):
        for item in ("x", f"i{n}"):
            sl.insert(p, item)
            inserted[(p, item)] += 1
    sl.insert("A.*.C", "x")
    inserted[("A.*.C", "x")] += 1
    sl.match("A.B.C")
    assert len(sl) == sum(inserted.values())
    for (p, item), n in inserted.items():
        for _ in range(n):
            sl.remove(p, item)
    assert_empty_trie(sl)
    assert sl.match("A.B.C") == frozenset()


def test_partial_removal_prunes_only_the_dead_branch(make: MakeSublist) -> None:
    sl = make()
    sl.insert("A.B.C", "x")
    sl.insert("A.D", "y")
    sl.insert("A.*.E", "z")
    sl.insert("F.>", "w")
    a = sl._root.literal["A"]
    assert set(a.literal) == {"B", "D"}
    assert a.star is not None

    assert sl.remove("A.B.C", "x") is True
    assert set(a.literal) == {"D"}  # B (and its child C) pruned
    assert sl.remove("A.*.E", "z") is True
    assert a.star is None
    assert set(sl._root.literal) == {"A", "F"}
    assert sl.remove("F.>", "w") is True
    assert set(sl._root.literal) == {"A"}
    assert sl.remove("A.D", "y") is True
    assert_empty_trie(sl)


def test_inner_level_with_items_is_not_pruned(make: MakeSublist) -> None:
    sl = make()
    sl.insert("A", "x")
    sl.insert("A.B", "y")
    sl.insert("A.>", "z")
    assert sl.remove("A.B", "y") is True
    a = sl._root.literal["A"]
    assert a.literal == {}
    assert a.items == {"x": 1}
    assert a.gt == {"z": 1}
    assert sl.remove("A", "x") is True
    assert sl._root.literal["A"] is a  # still holds A.>
    assert sl.remove("A.>", "z") is True
    assert_empty_trie(sl)
