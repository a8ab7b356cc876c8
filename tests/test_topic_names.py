"""Unit tests for zbroker.topics' naming rules: valid topics and patterns come back
unchanged, invalid ones raise InvalidTopic with a message that quotes them, reserved names
($ZB) raise ReservedTopic on publish, and validate_topic accepts exactly the clean names."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import topics
from zbroker.const import MAX_TOPIC_BYTES, MAX_TOPIC_SEGMENTS, RESERVED_PREFIX
from zbroker.errors import InvalidTopic, ReservedTopic, ZBrokerError

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
# properties
# ---------------------------------------------------------------------------------------


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
