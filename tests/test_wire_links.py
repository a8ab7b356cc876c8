"""Property tests of the link frames' codec in zbroker.wire (types 16-22, 25-26).

* Valid values of every link frame type round-trip through ``encode_link`` and
  ``decode_frame``, and the per-type checkers (``check_link_map`` for LINK_HELLO,
  LINK_WELCOME, LINK_REFUSE and BYE; ``decode_advert``; ``check_link_msg`` for each MSGS
  entry) accept them and return what was encoded.
* Anything else (random bytes, any msgpack value after any type number, mutated valid
  frames) either decodes or raises :class:`ProtocolError` with a documented reason, never
  another exception; and what a checker accepts has the documented types.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.const import PROTOCOL_VERSION
from zbroker.errors import ProtocolError

pack = msgpack.packb

# ---------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------

_INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_FLOAT = st.floats(allow_nan=False)  # NaN != NaN: round trips compare with ==
_TEXT = st.text(max_size=20)
_ID = st.text(alphabet=string.ascii_letters + string.digits + "_.-", min_size=1, max_size=20)
_LEAF = st.one_of(st.none(), st.booleans(), _INT64, _FLOAT, _TEXT, st.binary(max_size=20))
# what msgpack round-trips to an equal value (lists, not tuples; maps with str keys)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=6,
)
# any msgpack value, including maps with non-string keys and ext types: for fuzzing
_ANY = st.recursive(
    st.one_of(_LEAF, st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.binary(max_size=4), _INT64), inner, max_size=4
        ),
    ),
    max_leaves=10,
)
_PATTERNS = st.lists(_TEXT, max_size=3)
_SECONDS = st.floats(min_value=0.001, max_value=86_000, allow_nan=False)

_HELLO = st.fixed_dictionaries(
    {
        "id": _ID,
        "incarnation": _INT64,
        "group": _ID,
        "version": st.just(PROTOCOL_VERSION),
        "name": _ID,
        "duplex": st.booleans(),
        "ttl": st.integers(1, 255),
        "conduit": st.booleans(),
        "include": _PATTERNS,
        "exclude": _PATTERNS,
        "static": _PATTERNS,
        "heartbeat_interval": _SECONDS,
        "heartbeat_timeout": _SECONDS,
    }
)
_WELCOME = st.fixed_dictionaries(
    {"id": _ID, "incarnation": _INT64, "group": _ID, "version": st.just(PROTOCOL_VERSION)}
)
_REFUSE = st.fixed_dictionaries({"reason": _TEXT, "retry": st.booleans()})
_BYE = st.fixed_dictionaries({"reason": _TEXT})
_MAP_FRAMES = st.one_of(
    st.tuples(st.just(wire.LINK_HELLO), _HELLO),
    st.tuples(st.just(wire.LINK_WELCOME), _WELCOME),
    st.tuples(st.just(wire.LINK_REFUSE), _REFUSE),
    st.tuples(st.just(wire.BYE), _BYE),
)
_ADVERT_ENTRY = st.tuples(_TEXT, _ID, st.one_of(st.none(), st.lists(_ID, max_size=4))).map(list)
_HEADERS = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), _VALUE, max_size=4))
_U63 = st.integers(min_value=0, max_value=2**63 - 1)
_TS = st.floats(min_value=-1e15, max_value=1e15, exclude_min=True, exclude_max=True)
_MSG = st.tuples(
    _TEXT,  # topic (the node checks topic rules, not the codec)
    st.binary(max_size=40),  # payload
    st.sampled_from([wire.FMT_BYTES, wire.FMT_MSGPACK]),
    _HEADERS,
    _ID,  # origin
    _U63,  # incarnation (what the store can hold: a signed 64-bit INTEGER)
    _U63,  # seq
    st.one_of(_TS, st.integers(-(10**15) + 1, 10**15 - 1)),  # ts (finite, |ts| < 1e15)
    st.lists(_ID, max_size=4),  # path
    st.one_of(st.none(), st.lists(_ID, max_size=4)),  # targets
).map(list)


def _valid_frame() -> st.SearchStrategy[bytes]:
    """An encoded valid frame of any link type."""
    return st.one_of(
        _MAP_FRAMES.map(lambda t: wire.encode_link(*t)),
        st.just(wire.encode_link(wire.HEARTBEAT)),
        st.tuples(st.booleans(), st.lists(_ADVERT_ENTRY, max_size=4)).map(
            lambda t: wire.encode_link(wire.ADVERT, *t)
        ),
        st.lists(_MSG, max_size=4).map(lambda batch: wire.encode_link(wire.MSGS, batch)),
    )


# ---------------------------------------------------------------------------------------
# round trips of valid values
# ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(frame=_MAP_FRAMES)
def test_map_frames_round_trip(frame: tuple[int, dict[str, Any]]) -> None:
    kind, info = frame
    value = wire.decode_frame(wire.encode_link(kind, info))
    assert value == [kind, info]
    assert wire.check_link_map(value) == info


def test_heartbeat_round_trip() -> None:
    assert wire.decode_frame(wire.encode_link(wire.HEARTBEAT)) == [wire.HEARTBEAT]
    assert wire.encode_link(wire.HEARTBEAT) == bytes([0x91, wire.HEARTBEAT])


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), entries=st.lists(_ADVERT_ENTRY, max_size=6))
def test_advert_round_trip(full: bool, entries: list[list[Any]]) -> None:
    value = wire.decode_frame(wire.encode_link(wire.ADVERT, full, entries))
    assert value == [wire.ADVERT, full, entries]
    assert wire.decode_advert(value) == (
        full,
        tuple((p, o, None if path is None else tuple(path)) for p, o, path in entries),
    )


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(_MSG, max_size=6))
def test_msgs_round_trip(batch: list[list[Any]]) -> None:
    value = wire.decode_frame(wire.encode_link(wire.MSGS, batch))
    assert value == [wire.MSGS, batch]
    for m in value[1]:
        wire.check_link_msg(m)  # raises nothing


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(_MSG, max_size=8), share=st.booleans())
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


def _protocol_error_only(fn: Callable[[], Any], reasons: set[str]) -> bool:
    """True if ``fn()`` returned; False if it raised ProtocolError with one of ``reasons``
    (any other exception propagates and fails the test)."""
    try:
        fn()
    except ProtocolError as exc:
        assert exc.reason in reasons, exc.reason
        return False
    return True


def _check_every_way(value: list[Any]) -> None:
    """Run every link checker on a decoded frame; accepted values have the documented
    types."""
    if _protocol_error_only(lambda: wire.check_link_map(value), {"bad_shape"}):
        assert len(value) == 2 and type(value[1]) is dict
    if _protocol_error_only(
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
    if _protocol_error_only(lambda: wire.check_link_msg(m), {"bad_shape", "bad_type", "bad_value"}):
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
    kind=st.one_of(st.integers(16, 22), _INT64, _ANY),
    rest=st.lists(_ANY, max_size=4),
)
def test_any_msgpack_after_any_type_raises_only_protocol_error(kind: Any, rest: list[Any]) -> None:
    _decode_and_check(pack([kind, *rest]))


@settings(max_examples=300, deadline=None)
@given(
    kind=st.integers(16, 22),
    entries=st.lists(
        st.one_of(
            _ANY,
            # one field of a valid entry replaced by anything: reaches every type check
            st.tuples(_MSG, st.integers(0, 9), _ANY).map(
                lambda t: [*t[0][: t[1]], t[2], *t[0][t[1] + 1 :]]
            ),
            st.tuples(_ADVERT_ENTRY, st.integers(0, 2), _ANY).map(
                lambda t: [*t[0][: t[1]], t[2], *t[0][t[1] + 1 :]]
            ),
        ),
        max_size=4,
    ),
    full=st.one_of(st.booleans(), _ANY),
)
def test_wrong_fields_raise_only_protocol_error(kind: int, entries: list[Any], full: Any) -> None:
    _decode_and_check(pack([kind, entries]))
    _decode_and_check(pack([kind, full, entries]))


@settings(max_examples=300, deadline=None)
@given(
    frame=_valid_frame(),
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


# ---------------------------------------------------------------------------------------
# store-and-forward frames (types 25-26) and sticky ADVERT entries
# ---------------------------------------------------------------------------------------

_PENTRY = st.tuples(st.integers(1, 2**63 - 1), _MSG, _U63).map(lambda t: [t[0], *t[1], t[2]])


@settings(max_examples=200, deadline=None)
@given(epoch=_U63, base=st.integers(1, 2**63 - 1), entries=st.lists(_PENTRY, max_size=20))
def test_pmsgs_round_trip(epoch: int, base: int, entries: list[list[Any]]) -> None:
    """encode_pmsgs splices pre-encoded entries into the frame; it must equal what
    msgpack would encode, for every array length."""
    frame = wire.encode_pmsgs(epoch, base, [pack(e) for e in entries])
    assert frame == pack([wire.PMSGS, epoch, base, entries])
    value = wire.decode_frame(frame)
    assert wire.decode_pmsgs(value) == (epoch, base, entries)
    for e in entries:
        assert wire.check_pmsgs_entry(e) == e[0]


def test_pmsgs_long_arrays() -> None:
    for n in (15, 16, 65_535, 65_536):
        frame = wire.encode_pmsgs(1, 1, [b"\x01"] * n)
        assert wire.decode_frame(frame) == [wire.PMSGS, 1, 1, [1] * n]


@settings(max_examples=200, deadline=None)
@given(epoch=_U63, upto=_U63)
def test_pack_round_trip(epoch: int, upto: int) -> None:
    value = wire.decode_frame(wire.encode_link(wire.PACK, epoch, upto))
    assert wire.decode_pack(value) == (epoch, upto)


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), entries=st.lists(_ADVERT_ENTRY, max_size=6), flags=st.data())
def test_sticky_advert_round_trip(full: bool, entries: list[list[Any]], flags: Any) -> None:
    sent = [[*e, True] if e[2] is not None and flags.draw(st.booleans()) else e for e in entries]
    value = wire.decode_frame(wire.encode_link(wire.ADVERT, full, sent))
    got_full, got, sticky = wire.decode_advert_sticky(value)
    assert got_full == full
    assert got == tuple((p, o, None if path is None else tuple(path)) for p, o, path, *_ in sent)
    assert sticky == frozenset((e[0], e[1]) for e in sent if len(e) == 4)


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), entries=st.lists(_ADVERT_ENTRY, max_size=6), flags=st.data())
def test_held_advert_round_trip(full: bool, entries: list[list[Any]], flags: Any) -> None:
    """An entry's sixth field flags it held on a ghost (protocol 3), after its selectors
    or nil; a held flag counts only on a sticky entry that advertises a path."""
    sent = []
    for e in entries:
        sticky, held = flags.draw(st.booleans()), flags.draw(st.booleans())
        sel = flags.draw(st.sampled_from([None, ["a = 1"]]))
        sent.append([*e, sticky, sel, held])
    value = wire.decode_frame(wire.encode_link(wire.ADVERT, full, sent))
    got_full, got, sticky_keys, selectors, held_keys = wire.decode_advert_held(value)
    assert got_full == full
    assert got == tuple((p, o, None if path is None else tuple(path)) for p, o, path, *_ in sent)
    live = [e for e in sent if e[2] is not None]
    assert sticky_keys == frozenset((e[0], e[1]) for e in live if e[3])
    assert held_keys == frozenset((e[0], e[1]) for e in live if e[3] and e[5])
    assert set(selectors) == {(e[0], e[1]) for e in live if e[4] is not None}


def test_a_held_flag_that_is_not_a_boolean_is_refused() -> None:
    value = wire.decode_frame(
        wire.encode_link(wire.ADVERT, False, [["P", "O", ["O"], True, None, 1]])
    )
    with pytest.raises(ProtocolError, match="held flag"):
        wire.decode_advert_held(value)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from([wire.PMSGS, wire.PACK, wire.ADVERT]),
    rest=st.lists(
        st.one_of(
            _ANY,
            st.lists(
                st.one_of(
                    _ANY,
                    st.tuples(_PENTRY, st.integers(0, 11), _ANY).map(
                        lambda t: [*t[0][: t[1]], t[2], *t[0][t[1] + 1 :]]
                    ),
                ),
                max_size=3,
            ),
        ),
        max_size=4,
    ),
)
def test_forward_frames_with_wrong_fields_raise_only_protocol_error(
    kind: int, rest: list[Any]
) -> None:
    value = [kind, *rest]
    reasons = {"bad_shape", "bad_type", "bad_value"}
    if _protocol_error_only(lambda: wire.decode_pmsgs(value), reasons):
        epoch, base, entries = wire.decode_pmsgs(value)
        assert type(epoch) is int and type(base) is int and type(entries) is list
        for m in entries:
            if _protocol_error_only(lambda m=m: wire.check_pmsgs_entry(m), reasons):
                assert type(m[0]) is int and m[0] >= 1 and type(m[11]) is int
    if _protocol_error_only(lambda: wire.decode_pack(value), reasons):
        epoch, upto = wire.decode_pack(value)
        assert 0 <= epoch < 2**63 and 0 <= upto < 2**63
    if _protocol_error_only(lambda: wire.decode_advert_sticky(value), reasons):
        _, _, sticky = wire.decode_advert_sticky(value)
        assert all(type(k[0]) is str and type(k[1]) is str for k in sticky)


def test_gap_frames_are_checked_and_notices_told_apart() -> None:
    """GAP (issue 18, item 12): a well-formed frame passes, anything else is a
    ProtocolError; a gap notice is recognised, a delivery is not taken for one."""
    from zbroker.wire.frames import GAP
    from zbroker.wire.gaps import GAP_PATH_MAX, check_gap, decode_gap_notice, gap_notice

    good = {"node": "a", "n": 1, "link": "l", "peer": "b", "reason": "r", "path": ["a"]}
    assert check_gap([GAP, good]) == good
    bad: list[list[Any]] = [
        [GAP],
        [GAP, []],
        [GAP, {**good, "n": -1}],
        [GAP, {**good, "n": "1"}],
        [GAP, {**good, "node": 5}],
        [GAP, {**good, "path": []}],
        [GAP, {**good, "path": ["x"] * (GAP_PATH_MAX + 1)}],
        [GAP, {**good, "path": [1]}],
        [GAP, {**good, "reason": "x" * 300}],
    ]
    for value in bad:
        with pytest.raises(ProtocolError):
            check_gap(value)
    notice = gap_notice(b"G.>\0", {"node": "a", "link": "l", "peer": "b", "reason": "r"}, bytes(8))
    assert decode_gap_notice(notice) == (
        "G.>",
        {"node": "a", "link": "l", "peer": "b", "reason": "r"},
    )
    body = wire.encode_delivery_body("G.X", b"p", 0, None, "a", 1, 1, 0.0)
    assert decode_gap_notice(b"G.>\0" + body + bytes(8)) is None
    assert decode_gap_notice(b"G.>\0\x81\xa1x\x01" + bytes(8)) is None  # a map, no "gap"
