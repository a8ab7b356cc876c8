"""Unit tests for the match cache of zbroker.sublist.Sublist: cached results follow
inserts and removes, eviction is selective (only the cached topics a changed pattern
matches, found through a :class:`~zbroker.sublist.TopicIndex`, never by a scan) and the
cache is bounded; a cached sublist always answers what an uncached one does."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from tests.sublists import ITEM, MakeSublist, patterns
from tests.sublists import cached as cached  # (a fixture)
from tests.sublists import make as make  # (a fixture)
from zbroker import topics
from zbroker.const import MATCH_CACHE_SIZE
from zbroker.sublist import Sublist, TopicIndex

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

    @rule(pattern=patterns(), item=ITEM)
    def insert(self, pattern: str, item: str) -> None:
        assert self.cached.insert(pattern, item) == self.plain.insert(pattern, item)

    @rule(pattern=patterns(), item=ITEM)
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
