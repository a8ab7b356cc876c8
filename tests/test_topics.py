"""Unit tests for zbroker.topics: naming rules, validation, matching and overlap."""

from __future__ import annotations

import itertools
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import topics
from zbroker.const import MAX_TOPIC_BYTES, MAX_TOPIC_SEGMENTS, RESERVED_PREFIX
from zbroker.errors import InvalidTopic, ReservedTopic, ZBrokerError

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
# validate_topic / validate_pattern: valid inputs
# ---------------------------------------------------------------------------------------

VALID_TOPICS = [
    "A",
    "A.B",
    "PRICE.STOCK.NYSE.IBM",
    "$ZB",
    "$ZB.STATUS",
    "a-b_c:d/e",
    "π.ü.日本",
    "A" * MAX_TOPIC_BYTES,
    "é" * (MAX_TOPIC_BYTES // 2),  # 2 bytes each: exactly at the limit
    ".".join(["A"] * MAX_TOPIC_SEGMENTS),
]


@pytest.mark.parametrize("topic", VALID_TOPICS)
def test_valid_topics_are_returned_unchanged(topic: str) -> None:
    assert topics.validate_topic(topic) == topic
    assert topics.validate_pattern(topic) == topic  # every name is also a pattern
    assert topics.is_pattern(topic) is False


VALID_PATTERNS = [
    "*",
    ">",
    "A.*",
    "A.>",
    "*.B",
    "*.*.>",
    "A.*.C.>",
    "$ZB.>",
    "$ZB.*",
    ".".join(["*"] * MAX_TOPIC_SEGMENTS),
    ".".join(["*"] * (MAX_TOPIC_SEGMENTS - 1) + [">"]),
]


@pytest.mark.parametrize("pattern", VALID_PATTERNS)
def test_valid_patterns_are_returned_unchanged(pattern: str) -> None:
    assert topics.validate_pattern(pattern) == pattern
    assert topics.is_pattern(pattern) is True


# ---------------------------------------------------------------------------------------
# invalid names: InvalidTopic with a useful message
# ---------------------------------------------------------------------------------------

# (value, key phrase of the message); invalid both as a topic and as a pattern
INVALID_BOTH: list[tuple[object, str]] = [
    ("", "is empty"),
    (".", "has an empty segment at position 1"),
    (".A", "has an empty segment at position 1"),
    ("A.", "has an empty segment at position 2"),
    ("A..B", "has an empty segment at position 2"),
    ("A.B..", "has an empty segment at position 3"),
    ("A*", "wildcard '*' must stand alone in its segment"),
    ("*A", "wildcard '*' must stand alone in its segment"),
    ("A.B*C", "wildcard '*' must stand alone in its segment"),
    ("**", "wildcard '*' must stand alone in its segment"),
    ("A>", "wildcard '>' must stand alone in its segment"),
    ("A.>B", "wildcard '>' must stand alone in its segment"),
    (">>", "wildcard '>' must stand alone in its segment"),
    ("*>", "wildcard '*' must stand alone in its segment"),
    ("A B", "contains a forbidden character ' '"),
    (" A", "contains a forbidden character ' '"),
    ("A ", "contains a forbidden character ' '"),
    ("A\tB", "contains a forbidden character '\\t'"),
    ("A\nB", "contains a forbidden character '\\n'"),
    ("A\rB", "contains a forbidden character '\\r'"),
    ("A\x00B", "contains a forbidden character '\\x00'"),
    ("A\x01B", "contains a forbidden character '\\x01'"),
    ("A\x1bB", "contains a forbidden character '\\x1b'"),
    ("A\x1fB", "contains a forbidden character '\\x1f'"),
    ("A\x7fB", "contains a forbidden character '\\x7f'"),
    # non-ASCII control characters and whitespace are forbidden too
    ("A\x85B", "contains a forbidden character '\\x85'"),
    ("A\x9fB", "contains a forbidden character '\\x9f'"),
    ("A\xa0B", "contains a forbidden character '\\xa0'"),
    ("A\u2028B", "contains a forbidden character '\\u2028'"),
    ("A\u3000B", "contains a forbidden character '\\u3000'"),
    ("A\ud800B", "is not valid UTF-8"),
    ("A" * (MAX_TOPIC_BYTES + 1), f"is longer than {MAX_TOPIC_BYTES} bytes"),
    ("é" * (MAX_TOPIC_BYTES // 2) + "A", f"is longer than {MAX_TOPIC_BYTES} bytes"),
    (".".join(["A"] * (MAX_TOPIC_SEGMENTS + 1)), f"has more than {MAX_TOPIC_SEGMENTS} segments"),
    (None, "must be a string, not NoneType"),
    (b"A.B", "must be a string, not bytes"),
    (5, "must be a string, not int"),
    (["A"], "must be a string, not list"),
]


@pytest.mark.parametrize(("value", "phrase"), INVALID_BOTH)
def test_invalid_topic_names(value: object, phrase: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        topics.validate_topic(value)
    message = str(info.value)
    assert message.startswith("topic")
    assert phrase in message


@pytest.mark.parametrize(("value", "phrase"), INVALID_BOTH)
def test_invalid_patterns(value: object, phrase: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        topics.validate_pattern(value)
    message = str(info.value)
    assert message.startswith("pattern")
    assert phrase in message


@pytest.mark.parametrize(
    "value",
    ["A..B", "A B", "A*", "A\x00B", ".".join(["A"] * (MAX_TOPIC_SEGMENTS + 1))],
)
def test_message_quotes_the_offending_value(value: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        topics.validate_topic(value)
    assert repr(value) in str(info.value)


def test_too_long_message_quotes_a_prefix_only() -> None:
    value = "A" * 1000
    with pytest.raises(InvalidTopic) as info:
        topics.validate_topic(value)
    assert str(info.value) == f"topic {'A' * 40!r}... is longer than {MAX_TOPIC_BYTES} bytes"


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("*", "a topic name cannot contain wildcard '*'"),
        (">", "a topic name cannot contain wildcard '>'"),
        ("A.*", "a topic name cannot contain wildcard '*'"),
        ("A.>", "a topic name cannot contain wildcard '>'"),
        ("*.B", "a topic name cannot contain wildcard '*'"),
        ("$ZB.>", "a topic name cannot contain wildcard '>'"),
    ],
)
def test_wildcards_are_not_topic_names(value: str, phrase: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        topics.validate_topic(value)
    assert phrase in str(info.value)
    assert topics.validate_pattern(value) == value


@pytest.mark.parametrize("value", [">.A", "A.>.B", ">.>", ">.*", "A.>.>", ">.A.B.C"])
def test_gt_must_be_last(value: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        topics.validate_pattern(value)
    assert str(info.value) == (
        f"pattern {value!r}: '>' may only be the last segment (it matches the rest)"
    )


def test_invalid_topic_is_a_value_error_and_zbroker_error() -> None:
    with pytest.raises(ValueError):
        topics.validate_topic("")
    with pytest.raises(ZBrokerError):
        topics.validate_pattern("")


# ---------------------------------------------------------------------------------------
# reserved names
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["$ZB", "$ZB.X", "$ZB.STATUS.PEERS"])
def test_publish_to_reserved_is_refused(topic: str) -> None:
    assert topics.validate_topic(topic) == topic  # a valid name ...
    with pytest.raises(ReservedTopic) as info:  # ... but not for publishing
        topics.validate_publish_topic(topic)
    assert isinstance(info.value, InvalidTopic)
    assert str(info.value) == (
        f"topic {topic!r} is reserved for the node: clients cannot publish under $ZB."
    )


@pytest.mark.parametrize("topic", ["$ZBX.Y", "$ZBX", "$zb.X", "ZB.X", "A.$ZB", "A.$ZB.X", "$Z"])
def test_publish_to_non_reserved_is_allowed(topic: str) -> None:
    assert topics.validate_publish_topic(topic) == topic
    assert topics.is_reserved(topic) is False


@pytest.mark.parametrize(("topic", "phrase"), [("$ZB.*", "wildcard"), ("$ZB..X", "empty segment")])
def test_publish_invalid_reserved_name_is_invalid_not_reserved(topic: str, phrase: str) -> None:
    with pytest.raises(InvalidTopic) as info:
        topics.validate_publish_topic(topic)
    assert type(info.value) is InvalidTopic
    assert phrase in str(info.value)


@pytest.mark.parametrize("value", [None, 7, b"A"])
def test_publish_non_string(value: object) -> None:
    with pytest.raises(InvalidTopic, match="must be a string"):
        topics.validate_publish_topic(value)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("$ZB", True),
        ("$ZB.X", True),
        ("$ZB.X.Y", True),
        ("$ZBX", False),
        ("$ZBX.Y", False),
        ("X.$ZB", False),
        ("$Z", False),
    ],
)
def test_is_reserved(name: str, expected: bool) -> None:
    assert RESERVED_PREFIX == "$ZB"
    assert topics.is_reserved(name) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("A", False), ("A.B", False), ("*", True), (">", True), ("A.*.B", True), ("A.>", True)],
)
def test_is_pattern(value: str, expected: bool) -> None:
    assert topics.is_pattern(value) is expected


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


def _segment_is_clean(seg: str) -> bool:
    return bool(seg) and not any(
        c in "*>" or c.isspace() or unicodedata.category(c) in ("Cc", "Cs") for c in seg
    )


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.one_of(
            st.sampled_from("AB.*> \t\x00\x7f\x85\xa0"),
            st.characters(exclude_categories=()),  # includes surrogates
        ),
        max_size=12,
    )
)
def test_validate_topic_accepts_exactly_the_clean_names(value: str) -> None:
    ok = all(_segment_is_clean(seg) for seg in value.split("."))
    if ok:
        assert topics.validate_topic(value) == value
        assert topics.validate_pattern(value) == value
    else:
        with pytest.raises(InvalidTopic):
            topics.validate_topic(value)
