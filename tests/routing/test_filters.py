"""Unit tests for zbroker.routing.filters: pattern_covers and LinkFilter."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.routing.filters import LinkFilter, pattern_covers
from zbroker.topics import match

# -- pattern_covers: truth table ------------------------------------------------------------

COVERS_TABLE: list[tuple[str, str, bool]] = [
    # literals
    ("A", "A", True),
    ("A", "B", False),
    ("A.B", "A.B", True),
    ("A.B", "A", False),
    ("A", "A.B", False),
    # '*' covers exactly one segment
    ("*", "A", True),
    ("*", "*", True),
    ("A", "*", False),
    ("A.*", "A.B", True),
    ("A.*", "A.*", True),
    ("*.B", "A.B", True),
    ("*.B", "A.*", False),
    ("*.*", "A.B", True),
    ("*", "A.B", False),
    ("A.*", "A", False),
    ("A.*", "A.>", False),
    ("*.*", "A.>", False),
    # '>' covers one or more remaining segments
    (">", "A", True),
    (">", "A.B.C", True),
    (">", "*", True),
    (">", ">", True),
    (">", "A.>", True),
    ("A.>", "A.B", True),
    ("A.>", "A.B.C", True),
    ("A.>", "A.*", True),
    ("A.>", "A.>", True),
    ("A.>", "A.*.>", True),
    ("A.>", "A", False),  # '>' needs at least one more segment
    ("A.>", "B.C", False),
    ("A.>", ">", False),
    ("A.>", "*.B", False),
    ("A.B.>", "A.>", False),
    ("A.*.>", "A.>", False),
    ("A.*.>", "A.B.C", True),
    ("A.*.>", "A.B", False),
    ("*.>", ">", False),  # '>' matches one-segment topics, '*.>' does not
    ("*.>", "A.B", True),
    ("A", ">", False),
    ("A.B", "A.>", False),
    # the filter example of the docs
    ("PRICE.STOCK.NYSE.*", "PRICE.STOCK.NYSE.IBM", True),
    ("PRICE.STOCK.NYSE.*", "PRICE.STOCK.>", False),
    ("PRICE.STOCK.>", "PRICE.STOCK.NYSE.*", True),
    ("PRICE.STOCK.>", "PRICE.>", False),
]


@pytest.mark.parametrize(("a", "b", "expected"), COVERS_TABLE)
def test_pattern_covers(a: str, b: str, expected: bool) -> None:
    assert pattern_covers(a, b) is expected


# -- pattern_covers vs topics.match -------------------------------------------------------

SEGMENTS = ["A", "B", "C"]
FRESH = "Q"  # a segment no generated pattern names
ALL_TOPICS = [
    ".".join(t) for n in range(1, 6) for t in itertools.product([*SEGMENTS, FRESH], repeat=n)
]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    segs = draw(st.lists(st.sampled_from([*SEGMENTS, "*"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        segs.append(">")
    return ".".join(segs)


def _witnesses(b: str) -> list[str]:
    """Topics of ``b`` with every wildcard replaced by a segment no pattern names."""
    segs = [FRESH if s == "*" else s for s in b.split(".")]
    if segs[-1] != ">":
        return [".".join(segs)]
    head = segs[:-1]
    return [".".join([*head, FRESH]), ".".join([*head, FRESH, FRESH])]


@settings(max_examples=500, deadline=None)
@given(a=patterns(), b=patterns())
def test_property_covers_implies_match_inclusion(a: str, b: str) -> None:
    covered = pattern_covers(a, b)
    if covered:
        for topic in ALL_TOPICS:
            if match(b, topic):
                assert match(a, topic), (a, b, topic)
    # exact: covers(a, b) is False only if some topic of b escapes a
    escapes = [t for t in ALL_TOPICS if match(b, t) and not match(a, t)]
    assert covered is (not escapes)
    # ... and the wildcard-replaced topics of b always find such an escape
    assert covered is all(match(a, t) for t in _witnesses(b))


@settings(max_examples=200, deadline=None)
@given(a=patterns())
def test_property_covers_is_reflexive(a: str) -> None:
    assert pattern_covers(a, a) is True
    assert pattern_covers(">", a) is True


# -- LinkFilter -----------------------------------------------------------------------------


def test_empty_filter_allows_everything_and_is_never_static() -> None:
    f = LinkFilter()
    for topic in ("A", "A.B", "PRICE.STOCK.NYSE.IBM"):
        assert f.allows_topic(topic) is True
        assert f.is_static(topic) is False
    for pattern in (">", "*", "A.>", "A.*.B"):
        assert f.allows_pattern(pattern) is True


PRICE = LinkFilter(include=("PRICE.STOCK.>",), exclude=("PRICE.STOCK.NYSE.*",))


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("PRICE.STOCK.NASDAQ.AAPL", True),
        ("PRICE.STOCK.NYSE", True),  # include matches, exclude needs one more segment
        ("PRICE.STOCK.NYSE.IBM", False),  # excluded
        ("PRICE.STOCK.NYSE.IBM.X", True),  # '*' is a single segment: not excluded
        ("PRICE.STOCK", False),  # include needs one more segment
        ("PRICE.BOND.X", False),  # not included
        ("OTHER", False),
    ],
)
def test_allows_topic_include_exclude(topic: str, expected: bool) -> None:
    assert PRICE.allows_topic(topic) is expected


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("PRICE.>", True),  # overlaps the include, not covered by the exclude
        (">", True),
        ("PRICE.STOCK.>", True),
        ("PRICE.STOCK.NYSE.>", True),  # PRICE.STOCK.NYSE.IBM.X can still cross
        ("PRICE.*.NASDAQ.*", True),
        ("PRICE.STOCK.NYSE.*", False),  # every topic is excluded
        ("PRICE.STOCK.NYSE.IBM", False),
        ("PRICE.BOND.>", False),  # no overlap with the include
        ("PRICE.STOCK", False),
        ("OTHER.>", False),
    ],
)
def test_allows_pattern_include_exclude(pattern: str, expected: bool) -> None:
    assert PRICE.allows_pattern(pattern) is expected


def test_exclude_only_filter() -> None:
    f = LinkFilter(exclude=("SECRET.>", "X.*"))
    assert f.allows_topic("PUBLIC.A") is True
    assert f.allows_topic("SECRET.A") is False
    assert f.allows_topic("SECRET") is True
    assert f.allows_topic("X.Y") is False
    assert f.allows_topic("X.Y.Z") is True
    assert f.allows_pattern("SECRET.A.>") is False
    assert f.allows_pattern("X.Y") is False
    assert f.allows_pattern("X.>") is True
    assert f.allows_pattern(">") is True


def test_several_includes_are_a_union() -> None:
    f = LinkFilter(include=("A.>", "B"))
    assert f.allows_topic("A.X") is True
    assert f.allows_topic("B") is True
    assert f.allows_topic("B.X") is False
    assert f.allows_topic("C") is False
    assert f.allows_pattern("*") is True  # B
    assert f.allows_pattern("*.X") is True  # A.X
    assert f.allows_pattern("C.>") is False


def test_is_static() -> None:
    f = LinkFilter(static=("ALERT.>", "TICK.*"))
    assert f.is_static("ALERT.FIRE") is True
    assert f.is_static("ALERT.FIRE.BIG") is True
    assert f.is_static("ALERT") is False
    assert f.is_static("TICK.A") is True
    assert f.is_static("TICK.A.B") is False
    assert f.is_static("OTHER") is False
    # static does not widen what may cross
    g = LinkFilter(include=("TICK.>",), static=("ALERT.>",))
    assert g.is_static("ALERT.X") is True
    assert g.allows_topic("ALERT.X") is False


@settings(max_examples=300, deadline=None)
@given(
    include=st.lists(patterns(), max_size=2),
    exclude=st.lists(patterns(), max_size=2),
    pattern=patterns(),
)
def test_property_allows_pattern_is_never_too_strict(
    include: list[str], exclude: list[str], pattern: str
) -> None:
    # if a topic of the pattern can cross the link, its interest must be advertised
    f = LinkFilter(tuple(include), tuple(exclude))
    if any(match(pattern, t) and f.allows_topic(t) for t in ALL_TOPICS):
        assert f.allows_pattern(pattern) is True


def test_a_leading_wildcard_filter_neither_stops_nor_lets_in_zb_traffic_by_itself() -> None:
    """The `$ZB` rule holds for both halves of a filter alike: a wildcard-led pattern
    matches no `$ZB` topic, so an exclude of '>' does not stop advisories (topic or
    interest) and an include of '>' does not let them in; naming `$ZB` does both."""
    wild_out = LinkFilter(exclude=(">",))
    assert wild_out.allows_topic("$ZB.ADVISORY.A.LINK_UP") is True
    assert wild_out.allows_pattern("$ZB.ADVISORY.>") is True  # was refused: interest cut
    assert wild_out.allows_pattern("ORDERS.>") is False
    wild_in = LinkFilter(include=(">",))
    assert wild_in.allows_topic("$ZB.ADVISORY.A.LINK_UP") is False
    assert wild_in.allows_pattern("$ZB.ADVISORY.>") is False
    named_out = LinkFilter(exclude=("$ZB.>",))
    assert named_out.allows_topic("$ZB.ADVISORY.A.LINK_UP") is False
    assert named_out.allows_pattern("$ZB.ADVISORY.>") is False


def test_pattern_covers_keeps_the_zb_rule() -> None:
    assert pattern_covers(">", "$ZB.ADVISORY.>") is False
    assert pattern_covers("*.ADVISORY.>", "$ZB.ADVISORY.>") is False
    assert pattern_covers("$ZB.>", "$ZB.ADVISORY.>") is True
    assert pattern_covers(">", "ORDERS.>") is True
