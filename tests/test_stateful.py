"""The sans-IO rules of topics with state (:mod:`zbroker.stateful`): versions, the
conflict rule, the topic trie, and a hypothesis property of the snapshot gate over every
interleaving of writes, the subscription's start, the snapshot and live delivery."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.stateful import SnapshotGate, merge, newer, next_version
from zbroker.sublist import TopicTrie
from zbroker.topics import match


def test_versions_grow_and_the_conflict_rule_is_version_then_owner() -> None:
    assert next_version(100, 5) == 100
    assert next_version(100, 100) == 101  # a clock that did not move still grows
    assert newer(5, "A", None)
    assert newer(6, "A", (5, "Z"))  # the later writer wins whatever its ID
    assert newer(5, "B", (5, "A"))  # a tie goes to the higher broker ID
    assert not newer(5, "A", (5, "B"))
    assert not newer(5, "A", (5, "A"))  # the same value is not newer than itself
    into: dict[str, list[Any]] = {}
    merge(into, [["T", b"a", 0, None, 5, "A", 0.0, None], ["T", b"b", 0, None, 5, "B", 0.0, None]])
    merge(into, [["T", b"c", 0, None, 4, "Z", 0.0, None]])
    assert into["T"][1] == b"b"


@given(
    st.sets(st.lists(st.sampled_from("abc"), min_size=1, max_size=4).map(".".join)),
    st.lists(st.sampled_from(["a", "b", "c", "*", ">"]), min_size=1, max_size=4),
)
@settings(max_examples=300, deadline=None)
def test_the_trie_matches_exactly_what_match_says(topics: set[str], segs: list[str]) -> None:
    if ">" in segs[:-1]:
        segs = segs[: segs.index(">") + 1]
    pattern = ".".join(segs)
    trie = TopicTrie()
    for t in topics:
        trie.add(t)
    assert sorted(trie.match(pattern)) == sorted(t for t in topics if match(pattern, t))
    for t in list(topics)[::2]:
        trie.discard(t)
        topics.discard(t)
    assert sorted(trie.match(pattern)) == sorted(t for t in topics if match(pattern, t))
    assert trie.count == len(topics)


# A model node: writes (set or remove) to topics a/b/c, each stamped with a growing
# version. The subscription becomes active before write `active`; the snapshot is taken
# before write `taken` (>= active); live messages are the writes from `active` on, in
# order, and the snapshot's answer reaches the gate after `arrives` of them.

Write = tuple[str, int, bool, int]  # topic, version, removed, value


@st.composite
def scenarios(draw: Any) -> tuple[list[Write], int, int, int]:
    n = draw(st.integers(0, 30))
    writes = []
    exists: set[str] = set()
    for i in range(n):
        topic = draw(st.sampled_from("abc"))
        removed = topic in exists and draw(st.booleans())  # (a node removes what exists)
        (exists.discard if removed else exists.add)(topic)
        writes.append((topic, i + 1, removed, i))
    active = draw(st.integers(0, n))
    taken = draw(st.integers(active, n))
    arrives = draw(st.integers(0, n - active))
    return writes, active, taken, arrives


def state_before(writes: list[Write], k: int) -> tuple[dict[str, Write], dict[str, Write]]:
    values: dict[str, Write] = {}
    gone: dict[str, Write] = {}
    for w in writes[:k]:
        if w[2]:
            values.pop(w[0], None)
            gone[w[0]] = w
        else:
            gone.pop(w[0], None)
            values[w[0]] = w
    return values, gone


@given(scenarios())
@settings(max_examples=500, deadline=None)
def test_snapshot_then_live_has_no_gap_and_no_duplicate(
    scenario: tuple[list[Write], int, int, int],
) -> None:
    writes, active, taken, arrives = scenario
    seen: list[tuple[str, Any]] = []
    gate = SnapshotGate(
        lambda w: seen.append(("live", w)),
        lambda v: seen.append(("initial", v)),
        lambda: seen.append(("complete", None)),
        lambda w: (w[0], w[1], "N", w[2]),
    )
    live = writes[active:]
    for w in live[:arrives]:
        gate.live(w)
    values, gone = state_before(writes, taken)
    gate.snapshot(
        [[t, b"", 0, None, w[1], "N", 0.0, None] for t, w in values.items()],
        [[t, w[1], "N"] for t, w in gone.items()],
    )
    for w in live[arrives:]:
        gate.live(w)
    kinds = [k for k, _ in seen]
    # initial values, then the marker, then live ones: never interleaved
    assert kinds == sorted(kinds, key=["initial", "complete", "live"].index)
    assert kinds.count("complete") == 1
    initials = {v[0]: v[4] for k, v in seen if k == "initial"}
    assert initials == {t: w[1] for t, w in values.items()}
    delivered = [w for k, w in seen if k == "live"]
    # exactly the writes after the snapshot, each once, in order: no gap, no duplicate
    assert delivered == writes[taken:]
    # and the subscriber's view ends as the node's
    view: dict[str, int] = dict(initials)
    for w in delivered:
        if w[2]:
            view.pop(w[0], None)
        else:
            view[w[0]] = w[1]
    final, _ = state_before(writes, len(writes))
    assert view == {t: w[1] for t, w in final.items()}


def test_a_losing_owner_update_is_not_delivered() -> None:
    seen: list[Any] = []
    gate = SnapshotGate(seen.append, seen.append, lambda: None, lambda m: m)
    gate.snapshot([["T", b"", 0, None, 10, "B", 0.0, None]], [])
    gate.live(("T", 9, "Z", False))  # an older version from another owner: lost the conflict
    gate.live(("T", 10, "A", False))  # a tie: lower broker ID loses
    gate.live(("T", 10, "C", False))  # a tie: higher broker ID wins
    gate.live(("T", 11, "C", True))  # removed by C
    gate.live(("T", 12, "B", True))  # and by B, the other owner: told once
    assert [s if isinstance(s, tuple) else s[4] for s in seen] == [
        10,
        ("T", 10, "C", False),
        ("T", 11, "C", True),
    ]
    assert gate.dropped == 3
