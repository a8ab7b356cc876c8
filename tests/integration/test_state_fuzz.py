"""Bad input to topics with state: malformed STATE_* requests and STATE_QUERY,
STATE_ANSWER, MISSING_ASK, MISSING_REPLY link frames are counted and dropped (or
answered with an error), never a crash; the checks raise only ProtocolError."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.errors import ProtocolError
from zbroker.wire import frames
from zbroker.wire import state as wstate

from .fuzz_common import RawPeer, bad_reasons, counters, raw  # noqa: F401  (raw: a fixture)

_ANY = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)

CHECKS = {
    wire.STATE_QUERY: wstate.check_query,
    wire.STATE_ANSWER: wstate.check_answer,
    frames.MISSING_ASK: wstate.check_missing_ask,
    frames.MISSING_REPLY: wstate.check_missing_reply,
}


@given(kind=st.sampled_from(sorted(CHECKS)), rest=st.lists(_ANY, max_size=7))
@settings(max_examples=400, deadline=None)
def test_the_checks_raise_only_protocol_error(kind: int, rest: list[Any]) -> None:
    try:
        CHECKS[kind]([kind, *rest])
    except ProtocolError:
        pass


VALUE = ["T.a", b"x", 0, None, 5, "N", 1.0, None]


@given(i=st.integers(0, 7), junk=_ANY)
@settings(max_examples=300, deadline=None)
def test_a_value_with_any_field_wrong_is_refused_or_valid(i: int, junk: Any) -> None:
    v = list(VALUE)
    v[i] = junk
    try:
        wstate.check_value(v)
    except ProtocolError:
        pass


@pytest.mark.parametrize(
    ("i", "bad"),
    [(2, True), (2, 1.0), (6, math.nan), (6, math.inf), (6, 2**70)],
    ids=["fmt-true", "fmt-float", "updated-nan", "updated-inf", "updated-huge"],
)
def test_a_value_whose_fmt_or_time_is_not_one_is_refused(i: int, bad: Any) -> None:
    """Was: taken (True and 1.0 are "in" (0, 1)): a replica stored and published a
    message with fmt 1.0, which the next node refuses as bad_type."""
    v = list(VALUE)
    v[i] = bad
    with pytest.raises(ProtocolError):
        wstate.check_value(v)


def test_valid_frames_pass() -> None:
    q = ("q1", "snapshot", "T.>", "N")
    assert wstate.check_query([55, *q]) == (*q, None)  # (no budget: the relay timeout)
    assert wstate.check_query([55, *q, 1500]) == (*q, 1500)
    assert wstate.check_answer([56, "q1", [VALUE], [["T.b", 3, "N"]], 0, True])[0] == "q1"
    assert wstate.check_answer([56, "q1", [], [], 0, True])[5] is False
    assert wstate.check_answer([56, "q1", [], [], 0, True, True])[5] is True  # (cut)
    assert wstate.check_missing_ask([57, "m", "T.x", "N"]) == ("m", "T.x", "N", ())
    assert wstate.check_missing_ask([57, "m", "T.x", "N", ["N", "P"]]) == (
        "m",
        "T.x",
        "N",
        ("N", "P"),
    )
    assert wstate.check_missing_reply([58, "m", "none"]) == ("m", "none")


BAD_LINK_FRAMES: list[list[Any]] = [
    [wire.STATE_QUERY],
    [wire.STATE_QUERY, "q", "explode", "T.>", "N"],
    [wire.STATE_QUERY, "q", "fetch", "T..>", "N"],
    [wire.STATE_QUERY, "q", "fetch", "T.>", 7],
    [wire.STATE_QUERY, "q", "fetch", "T.>", "N", -1],
    [wire.STATE_QUERY, "q", "fetch", "T.>", "N", 1.5],
    [wire.STATE_ANSWER, "q", [["T.a"]], [], 0, True],
    [wire.STATE_ANSWER, "q", [], [], -1, True],
    [wire.STATE_ANSWER, "q", [[*VALUE[:7], 3]], [], 0, True],
    [wire.STATE_ANSWER, "q", [[*VALUE[:2], 1.0, *VALUE[3:]]], [], 0, True],
    [wire.STATE_ANSWER, "q", [], [], 0, True, 1],
    [frames.MISSING_ASK, "m", "T.>"],
    [frames.MISSING_ASK, "m", ">.T", "N"],
    [frames.MISSING_ASK, "m", "T.>", "N", "P"],
    [frames.MISSING_ASK, "m", "T.>", "N", ["bad name"]],
    [frames.MISSING_ASK, "m", "T.>", "N", ["P"] * 256],
    [frames.MISSING_REPLY, "m", "maybe"],
]

BAD_REQUESTS: list[tuple[int, dict[str, Any]]] = [
    (wire.STATE_SET, {}),
    (wire.STATE_SET, {"topic": "T.a", "payload": "not bytes", "fmt": 0}),
    (wire.STATE_SET, {"topic": "T.a", "payload": b"", "fmt": 9}),
    (wire.STATE_SET, {"topic": "T.a", "payload": b"", "fmt": 0, "headers": {1: 2}}),
    (wire.STATE_SET, {"topic": "$ZB.x", "payload": b"", "fmt": 0}),
    (wire.STATE_REMOVE, {"pattern": ["T"]}),
    (wire.STATE_FETCH, {"pattern": ""}),
    (wire.STATE_HANDLER, {"branch": None}),
]


def test_the_node_survives_bad_state_input(raw: RawPeer) -> None:  # noqa: F811
    b = raw.b
    raw.handshake()
    before = bad_reasons(counters(b))
    for frame in BAD_LINK_FRAMES:
        raw.link.send(wire.encode_link(*frame))
    raw.link.send(wire.encode_link(wire.STATE_ANSWER, "unknown", [], [], 0, True))  # ignored
    raw.link.send(wire.encode_link(frames.MISSING_REPLY, "unknown", "cancel"))  # ignored
    assert raw.ping(raw.link)
    after = bad_reasons(counters(b))
    assert sum(after.values()) - sum(before.values()) == len(BAD_LINK_FRAMES)
    for i, (op, body) in enumerate(BAD_REQUESTS, start=10):
        reply = raw.request(op, body, req_id=i)
        assert reply is not None and reply[0] == wire.ERROR, (op, body, reply)
    raw.control.send(wire.encode_control(wire.STATE_MISSING, 0, {"id": [1], "verdict": 3}))
    assert raw.ping()
    # and a valid query on the link is answered
    raw.link.send(wire.encode_link(wire.STATE_QUERY, "ok1", "fetch", ">", "RAWPEER"))
    answer = raw.expect(raw.link, lambda v: v[0] == wire.STATE_ANSWER)
    assert answer == [wire.STATE_ANSWER, "ok1", [], [], 0, True]
    assert b.status()["state"]["queries_pending"] == 0
