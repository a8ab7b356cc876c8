"""Topic names and subscription patterns: the naming rules, validation and single matching.

Rules (the syntax of ActiveMQ's destination wildcards, also used by NATS):

* A **topic name** is one or more dot-separated segments: ``PRICE.STOCK.NYSE.IBM``.
  A segment is non-empty and holds no whitespace, no control character, no ``*``, ``>``
  or NUL. Names are at most :data:`~zbroker.const.MAX_TOPIC_BYTES` bytes of UTF-8 and
  :data:`~zbroker.const.MAX_TOPIC_SEGMENTS` segments.
* A **pattern** is a name whose segments may also be ``*`` (exactly one segment) or, as the
  last segment only, ``>`` (one or more remaining segments). ``*`` and ``>`` must stand
  alone in their segment: ``PRICE.NY*`` is an error, not a prefix match.
* Names under ``$ZB`` (``$ZB`` itself and ``$ZB.anything``) are reserved for the node:
  clients may subscribe to them, not publish. A pattern whose first segment is a wildcard
  (``>``, ``*.X``) does not match them (MQTT's rule for ``$SYS``): the node's advisories
  and STATS reach only who asks for them by name (``$ZB.ADVISORY.>``), never a catch-all
  subscriber, retain rule or durable. The *internal* branches among them
  (:data:`~zbroker.const.INTERNAL_PREFIXES`: ``$ZB.Q.``, ``$ZB.DURABLE.``, ``$ZB.SD.``,
  ``$ZB.HOST.``) are the nodes' own: a client may not subscribe there either
  (:func:`validate_subscription`), for its interest would pass for a queue group's, a
  durable's home or a topic host; and their topics match only patterns that name the
  branch (no wildcard in the second segment), so ``$ZB.>`` watches the node without
  drawing the nodes' own traffic (:func:`match`, and the same rule in
  :mod:`zbroker.sublist` and :func:`zbroker.routing.filters.pattern_covers`).

Every function that takes a name from outside the process calls :func:`validate_topic` or
:func:`validate_pattern`; both raise :class:`~zbroker.errors.InvalidTopic` with a message
that says what is wrong.
"""

from __future__ import annotations

import re

from .const import (
    INTERNAL_BRANCHES,
    INTERNAL_PREFIXES,
    MAX_TOPIC_BYTES,
    MAX_TOPIC_SEGMENTS,
    RESERVED_PREFIX,
)
from .errors import InvalidTopic, ReservedTopic

__all__ = [
    "is_internal",
    "is_pattern",
    "is_reserved",
    "match",
    "patterns_overlap",
    "validate_pattern",
    "validate_publish_topic",
    "validate_subscription",
    "validate_topic",
]

# Characters that may not appear inside a segment: separators, wildcards, NUL (the frame
# delimiter on the delivery socket), whitespace and other control characters (the C0 and C1
# ranges and DEL; ``\s`` also covers Unicode whitespace such as U+00A0 and U+3000).
_WILDCARDS = ("*", ">")
_BAD_CHAR = re.compile(r"[\x00-\x20\x7f-\x9f\s*>]")


def _check_common(value: object, what: str) -> list[str]:
    if not isinstance(value, str):
        raise InvalidTopic(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidTopic(f"{what} is empty")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES:
        raise InvalidTopic(f"{what} {value[:40]!r}... is longer than {MAX_TOPIC_BYTES} bytes")
    segments = value.split(".")
    if len(segments) > MAX_TOPIC_SEGMENTS:
        raise InvalidTopic(f"{what} {value!r} has more than {MAX_TOPIC_SEGMENTS} segments")
    return segments


def _check_segment(value: str, what: str, segment: str, index: int) -> None:
    if not segment:
        raise InvalidTopic(f"{what} {value!r} has an empty segment at position {index + 1}")
    bad = _BAD_CHAR.search(segment)
    if bad is not None:
        char = bad.group()
        if char in "*>":
            raise InvalidTopic(
                f"{what} {value!r}: wildcard {char!r} must stand alone in its segment"
                if len(segment) > 1
                else f"{what} {value!r}: a topic name cannot contain wildcard {char!r}"
            )
        raise InvalidTopic(f"{what} {value!r} contains a forbidden character {char!r}")
    try:
        segment.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTopic(f"{what} {value!r} is not valid UTF-8") from exc


def validate_topic(value: object) -> str:
    """Return ``value`` if it is a valid topic name (no wildcards), else raise InvalidTopic."""
    segments = _check_common(value, "topic")
    assert isinstance(value, str)
    for i, seg in enumerate(segments):
        _check_segment(value, "topic", seg, i)
    return value


def validate_publish_topic(value: object) -> str:
    """Validate a topic a client publishes to: a valid name outside the reserved ``$ZB``."""
    topic = validate_topic(value)
    if is_reserved(topic):
        raise ReservedTopic(
            f"topic {topic!r} is reserved for the node: clients cannot publish under "
            f"{RESERVED_PREFIX}."
        )
    return topic


def validate_pattern(value: object) -> str:
    """Return ``value`` if it is a valid subscription pattern, else raise InvalidTopic."""
    segments = _check_common(value, "pattern")
    assert isinstance(value, str)
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if seg == "*":
            continue
        if seg == ">":
            if i != last:
                raise InvalidTopic(
                    f"pattern {value!r}: '>' may only be the last segment (it matches the rest)"
                )
            continue
        _check_segment(value, "pattern", seg, i)
    return value


def is_pattern(value: str) -> bool:
    """True if ``value`` (already valid) has a wildcard segment."""
    return any(seg in ("*", ">") for seg in value.split("."))


def validate_subscription(value: object) -> str:
    """Validate a pattern a client subscribes to (plainly, durably or in a queue group): a
    valid pattern outside the nodes' internal branches (:func:`is_internal`)."""
    pattern = validate_pattern(value)
    if is_internal(pattern):
        raise ReservedTopic(
            f"pattern {pattern!r} is internal to the nodes (queue groups, durable homes, "
            f"shared durables, topic hosts: {', '.join(INTERNAL_PREFIXES)}): clients "
            "cannot subscribe there"
        )
    return pattern


def is_internal(pattern: str) -> bool:
    """True for a name or pattern in an internal branch of ``$ZB`` (its first two segments
    one of :data:`~zbroker.const.INTERNAL_PREFIXES`)."""
    return pattern.startswith(INTERNAL_PREFIXES) or pattern + "." in INTERNAL_PREFIXES


def is_reserved(topic: str) -> bool:
    """True for ``$ZB`` and every name under ``$ZB.``."""
    return topic == RESERVED_PREFIX or topic.startswith(RESERVED_PREFIX + ".")


def match(pattern: str, topic: str) -> bool:
    """True if literal ``topic`` matches ``pattern`` (both assumed valid)."""
    p = pattern.split(".")
    t = topic.split(".")
    if t[0] == RESERVED_PREFIX and p[0] in _WILDCARDS:
        return False  # reserved topics match only patterns that name them
    if _internal_wild(p, t):
        return False  # and internal branches only patterns that name them too
    for i, seg in enumerate(p):
        if seg == ">":
            return len(t) > i
        if i >= len(t):
            return False
        if seg != "*" and seg != t[i]:
            return False
    return len(p) == len(t)


def _internal_wild(p: list[str], t: list[str]) -> bool:
    """``t`` (segments) names an internal branch of ``$ZB`` and ``p`` has a wildcard where
    the branch is named (such a pattern matches none of its topics)."""
    return (
        len(t) > 1
        and t[0] == RESERVED_PREFIX
        and t[1] in INTERNAL_BRANCHES
        and len(p) > 1
        and p[0] == RESERVED_PREFIX
        and p[1] in _WILDCARDS
    )


def patterns_overlap(a: str, b: str) -> bool:
    """True if some topic name matches both patterns ``a`` and ``b``."""
    pa = a.split(".")
    pb = b.split(".")
    if (pa[0] in _WILDCARDS and pb[0] == RESERVED_PREFIX) or (
        pb[0] in _WILDCARDS and pa[0] == RESERVED_PREFIX
    ):
        return False  # a leading wildcard matches no reserved topic (see match)
    if _internal_wild(pa, pb) or _internal_wild(pb, pa):
        return False  # nor a wildcard after $ZB an internal branch (see match)
    for i in range(max(len(pa), len(pb))):
        sa = pa[i] if i < len(pa) else None
        sb = pb[i] if i < len(pb) else None
        if sa == ">" or sb == ">":
            # '>' needs at least one more segment; the other side has one here or has '>'.
            return sa is not None and sb is not None
        if sa is None or sb is None:
            return False
        if sa != "*" and sb != "*" and sa != sb:
            return False
    return True
