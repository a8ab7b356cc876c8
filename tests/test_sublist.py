"""Unit tests for zbroker.sublist.Sublist, each run with the match cache on and off."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
)

from zbroker import topics
from zbroker.const import MATCH_CACHE_SIZE
from zbroker.sublist import Sublist, TopicIndex

MakeSublist = Callable[[], Sublist[str]]


@pytest.fixture(params=[True, False], ids=["cache", "nocache"])
def cached(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def make(cached: bool) -> MakeSublist:
    def factory() -> Sublist[str]:
        return Sublist() if cached else Sublist(cache_size=0)

    return factory


def _assert_empty_trie(sl: Sublist[str]) -> None:
    root = sl._root
    assert root.literal == {}
    assert root.star is None
    assert root.gt == {}
    assert root.items == {}
    assert root.empty()
    assert list(sl.patterns()) == []
    assert len(sl) == 0


# ---------------------------------------------------------------------------------------
# insert / remove / reference counts
# ---------------------------------------------------------------------------------------


def test_new_sublist_is_empty(make: MakeSublist) -> None:
    sl = make()
    _assert_empty_trie(sl)
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
    _assert_empty_trie(sl)


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
    _assert_empty_trie(sl)

    assert sl.remove("A.*", "x") is False  # absent: no-op
    assert len(sl) == 0


def test_refcount_three_times(make: MakeSublist) -> None:
    sl = make()
    assert [sl.insert(">", "x") for _ in range(3)] == [True, False, False]
    assert [sl.remove(">", "x") for _ in range(4)] == [False, False, True, False]
    _assert_empty_trie(sl)


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
    _assert_empty_trie(sl)
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
    _assert_empty_trie(sl)


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
    _assert_empty_trie(sl)


# ---------------------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------------------


def test_cached_result_follows_insert_and_remove(make: MakeSublist) -> None:
    sl = make()
    assert sl.match("A.B") == frozenset()
    sl.insert("A.*", "x")
    assert sl.match("A.B") == frozenset({"x"})
    sl.insert("A.>", "y")
    assert sl.match("A.B") == frozenset({"x", "y"})
    sl.insert("A.B", "z")
    assert sl.match("A.B") == frozenset({"x", "y", "z"})
    sl.remove("A.*", "x")
    assert sl.match("A.B") == frozenset({"y", "z"})
    sl.insert("A.>", "y")
    sl.remove("A.>", "y")  # refcount drop, still present
    assert sl.match("A.B") == frozenset({"y", "z"})
    sl.remove("A.>", "y")
    assert sl.match("A.B") == frozenset({"z"})
    sl.remove("A.B", "z")
    assert sl.match("A.B") == frozenset()


def test_selective_eviction_keeps_unrelated_topics(make: MakeSublist, cached: bool) -> None:
    sl = make()
    sl.insert("A.B", "x")
    sl.insert("C.D", "y")
    assert sl.match("A.B") == frozenset({"x"})
    assert sl.match("C.D") == frozenset({"y"})
    assert sl.match("E") == frozenset()
    assert (sl.cache_hits, sl.cache_misses) == (0, 3)
    assert sl.match("A.B") == frozenset({"x"})
    assert sl.match("C.D") == frozenset({"y"})
    assert (sl.cache_hits, sl.cache_misses) == ((2, 3) if cached else (0, 5))

    # a new pattern matching A.B only evicts A.B
    sl.insert("A.>", "z")
    if cached:
        assert set(sl._cache) == {"C.D", "E"}
    assert sl.match("C.D") == frozenset({"y"})
    assert sl.match("E") == frozenset()
    assert (sl.cache_hits, sl.cache_misses) == ((4, 3) if cached else (0, 7))
    assert sl.match("A.B") == frozenset({"x", "z"})  # recomputed, not stale
    assert (sl.cache_hits, sl.cache_misses) == ((4, 4) if cached else (0, 8))

    # removing a pattern evicts only the topics it matches
    sl.remove("C.D", "y")
    if cached:
        assert set(sl._cache) == {"A.B", "E"}
    assert sl.match("A.B") == frozenset({"x", "z"})
    assert sl.match("C.D") == frozenset()
    assert (sl.cache_hits, sl.cache_misses) == ((5, 5) if cached else (0, 10))

    # a wildcard evicts every topic it matches and nothing else
    sl.insert("*", "w")
    if cached:
        assert set(sl._cache) == {"A.B", "C.D"}
    assert sl.match("E") == frozenset({"w"})
    assert sl.match("A.B") == frozenset({"x", "z"})
    assert (sl.cache_hits, sl.cache_misses) == ((6, 6) if cached else (0, 12))


def test_removing_absent_pattern_keeps_cache(make: MakeSublist, cached: bool) -> None:
    sl = make()
    sl.insert("A.B", "x")
    sl.match("A.B")
    assert sl.remove("A.*", "x") is False
    assert sl.remove("A.B", "nope") is False
    assert sl.match("A.B") == frozenset({"x"})
    assert (sl.cache_hits, sl.cache_misses) == ((1, 1) if cached else (0, 2))


def test_empty_results_are_cached(make: MakeSublist, cached: bool) -> None:
    sl = make()
    sl.insert("A", "x")
    assert sl.match("B") == frozenset()
    assert sl.match("B") == frozenset()
    assert (sl.cache_hits, sl.cache_misses) == ((1, 1) if cached else (0, 2))


def test_clear_cache(make: MakeSublist, cached: bool) -> None:
    sl = make()
    sl.insert("A", "x")
    sl.match("A")
    sl.match("A")
    sl.clear_cache()
    assert sl._cache == {}
    assert sl.match("A") == frozenset({"x"})
    assert (sl.cache_hits, sl.cache_misses) == ((1, 2) if cached else (0, 3))


def test_cache_is_bounded(make: MakeSublist, cached: bool) -> None:
    sl = make()
    sl.insert(">", "x")
    size = MATCH_CACHE_SIZE if cached else 0
    extra = 10
    for n in range(size + extra):
        assert sl.match(f"T.{n}") == frozenset({"x"})
        assert len(sl._cache) <= size
    assert len(sl._cache) == size
    if cached:
        # the oldest entries were dropped, the newest kept
        assert "T.0" not in sl._cache
        assert f"T.{extra - 1}" not in sl._cache
        assert f"T.{extra}" in sl._cache
        assert f"T.{size + extra - 1}" in sl._cache
    hits = sl.cache_hits
    sl.match("T.0")  # evicted (or never cached): a miss
    assert sl.cache_hits == hits
    sl.match(f"T.{size + extra - 1}")
    assert sl.cache_hits == hits + (1 if cached else 0)
    assert len(sl._cache) == size


def test_small_cache_drops_oldest(cached: bool) -> None:
    sl: Sublist[str] = Sublist(cache_size=2 if cached else 0)
    sl.insert("*", "x")
    for t in ("A", "B", "C"):
        sl.match(t)
    assert list(sl._cache) == (["B", "C"] if cached else [])
    sl.match("A")  # miss, re-cached, drops B
    assert list(sl._cache) == (["C", "A"] if cached else [])
    assert sl.cache_hits == 0
    sl.match("C")
    assert sl.cache_hits == (1 if cached else 0)


# ---------------------------------------------------------------------------------------
# properties: the trie agrees with topics.match over random patterns and topics
# ---------------------------------------------------------------------------------------

_PATTERN_SEGMENT = st.sampled_from(["A", "B", "C", "*"])
_TOPIC = st.lists(st.sampled_from(["A", "B", "C", "D"]), min_size=1, max_size=5).map(".".join)


@st.composite
def patterns(draw: st.DrawFn) -> str:
    segs = draw(st.lists(_PATTERN_SEGMENT, min_size=0, max_size=4))
    if not segs or draw(st.booleans()):
        segs.append(">")
    return ".".join(segs)


_ITEM = st.sampled_from(["i0", "i1", "i2", "i3"])


def _expected(held: Counter[tuple[str, str]], topic: str) -> frozenset[str]:
    return frozenset(item for (p, item), n in held.items() if n > 0 and topics.match(p, topic))


@pytest.mark.parametrize("cache_size", [MATCH_CACHE_SIZE, 0, 3], ids=["cache", "nocache", "tiny"])
@settings(max_examples=200, deadline=None)
@given(
    inserts=st.lists(st.tuples(patterns(), _ITEM), max_size=25),
    probe=st.lists(_TOPIC, min_size=1, max_size=12),
    removals=st.lists(st.integers(min_value=0, max_value=1000), max_size=30),
)
def test_match_equals_brute_force(
    cache_size: int,
    inserts: list[tuple[str, str]],
    probe: list[str],
    removals: list[int],
) -> None:
    sl: Sublist[str] = Sublist(cache_size=cache_size)
    held: Counter[tuple[str, str]] = Counter()

    def check() -> None:
        for t in probe:
            assert sl.match(t) == _expected(held, t)
        assert len(sl) == sum(held.values())
        assert sorted(sl.patterns()) == sorted(k for k, n in held.items() if n > 0)

    check()  # warms the cache with empty results
    for p, item in inserts:
        assert sl.insert(p, item) is (held[(p, item)] == 0)
        held[(p, item)] += 1
        assert sl.match(probe[0]) == _expected(held, probe[0])
    check()
    for r in removals:
        live = sorted(k for k, n in held.items() if n > 0)
        if not live:
            break
        p, item = live[r % len(live)]
        held[(p, item)] -= 1
        assert sl.remove(p, item) is (held[(p, item)] == 0)
        assert sl.match(probe[-1]) == _expected(held, probe[-1])
    check()
    # remove the rest: the trie must be empty and fully pruned
    for (p, item), n in held.items():
        for _ in range(n):
            sl.remove(p, item)
    held.clear()
    check()
    _assert_empty_trie(sl)


class SublistMachine(RuleBasedStateMachine):
    """Random interleavings of insert, remove and match against a brute-force model."""

    cache_size = MATCH_CACHE_SIZE
    held_pairs = Bundle("held_pairs")

    def __init__(self) -> None:
        super().__init__()
        self.sl: Sublist[str] = Sublist(cache_size=self.cache_size)
        self.model: Counter[tuple[str, str]] = Counter()

    @rule(target=held_pairs, pattern=patterns(), item=_ITEM)
    def insert(self, pattern: str, item: str) -> tuple[str, str]:
        new = self.model[(pattern, item)] == 0
        assert self.sl.insert(pattern, item) is new
        self.model[(pattern, item)] += 1
        return (pattern, item)

    @rule(pair=consumes(held_pairs))
    def remove(self, pair: tuple[str, str]) -> None:
        pattern, item = pair
        self.model[pair] -= 1
        assert self.sl.remove(pattern, item) is (self.model[pair] == 0)

    @rule(pattern=patterns(), item=_ITEM)
    def remove_maybe_absent(self, pattern: str, item: str) -> None:
        if self.model[(pattern, item)] == 0:
            assert self.sl.remove(pattern, item) is False

    @rule(topic=_TOPIC)
    def match(self, topic: str) -> None:
        assert self.sl.match(topic) == _expected(self.model, topic)

    @invariant()
    def size_and_patterns(self) -> None:
        assert len(self.sl) == sum(self.model.values())
        assert sorted(self.sl.patterns()) == sorted(k for k, n in self.model.items() if n > 0)
        if not len(self.sl):
            assert self.sl._root.empty()


class NoCacheSublistMachine(SublistMachine):
    cache_size = 0


class TinyCacheSublistMachine(SublistMachine):
    cache_size = 2


_MACHINE_SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestSublistMachineCache = SublistMachine.TestCase
TestSublistMachineCache.settings = _MACHINE_SETTINGS
TestSublistMachineNoCache = NoCacheSublistMachine.TestCase
TestSublistMachineNoCache.settings = _MACHINE_SETTINGS
TestSublistMachineTinyCache = TinyCacheSublistMachine.TestCase
TestSublistMachineTinyCache.settings = _MACHINE_SETTINGS


# ---------------------------------------------------------------------------------------
# selective eviction without a scan (issue 18, item 9)
# ---------------------------------------------------------------------------------------

_WIDE_TOPIC = st.lists(st.sampled_from(["A", "B", "C", "D", "E"]), min_size=1, max_size=4).map(
    ".".join
)


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("cache"), _WIDE_TOPIC),
            st.tuples(st.just("drop"), _WIDE_TOPIC),
            st.tuples(st.just("evict"), patterns()),
        ),
        max_size=60,
    )
)
def test_topic_index_evicts_exactly_the_cached_topics_a_pattern_matches(
    ops: list[tuple[str, str]],
) -> None:
    cache: dict[str, int] = {}
    index = TopicIndex(cache)
    for op, arg in ops:
        if op == "cache" and arg not in cache:
            cache[arg] = 1
            index.note(arg)
        elif op == "drop":  # the cache's size limit, which the index is not told of
            cache.pop(arg, None)
        elif op == "evict":
            wanted = {t for t in cache if topics.match(arg, t)}
            got = set(index.evict(arg))
            assert wanted <= got  # every matching cached topic, maybe stale ones too
            assert all(topics.match(arg, t) for t in got)
            for t in got:
                cache.pop(t, None)
            # taken out of the index: a second eviction finds none of them
            assert not set(index.evict(arg)) & wanted


class CachedAgreesWithUncached(RuleBasedStateMachine):
    """After any sequence of inserts, removes and matches, a cached sublist answers what
    an uncached one does (the eviction index never lets a stale result through)."""

    cache_size = MATCH_CACHE_SIZE

    def __init__(self) -> None:
        super().__init__()
        self.cached: Sublist[str] = Sublist(cache_size=self.cache_size)
        self.plain: Sublist[str] = Sublist(cache_size=0)

    @rule(pattern=patterns(), item=_ITEM)
    def insert(self, pattern: str, item: str) -> None:
        assert self.cached.insert(pattern, item) == self.plain.insert(pattern, item)

    @rule(pattern=patterns(), item=_ITEM)
    def remove(self, pattern: str, item: str) -> None:
        assert self.cached.remove(pattern, item) == self.plain.remove(pattern, item)

    @rule(topic=_WIDE_TOPIC)
    def match(self, topic: str) -> None:
        assert self.cached.match(topic) == self.plain.match(topic)

    @rule(topics_=st.lists(_WIDE_TOPIC, min_size=1, max_size=20))
    def match_many(self, topics_: list[str]) -> None:
        for t in topics_:
            assert self.cached.match(t) == self.plain.match(t)


class SmallCachedAgreesWithUncached(CachedAgreesWithUncached):
    cache_size = 5


_AGREE_SETTINGS = settings(max_examples=100, stateful_step_count=60, deadline=None)
TestCachedAgreesWithUncached = CachedAgreesWithUncached.TestCase
TestCachedAgreesWithUncached.settings = _AGREE_SETTINGS
TestSmallCachedAgreesWithUncached = SmallCachedAgreesWithUncached.TestCase
TestSmallCachedAgreesWithUncached.settings = _AGREE_SETTINGS


def test_changes_against_a_full_cache_do_not_scan_it() -> None:
    """10,000 inserts and removes of patterns with a literal prefix, half of them
    matching one cached topic, against a full cache: the old eviction tested every cached topic per
    change (about 20 s here); found through the index it takes milliseconds."""
    sl: Sublist[str] = Sublist()
    cached = [f"C{k % 100}.{k}.tick" for k in range(MATCH_CACHE_SIZE)]
    for t in cached:
        sl.match(t)
    even = range(0, 10_000, 2)
    start = time.perf_counter()
    for i in even:
        sl.insert(f"C{i % 100}.{i}.>", "x")
    for i in even:
        sl.remove(f"C{i % 100}.{i}.>", "x")
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, elapsed
    # the cache kept exactly what no change touched: the odd topics
    assert set(sl._cache) == set(cached[1::2])
    assert sl.match(cached[0]) == frozenset()
