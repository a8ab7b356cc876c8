"""Property tests of the store-and-forward link frames in zbroker.wire (PMSGS and PACK,
types 25-26), of sticky and held ADVERT entries, and of GAP frames: valid values round-trip,
anything else raises only :class:`ProtocolError` with a documented reason."""

from __future__ import annotations

from functools import partial
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.link_frames import ADVERT_ENTRY, ANY, MSG, U63, protocol_error_only
from zbroker import wire
from zbroker.errors import ProtocolError

pack = msgpack.packb

# ---------------------------------------------------------------------------------------
# store-and-forward frames (types 25-26) and sticky ADVERT entries
# ---------------------------------------------------------------------------------------

_PENTRY = st.tuples(st.integers(1, 2**63 - 1), MSG, U63).map(lambda t: [t[0], *t[1], t[2]])


@settings(max_examples=200, deadline=None)
@given(epoch=U63, base=st.integers(1, 2**63 - 1), entries=st.lists(_PENTRY, max_size=20))
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
@given(epoch=U63, upto=U63)
def test_pack_round_trip(epoch: int, upto: int) -> None:
    value = wire.decode_frame(wire.encode_link(wire.PACK, epoch, upto))
    assert wire.decode_pack(value) == (epoch, upto)


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), entries=st.lists(ADVERT_ENTRY, max_size=6), flags=st.data())
def test_sticky_advert_round_trip(full: bool, entries: list[list[Any]], flags: Any) -> None:
    sent = [[*e, True] if e[2] is not None and flags.draw(st.booleans()) else e for e in entries]
    value = wire.decode_frame(wire.encode_link(wire.ADVERT, full, sent))
    got_full, got, sticky = wire.decode_advert_sticky(value)
    assert got_full == full
    assert got == tuple((p, o, None if path is None else tuple(path)) for p, o, path, *_ in sent)
    assert sticky == frozenset((e[0], e[1]) for e in sent if len(e) == 4)


@settings(max_examples=200, deadline=None)
@given(full=st.booleans(), entries=st.lists(ADVERT_ENTRY, max_size=6), flags=st.data())
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
            ANY,
            st.lists(
                st.one_of(
                    ANY,
                    st.tuples(_PENTRY, st.integers(0, 11), ANY).map(
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
    if protocol_error_only(lambda: wire.decode_pmsgs(value), reasons):
        epoch, base, entries = wire.decode_pmsgs(value)
        assert type(epoch) is int and type(base) is int and type(entries) is list
        for m in entries:
            if protocol_error_only(partial(wire.check_pmsgs_entry, m), reasons):
                assert type(m[0]) is int and m[0] >= 1 and type(m[11]) is int
    if protocol_error_only(lambda: wire.decode_pack(value), reasons):
        epoch, upto = wire.decode_pack(value)
        assert 0 <= epoch < 2**63 and 0 <= upto < 2**63
    if protocol_error_only(lambda: wire.decode_advert_sticky(value), reasons):
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
