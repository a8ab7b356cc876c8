"""What a DURABLE_OPEN request may ask: its permission subject and its options, checked
(a string says what is wrong, for the error reply). A selector comes back as its
canonical text (:func:`zbroker.selectors.canonical`), or None."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...errors import InvalidTopic, SelectorError
from ...selectors import canonical
from ...store import OVERFLOW_POLICIES
from ...topics import validate_subscription

__all__ = ["open_options", "open_subjects"]

_I64 = 1 << 63


def open_subjects(body: dict[str, Any]) -> Iterable[tuple[str, str]]:
    pattern = body.get("pattern", ">")
    return (("subscribe", pattern),) if isinstance(pattern, str) else ()


def open_options(body: dict[str, Any]) -> dict[str, Any] | str:
    """DURABLE_OPEN's options, checked; a string says what is wrong."""
    pattern = body.get("pattern")
    credit = body.get("credit", 100)
    max_msgs = body.get("max_msgs", 0)
    max_bytes = body.get("max_bytes", 0)
    max_age = body.get("max_age", 0.0)
    overflow = body.get("overflow", "drop-oldest")
    shared = body.get("shared", False)
    if type(shared) is not bool:
        return "shared must be true or false"
    if overflow not in OVERFLOW_POLICIES:
        return f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}"
    try:
        validate_subscription(pattern)  # (not in the nodes' internal branches)
    except InvalidTopic as exc:
        return str(exc)
    if type(credit) is not int or not 1 <= credit <= 100_000:
        return "credit must be an integer in 1..100000"
    if type(max_msgs) is not int or not 0 <= max_msgs < _I64:
        return "max_msgs must be a non-negative integer"
    if type(max_bytes) is not int or not 0 <= max_bytes < _I64:
        return "max_bytes must be a non-negative integer"
    if type(max_age) not in (int, float) or not 0 <= max_age < 1e10:
        return "max_age must be a non-negative number of seconds"
    selector = body.get("selector")
    if selector is not None:
        if not isinstance(selector, str):
            return "selector must be a string"
        try:
            selector = canonical(selector)
        except SelectorError as exc:
            return f"bad selector: {exc}"
    return {
        "pattern": pattern,
        "credit": credit,
        "max_msgs": max_msgs,
        "max_bytes": max_bytes,
        "max_age": float(max_age),
        "overflow": str(overflow),
        "shared": shared,
        "selector": selector,
    }
