"""Property tests of zbroker.sublist.Sublist: over random patterns, items and topics the
trie agrees with a brute-force model built on ``topics.match`` (inserts, removes with
their reference counts, matches, and an empty trie at the end), with the match cache on,
off and tiny."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from tests.sublists import ITEM, assert_empty_trie, patterns
from zbroker import topics
from zbroker.const import MATCH_CACHE_SIZE
from zbroker.sublist import Sublist

# ---------------------------------------------------------------------------------------
# properties: the trie agrees with topics.match over random patterns and topics
# ---------------------------------------------------------------------------------------

_TOPIC = st.lists(st.sampled_from(["A", "B", "C", "D"]), min_size=1, max_size=5).map(".".join)


def _expected(held: Counter[tuple[str, str]], topic: str) -> frozenset[str]:
    return frozenset(item for (p, item), n in held.items() if n > 0 and topics.match(p, topic))


@pytest.mark.parametrize("cache_size", [MATCH_CACHE_SIZE, 0, 3], ids=["cache", "nocache", "tiny"])
@settings(max_examples=200, deadline=None)
@given(
    inserts=st.lists(st.tuples(patterns(), ITEM), max_size=25),
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
    assert_empty_trie(sl)


class SublistMachine(RuleBasedStateMachine):
    """Random interleavings of insert, remove and match against a brute-force model."""

    cache_size = MATCH_CACHE_SIZE
    held_pairs = Bundle("held_pairs")

    def __init__(self) -> None:
        super().__init__()
        self.sl: Sublist[str] = Sublist(cache_size=self.cache_size)
        self.model: Counter[tuple[str, str]] = Counter()

    @rule(target=held_pairs, pattern=patterns(), item=ITEM)
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

    @rule(pattern=patterns(), item=ITEM)
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
