"""Unit tests for zbroker.topics' matching: match() and patterns_overlap() against their
truth tables, and properties (overlap holds exactly when some topic matches both patterns;
match agrees with a regular-expression oracle). The naming rules and validation:
``tests/test_topic_names.py``."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import topics

# ---------------------------------------------------------------------------------------
# match(): truth table
# ---------------------------------------------------------------------------------------

MATCH_TABLE: list[tuple[str, str, bool]] = [
    # literals
    ("A", "A", True),
    ("A", "B", False),
    ("A", "a", False),  # case-sensitive
    ("A", "A.B", False),
    ("A.B", "A", False),
    ("A.B", "A.B", True),
    ("A.B", "A.C", False),
    ("A.B", "B.A", False),
    ("A.B.C", "A.B.C", True),
    ("AB", "A.B", False),
    ("A.B", "AB", False),
    # '*' matches exactly one segment
    ("*", "A", True),
    ("*", "A.B", False),
    ("A.*", "A.B", True),
    ("A.*", "A", False),
    ("A.*", "A.B.C", False),
    ("A.*", "B.B", False),
    ("*.B", "A.B", True),
    ("*.B", "A.C", False),
    ("*.B", "B", False),
    ("*.*", "A.B", True),
    ("*.*", "A", False),
    ("*.*", "A.B.C", False),
    ("A.*.C", "A.B.C", True),
    ("A.*.C", "A.B.D", False),
    ("A.*.C", "A.C", False),
    # '>' matches one or more remaining segments, never zero
    (">", "A", True),
    (">", "A.B.C", True),
    ("A.>", "A", False),
    ("A.>", "A.B", True),
    ("A.>", "A.B.C", True),
    ("A.>", "B.C", False),
    ("A.>", "B.A.C", False),
    ("A.B.>", "A.B", False),
    ("A.B.>", "A.B.C", True),
    ("A.B.>", "A.C.D", False),
    ("A.*.>", "A.B", False),
    ("A.*.>", "A.B.C", True),
    ("A.*.>", "A.B.C.D.E", True),
    ("*.>", "A", False),
    ("*.>", "A.B", True),
    # the examples from the docs
    ("PRICE.STOCK.>", "PRICE.STOCK.NYSE.IBM", True),
    ("PRICE.STOCK.>", "PRICE.BOND.NYSE.IBM", False),
    ("PRICE.*.NYSE.*", "PRICE.STOCK.NYSE.IBM", True),
    ("PRICE.*.NYSE.*", "PRICE.STOCK.NASDAQ.IBM", False),
    ("PRICE.*.NYSE.*", "PRICE.STOCK.NYSE", False),
    # reserved names match patterns that name them, never a leading wildcard (MQTT's
    # rule for $SYS: a catch-all subscriber or retain rule does not get the node's
    # advisories and STATS)
    ("$ZB", "$ZB", True),
    ("$ZB.>", "$ZB.STATUS", True),
    ("$ZB.>", "$ZB.STATUS.PEERS", True),
    ("$ZB.>", "$ZB", False),
    ("$ZB.*", "$ZBX.Y", False),
    ("$ZB.*", "$ZB.Y", True),
    ("*", "$ZB", False),
    (">", "$ZB.X", False),
    ("*.X", "$ZB.X", False),
    ("*", "$ZBX", True),
    (">", "$X.Y", True),
    # the nodes' internal branches match patterns that name them, never a wildcard in
    # their second segment: a subscriber of $ZB.> is not sent the nodes' own traffic
    ("$ZB.>", "$ZB.SD.A", False),
    ("$ZB.*.A", "$ZB.SD.A", False),
    ("$ZB.*.>", "$ZB.Q.w.x", False),
    ("$ZB.SD.*", "$ZB.SD.A", True),
    ("$ZB.Q.>", "$ZB.Q.w.x", True),
    ("$ZB.*.A", "$ZB.ADVISORY.A", True),
    # non-ASCII literals
    ("π.*", "π.x", True),
    ("π.*", "p.x", False),
]


@pytest.mark.parametrize(("pattern", "topic", "expected"), MATCH_TABLE)
def test_match_truth_table(pattern: str, topic: str, expected: bool) -> None:
    # every row is made of valid names: the table must not test invalid inputs by accident
    assert topics.validate_pattern(pattern) == pattern
    assert topics.validate_topic(topic) == topic
    assert topics.match(pattern, topic) is expected


@pytest.mark.parametrize(("pattern", "topic", "expected"), MATCH_TABLE)
def test_match_agrees_with_pattern_overlap_for_literal_topic(
    pattern: str, topic: str, expected: bool
) -> None:
    # a literal topic is a pattern matching only itself
    assert topics.patterns_overlap(pattern, topic) is expected
    assert topics.patterns_overlap(topic, pattern) is expected


# ---------------------------------------------------------------------------------------
# patterns_overlap(): truth table
# ---------------------------------------------------------------------------------------

OVERLAP_TABLE: list[tuple[str, str, bool]] = [
    ("A", "A", True),
    ("A", "B", False),
    ("A", "*", True),
    ("A", ">", True),
    ("A.B", "A.B", True),
    ("A.B", "A.C", False),
    ("A.B", "A.B.C", False),
    ("A.B", "A.*", True),
    ("A.B", "*.*", True),
    ("A.B", ">", True),
    ("A.B", "A.>", True),
    ("A.B", "B.>", False),
    ("A.B", "A.*.>", False),
    ("*", "*", True),
    ("*", ">", True),
    ("*", "A.B", False),
    ("*", "*.*", False),
    ("*", "*.>", False),
    (">", ">", True),
    (">", "A.B.C", True),
    ("A.>", "A", False),
    ("A.>", "A.*", True),
    ("A.>", "*.*.*", True),
    ("A.>", "*.B", True),
    ("A.>", "B.>", False),
    ("A.>", "A.>", True),
    ("A.>", "*.>", True),
    ("A.>", ">", True),
    ("A.B.>", "A.>", True),
    ("A.B.>", "A.C.>", False),
    ("A.B.>", "A.*", False),
    ("A.B.>", "*.B.C", True),
    ("A.*", "*.B", True),
    ("A.*.C", "A.B.D", False),
    ("A.*.C", "*.B.*", True),
    ("*.>", "A", False),
    ("*.>", "A.B", True),
    ("*.*.>", "A.>", True),
    ("*.*.>", "A.B", False),
    ("$ZB.>", "$ZBX.>", False),
    ("$ZB.>", ">", False),
    ("$ZB.>", "*.*", False),
    ("*.>", "$ZB.X", False),
    ("$ZBX.>", ">", True),
    ("$ZB.>", "$ZB.SD.>", False),
    ("$ZB.*.A", "$ZB.HOST.A", False),
    ("$ZB.>", "$ZB.ADVISORY.>", True),
    ("$ZB.SD.*", "$ZB.SD.A", True),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAP_TABLE)
def test_patterns_overlap_truth_table(a: str, b: str, expected: bool) -> None:
    topics.validate_pattern(a)
    topics.validate_pattern(b)
    assert topics.patterns_overlap(a, b) is expected
    assert topics.patterns_overlap(b, a) is expected  # symmetric


# ---------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------

# Patterns use literals A and B; topics also use C, a literal no pattern names, so every
# '*' or '>' position can be filled with something that no literal segment matches.
_PATTERN_SEGMENT = st.sampled_from(["A", "B", "*"])
_MAX_PATTERN_LEN = 4


@st.composite
def small_patterns(draw: st.DrawFn) -> str:
    segs = draw(st.lists(_PATTERN_SEGMENT, min_size=0, max_size=_MAX_PATTERN_LEN))
    if not segs or draw(st.booleans()):
        segs.append(">")
    return ".".join(segs)


# Every topic of 1..MAX+1 segments over A, B, C: a witness of an overlap, if one exists,
# is never longer than the longer pattern (plus one segment for a trailing '>').
_ALL_TOPICS = [
    ".".join(combo)
    for n in range(1, _MAX_PATTERN_LEN + 2)
    for combo in itertools.product("ABC", repeat=n)
]


@settings(max_examples=300, deadline=None)
@given(small_patterns(), small_patterns())
def test_patterns_overlap_iff_a_topic_matches_both(a: str, b: str) -> None:
    topics.validate_pattern(a)
    topics.validate_pattern(b)
    witnesses = [t for t in _ALL_TOPICS if topics.match(a, t) and topics.match(b, t)]
    assert topics.patterns_overlap(a, b) is bool(witnesses)
    assert topics.patterns_overlap(b, a) is bool(witnesses)


@settings(max_examples=200, deadline=None)
@given(small_patterns(), small_patterns(), st.sampled_from(_ALL_TOPICS))
def test_topic_matching_both_implies_overlap(a: str, b: str, topic: str) -> None:
    if topics.match(a, topic) and topics.match(b, topic):
        assert topics.patterns_overlap(a, b)


def _regex_for(pattern: str) -> re.Pattern[str]:
    parts = []
    for seg in pattern.split("."):
        if seg == "*":
            parts.append(r"[^.]+")
        elif seg == ">":
            parts.append(r"[^.]+(?:\.[^.]+)*")
        else:
            parts.append(re.escape(seg))
    return re.compile(r"\.".join(parts))


@settings(max_examples=300, deadline=None)
@given(small_patterns(), st.sampled_from(_ALL_TOPICS))
def test_match_agrees_with_regex_oracle(pattern: str, topic: str) -> None:
    expected = _regex_for(pattern).fullmatch(topic) is not None
    assert topics.match(pattern, topic) is expected
