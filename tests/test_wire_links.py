"""Property tests of the link frames' codec in zbroker.wire (types 16-22).

* Valid values of every link frame type round-trip through ``encode_link`` and
  ``decode_frame``, and the per-type checkers (``check_link_map`` for LINK_HELLO,
  LINK_WELCOME, LINK_REFUSE and BYE; ``decode_advert``; ``check_link_msg`` for each MSGS
  entry) accept them and return what was encoded.
* Anything else (random bytes, any msgpack value after any type number, mutated valid
  frames) either decodes or raises :class:`ProtocolError` with a documented reason, never
  another exception; and what a checker accepts has the documented types.

The store-and-forward frames (types 25-26), sticky and held ADVERT entries and GAP frames:
``tests/test_wire_forward.py``.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.link_frames import (
    ADVERT_ENTRY,
    ANY,
    INT64,
    MAP_FRAMES,
    MSG,
    protocol_error_only,
    valid_frame,
)
from zbroker import wire
from zbroker.errors import ProtocolError

pack = msgpack.packb

# ---------------------------------------------------------------------------------------
# round trips of valid values
# ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(frame=MAP_FRAMES)
def test_map_frames_round_trip(frame: tuple[int, dict[str, Any]]) -> None:
    kind, info = frame
    value = wire.decode_frame(wire.encode_link(kind, info))
    assert value == [kind, info]
    assert wire.check_link_map(value) == info


def test_heartbeat_round_trip() -> None:
    assert wire.decode_frame(wire.encode_link(wire.HEARTBEAT)) == [wire.HEARTBEAT]
    assert wire.encode_link(wire.HEARTBEAT) == bytes([0x91, wire.HEARTBEAT])


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), entries=st.lists(ADVERT_ENTRY, max_size=6))
def test_advert_round_trip(full: bool, entries: list[list[Any]]) -> None:
    value = wire.decode_frame(wire.encode_link(wire.ADVERT, full, entries))
    assert value == [wire.ADVERT, full, entries]
    assert wire.decode_advert(value) == (
        full,
        tuple((p, o, None if path is None else tuple(path)) for p, o, path in entries),
    )


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(MSG, max_size=6))
def test_msgs_round_trip(batch: list[list[Any]]) -> None:
    value = wire.decode_frame(wire.encode_link(wire.MSGS, batch))
    assert value == [wire.MSGS, batch]
    for m in value[1]:
        wire.check_link_msg(m)  # raises nothing


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(MSG, max_size=8), share=st.booleans())
def test_msgr_carries_what_msgs_carries(batch: list[list[Any]], share: bool) -> None:
    """The same messages as MSGS and as MSGR runs: the same checked messages, and a
    flood's messages (one topic, origin, incarnation, path, targets) are one run."""
    if share:
        for m in batch[1:]:
            m[0], m[4], m[5], m[8], m[9] = batch[0][0], *batch[0][4:6], *batch[0][8:]
    errors: list[tuple[str, str]] = []
    msgs = wire.decode_frame(wire.encode_link(wire.MSGS, batch))[1]
    wire.check_msgs(msgs, (set(), set(), None), errors)
    runs = wire.runs_of_msgs(msgs)
    value = wire.decode_frame(wire.encode_link(wire.MSGR, runs))
    assert value[0] == wire.MSGR and wire.held(value[1]) == len(batch)
    wire.check_runs(value[1], (set(), set(), None), errors)
    assert errors == []
    flat = [
        [r[0], *e[:3], r[1], r[2], *e[3:], list(r[3]), None if r[4] is None else list(r[4])]
        for r in value[1]
        for e in r[5]
    ]
    assert flat == batch
    # one run per change of (topic, origin, incarnation, path, targets) from the last
    heads = [(m[0], m[4], m[5], m[8], m[9]) for m in batch]
    assert len(runs) == sum(1 for i, h in enumerate(heads) if i == 0 or h != heads[i - 1])


def test_a_bad_run_counts_each_message_and_a_bad_entry_only_itself() -> None:
    good = [b"p", 0, None, 1, 1.0]
    runs: list[Any] = [
        ["T.a", "A", 1, ["A"], None, [list(good), [b"p", 2, None, 2, 1.0], list(good)]],
        ["T.a", "A", -1, ["A"], None, [list(good), list(good)]],  # incarnation < 0
        ["T.a", "A", 1, ["A", 7], None, [list(good)]],  # a path of non-strings
        ["T.a", "A", 1, [["A"]], None, [list(good)]],  # unhashable in the path
        ["bad topic", "A", 1, ["A"], None, [list(good)]],
        ["T.a", "A", 1, ["A"]],  # no entries
        ["T.a", "A", 1, ["A"], None, []],  # empty: one message's worth of bad input
        "not a run",
    ]
    assert wire.held(runs) == 3 + 2 + 1 + 1 + 1 + 1 + 1 + 1
    errors: list[tuple[str, str]] = []
    wire.check_runs(runs, (set(), set(), set()), errors)
    assert [r for r, _ in errors] == [
        "bad_type",  # fmt 2, alone
        "bad_value",
        "bad_value",
        "bad_type",
        "bad_type",
        "bad_topic",
        "bad_shape",
        "bad_shape",
        "bad_shape",
    ]
    assert runs[0][3] == ("A",) and runs[0][5] == [good, None, good]
    assert runs[1:] == [None] * 7


# ---------------------------------------------------------------------------------------
# anything else: decodes, or ProtocolError with a documented reason
# ---------------------------------------------------------------------------------------


def _check_every_way(value: list[Any]) -> None:
    """Run every link checker on a decoded frame; accepted values have the documented
    types."""
    if protocol_error_only(lambda: wire.check_link_map(value), {"bad_shape"}):
        assert len(value) == 2 and type(value[1]) is dict
    if protocol_error_only(
        lambda: wire.decode_advert(value), {"bad_shape", "bad_type", "bad_advert"}
    ):
        full, entries = wire.decode_advert(value)
        assert type(full) is bool
        for pattern, origin, path in entries:
            assert type(pattern) is str and type(origin) is str
            assert path is None or all(type(p) is str for p in path)
    for m in value[1:]:
        _check_msg(m)
        if type(m) is list:
            for inner in m:
                _check_msg(inner)


def _check_msg(m: Any) -> None:
    if protocol_error_only(lambda: wire.check_link_msg(m), {"bad_shape", "bad_type", "bad_value"}):
        topic, payload, fmt, headers, origin, inc, seq, ts, path, targets = m
        assert type(topic) is str and type(payload) is bytes and type(origin) is str
        assert type(fmt) is int and fmt in (wire.FMT_BYTES, wire.FMT_MSGPACK)
        assert headers is None or type(headers) is dict
        assert type(inc) is int and type(seq) is int and type(ts) in (int, float)
        assert type(path) is list and (targets is None or type(targets) is list)


def _decode_and_check(frame: bytes) -> None:
    try:
        value = wire.decode_frame(frame)
    except ProtocolError as exc:
        assert exc.reason in {"not_msgpack", "bad_shape"}, exc.reason
        return
    assert type(value) is list and value and type(value[0]) is int
    _check_every_way(value)


@settings(max_examples=300, deadline=None)
@given(frame=st.binary(max_size=200))
def test_random_bytes_raise_only_protocol_error(frame: bytes) -> None:
    _decode_and_check(frame)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.one_of(st.integers(16, 22), INT64, ANY),
    rest=st.lists(ANY, max_size=4),
)
def test_any_msgpack_after_any_type_raises_only_protocol_error(kind: Any, rest: list[Any]) -> None:
    _decode_and_check(pack([kind, *rest]))


@settings(max_examples=300, deadline=None)
@given(
    kind=st.integers(16, 22),
    entries=st.lists(
        st.one_of(
            ANY,
            # one field of a valid entry replaced by anything: reaches every type check
            st.tuples(MSG, st.integers(0, 9), ANY).map(
                lambda t: [*t[0][: t[1]], t[2], *t[0][t[1] + 1 :]]
            ),
            st.tuples(ADVERT_ENTRY, st.integers(0, 2), ANY).map(
                lambda t: [*t[0][: t[1]], t[2], *t[0][t[1] + 1 :]]
            ),
        ),
        max_size=4,
    ),
    full=st.one_of(st.booleans(), ANY),
)
def test_wrong_fields_raise_only_protocol_error(kind: int, entries: list[Any], full: Any) -> None:
    _decode_and_check(pack([kind, entries]))
    _decode_and_check(pack([kind, full, entries]))


@settings(max_examples=300, deadline=None)
@given(
    frame=valid_frame(),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
    tail=st.binary(max_size=4),
)
def test_mutated_valid_frames_raise_only_protocol_error(
    frame: bytes, flips: list[tuple[int, int]], cut: int | None, tail: bytes
) -> None:
    data = bytearray(frame)
    for pos, bit in flips:
        data[pos % len(data)] ^= 1 << bit
    if cut is not None:
        del data[cut % len(data) :]
    _decode_and_check(bytes(data))
    _decode_and_check(bytes(data) + tail)
    _decode_and_check(frame + tail)


_MALFORMED = {
    "empty": b"",
    "never-used": b"\xc1",
    "short-array": b"\x91",
    "empty-array": b"\x90",
    "str-type": b"\x91\xa1x",
    "nil-type": b"\x91\xc0",
    "trailing": b"\x91\x15\x00",
    "unhashable-map-key": b"\x81\x90\x00",
}


@pytest.mark.parametrize("frame", list(_MALFORMED.values()), ids=list(_MALFORMED))
def test_malformed_examples(frame: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_frame(frame)
    assert info.value.reason in {"not_msgpack", "bad_shape"}


@pytest.mark.parametrize("fmt", [True, False, 1.0, 0.0, 2, -1, "1", None])
def test_check_link_msg_refuses_any_fmt_but_the_integers_0_and_1(fmt: Any) -> None:
    """Was: True, False, 1.0 and 0.0 passed (they compare equal to 0 or 1), though
    decode_publish refuses them."""
    m = ["T.x", b"", fmt, None, "o", 1, 1, 1.0, ["o"], None]
    with pytest.raises(ProtocolError) as info:
        wire.check_link_msg(m)
    assert info.value.reason == "bad_type"
