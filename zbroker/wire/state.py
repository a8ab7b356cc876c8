"""The frames of topics with state: STATE_QUERY and STATE_ANSWER (link), and the checks
of the values they and the STATE_* requests carry. Layouts are in :mod:`.frames`."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidTopic, ProtocolError
from ..names import validate_broker_id
from ..topics import validate_pattern, validate_topic
from .frames import FMTS, I64, STATE_ANSWER, STATE_QUERY, TS_MAX
from .link import encode_link

__all__ = [
    "QUERY_KINDS",
    "VERDICTS",
    "check_answer",
    "check_gone",
    "check_missing_ask",
    "check_missing_reply",
    "check_query",
    "check_value",
    "encode_answer",
    "encode_query",
]

QUERY_KINDS = ("fetch", "snapshot", "remove")


def encode_query(qid: str, kind: str, pattern: str, origin: str, budget_ms: int) -> bytes:
    """``budget_ms``: how long the sender still waits for this answer (relative: clocks
    differ between nodes), so the receiver gives up before it does."""
    return encode_link(STATE_QUERY, qid, kind, pattern, origin, max(0, budget_ms))


def encode_answer(
    qid: str, values: list[Any], gone: list[Any], removed: int, last: bool, cut: bool = False
) -> bytes:
    """``cut`` (a part is missing: a deadline passed) is sent only when true."""
    if cut:
        return encode_link(STATE_ANSWER, qid, values, gone, removed, last, True)
    return encode_link(STATE_ANSWER, qid, values, gone, removed, last)


def check_query(value: list[Any]) -> tuple[str, str, str, str, int | None]:
    """``[55, qid, kind, pattern, origin(, budget_ms)]`` -> (qid, kind, pattern, origin,
    budget_ms or None: a sender that did not say)."""
    if (
        len(value) not in (5, 6)
        or not all(type(v) is str for v in value[1:5])
        or (len(value) == 6 and (type(value[5]) is not int or not 0 <= value[5] < I64))
    ):
        raise ProtocolError(
            "bad_shape", "STATE_QUERY must be [55, qid, kind, pattern, origin(, budget_ms)]"
        )
    qid, kind, pattern, origin = value[1:5]
    budget = value[5] if len(value) == 6 else None
    if kind not in QUERY_KINDS or not 0 < len(qid) <= 200:
        raise ProtocolError("bad_value", f"STATE_QUERY kind {kind!r} or qid unknown")
    try:
        validate_pattern(pattern)
        validate_broker_id(origin)
    except Exception as exc:
        raise ProtocolError("bad_value", f"STATE_QUERY: {exc}") from exc
    return qid, kind, pattern, origin, budget


def check_answer(value: list[Any]) -> tuple[str, list[Any], list[Any], int, bool, bool]:
    """``[56, qid, values, gone, removed, last(, cut)]``, every value and removal checked:
    (qid, values, gone, removed, last, cut)."""
    if (
        len(value) not in (6, 7)
        or type(value[1]) is not str
        or type(value[2]) is not list
        or type(value[3]) is not list
        or type(value[4]) is not int
        or not 0 <= value[4] < I64
        or type(value[5]) is not bool
        or (len(value) == 7 and type(value[6]) is not bool)
    ):
        raise ProtocolError(
            "bad_shape", "STATE_ANSWER must be [56, qid, values, gone, removed, last(, cut)]"
        )
    for v in value[2]:
        check_value(v)
    for g in value[3]:
        check_gone(g)
    return value[1], value[2], value[3], value[4], value[5], len(value) == 7 and value[6]


VERDICTS = ("proceed", "cancel", "none")


#: nodes a MISSING_ASK may have passed (as a link's ttl is at most 255 hops)
MISSING_PATH_MAX = 255


def check_missing_ask(value: list[Any]) -> tuple[str, str, str, tuple[str, ...]]:
    """``[57, mid, pattern, node(, path)]``: ``path`` the nodes that asked on the way,
    the sender last (a node before it was added sends none)."""
    path = value[4] if len(value) == 5 else []
    if (
        len(value) not in (4, 5)
        or not all(type(v) is str for v in value[1:4])
        or type(path) is not list
        or len(path) > MISSING_PATH_MAX
        or not all(type(n) is str for n in path)
    ):
        raise ProtocolError("bad_shape", "MISSING_ASK must be [57, mid, pattern, node(, path)]")
    try:
        validate_pattern(value[2])
        validate_broker_id(value[3])
        for n in path:
            validate_broker_id(n)
    except Exception as exc:
        raise ProtocolError("bad_value", f"MISSING_ASK: {exc}") from exc
    return value[1], value[2], value[3], tuple(path)


def check_missing_reply(value: list[Any]) -> tuple[str, str]:
    """``[58, mid, verdict]``."""
    if len(value) != 3 or type(value[1]) is not str or value[2] not in VERDICTS:
        raise ProtocolError("bad_shape", "MISSING_REPLY must be [58, mid, verdict]")
    return value[1], value[2]


def check_value(v: Any) -> None:
    """``[topic, payload, fmt, headers, version, owner, updated, replica_of]``."""
    if (
        type(v) is not list
        or len(v) != 8
        or type(v[0]) is not str
        or type(v[1]) is not bytes
        or type(v[2]) is not int  # (True and 1.0 are "in" FMTS too)
        or v[2] not in FMTS
        or not (v[3] is None or (type(v[3]) is dict and all(type(k) is str for k in v[3])))
        or type(v[4]) is not int
        or not 0 <= v[4] < I64
        or type(v[5]) is not str
        or type(v[6]) not in (int, float)
        or not -TS_MAX < v[6] < TS_MAX  # (a time: NaN and the infinities are not)
        or not (v[7] is None or type(v[7]) is str)
    ):
        raise ProtocolError("bad_value", "a state value has wrong fields")
    try:
        validate_topic(v[0])
    except InvalidTopic as exc:
        raise ProtocolError("bad_value", f"state value: {exc}") from exc


def check_gone(g: Any) -> None:
    """``[topic, version, owner]`` of a removal."""
    if (
        type(g) is not list
        or len(g) != 3
        or type(g[0]) is not str
        or type(g[1]) is not int
        or not 0 <= g[1] < I64
        or type(g[2]) is not str
    ):
        raise ProtocolError("bad_value", "a state removal has wrong fields")
