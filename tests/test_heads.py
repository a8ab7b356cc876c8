"""The walk of a lone run's frame (zbroker/wire/heads.py) against the node's own decode and
checks: what it takes, the node takes (every entry passes, the seqs follow one another,
its entries' array is where it says); frames as the node packs them it takes; and it
answers alike compiled and from its source."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import zbroker
from tests.helpers import from_source
from zbroker import wire
from zbroker.errors import ProtocolError
from zbroker.wire import heads
from zbroker.wire.frames import TS_MAX
from zbroker.wire.runs import _check_entries

NO = (-1, 0, 0)
ROOT = Path(zbroker.__file__).resolve().parent.parent


SOURCE: Any = from_source(heads)


def node_takes(frame: bytes) -> tuple[int, int] | None:
    """What the node's decode and checks make of ``frame`` as a lone run's entries: (first
    seq, last seq) if every entry passes and the seqs follow one another; None if it is
    not such a frame. (The run's shared fields are the shortcut's to check, once.)"""
    try:
        value = wire.decode_frame(frame)
    except ProtocolError:
        return None
    if value[0] != wire.MSGR or len(value) != 2 or type(value[1]) is not list:
        return None
    if len(value[1]) != 1 or type(value[1][0]) is not list or len(value[1][0]) not in (6, 7):
        return None
    entries = value[1][0][5]
    if type(entries) is not list or not entries:
        return None
    errors: list[tuple[str, str]] = []
    _check_entries(entries, errors)
    seqs = [e[3] for e in entries if e is not None]
    if errors or seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        return None
    return seqs[0], seqs[-1]


def splits_at(frame: bytes, at: int) -> bool:
    """Whether the run's five shared fields end at ``at`` (after the frame's four array and
    type bytes) and its entries' array is all that follows."""
    head = msgpack.Unpacker(raw=False, strict_map_key=False)
    head.feed(frame[4:at])
    try:
        for _ in range(5):
            head.unpack()
    except msgpack.OutOfData:
        return False
    if head.tell() != at - 4:
        return False
    return type(msgpack.unpackb(frame[at:], raw=False, strict_map_key=False)) is list


def frame_of(entries: list[Any], head: list[Any] | None = None) -> bytes:
    run = [*(head or ["PRICE.X", "A", 1, ["A"], None]), entries]
    return wire.encode_link(wire.MSGR, [run])


def raw_frame(entry_bytes: list[bytes]) -> bytes:
    """A lone run's frame of entries packed by hand."""
    head: bytes = msgpack.packb([wire.MSGR, [["PRICE.X", "A", 1, ["A"], None, []]]])[:-1]
    return head + wire.codec.array_header(len(entry_bytes)) + b"".join(entry_bytes)


def entry_bytes(headers: bytes, seq: int = 7, ts: bytes | None = None) -> bytes:
    ts_bytes: bytes = msgpack.packb(1.5) if ts is None else ts
    payload: bytes = msgpack.packb(b"pay")
    seq_bytes: bytes = msgpack.packb(seq)
    return b"\x95" + payload + b"\x00" + headers + seq_bytes + ts_bytes


_KEY = st.one_of(st.text(max_size=5), st.binary(max_size=4), st.integers(-5, 300), st.none())
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=6),
)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEY, inner, max_size=3)),
    max_leaves=8,
)
_TS = st.one_of(
    st.floats(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([TS_MAX, -TS_MAX, math.nextafter(TS_MAX, 0), 1e15 - 1, 10**15, 10**15 - 1]),
    st.sampled_from([-(10**15), -(10**15) + 1, 1.7e9]),
)
_ENTRY = st.tuples(
    st.one_of(st.binary(max_size=40), st.just("text")),
    st.sampled_from([0, 1, 2, True]),
    st.one_of(st.none(), st.dictionaries(_KEY, _VALUE, max_size=3), st.just([1])),
    st.one_of(st.integers(0, 2**63 + 5), st.just(-1)),
    _TS,
)
#: entries the node takes (headers of any shape it decodes)
_GOOD = st.tuples(
    st.binary(max_size=40),
    st.sampled_from([0, 1]),
    st.one_of(st.none(), st.dictionaries(_KEY, _VALUE, max_size=3)),
    st.integers(0, 2**63 - 10),
    st.one_of(
        st.floats(-1e15, 1e15, exclude_min=True, exclude_max=True),
        st.integers(-(10**15) + 1, 10**15 - 1),
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(st.lists(_GOOD, min_size=1, max_size=6), st.lists(_ENTRY, min_size=1, max_size=6)),
    st.booleans(),
    st.booleans(),
)
def test_what_the_walk_takes_the_node_takes(
    drawn: list[tuple[Any, ...]], consecutive: bool, single: bool
) -> None:
    entries = [list(e) for e in drawn]
    if consecutive:
        for i, e in enumerate(entries):
            e[3] = entries[0][3] + i if isinstance(entries[0][3], int) else i
    try:
        frame = msgpack.Packer(use_single_float=single).pack(
            [wire.MSGR, [["PRICE.X", "A", 1, ["A", "B"], None, entries]]]
        )
    except OverflowError:  # (a float beyond float32's range, or an int beyond 64 bits)
        assume(False)
    got = heads.run_head(frame)
    taken = node_takes(frame)
    if got != NO:
        assert taken == got[1:]
        assert splits_at(frame, got[0])
    elif taken is not None:
        # refused by the walk only for what it does not take: ints packed as signed
        # types, keys that are arrays or maps inside values, nesting past DEPTH
        assert any(_unusual(e) for e in entries), entries
    assert SOURCE.run_head(frame) == got


def _unusual(e: list[Any]) -> bool:
    return _depth(e[2]) > heads.DEPTH


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        value = [*value.values()]
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=200), st.integers(0, 199))
def test_bytes_changed_anywhere_are_never_taken_wrongly(noise: bytes, at: int) -> None:
    frame = bytearray(frame_of([[b"x" * 20, 0, {"k": "v", "n": [1, 2.5]}, s, 1.5] for s in (3, 4)]))
    at %= len(frame)
    frame[at : at + len(noise)] = noise
    got = heads.run_head(bytes(frame))
    if got != NO:
        assert node_takes(bytes(frame)) == got[1:]
        assert splits_at(bytes(frame), got[0])
    assert SOURCE.run_head(bytes(frame)) == got


def test_frames_as_the_node_packs_them_are_taken() -> None:
    entries = [
        [b"p" * n, n % 2, None if n % 3 else {"a": "é", b"b": [1, {2: None}]}, 40 + n, 1.7e9]
        for n in range(300)
    ]
    for count in (1, 2, 15, 16, 300):
        frame = frame_of(entries[:count])
        at, first, last = heads.run_head(frame)
        assert (first, last) == (40, 40 + count - 1)
        assert msgpack.unpackb(frame[at:], strict_map_key=False)[0][3] == 40
        assert frame[:at] == frame_of([])[:-1]
        # a large frame is read as a view of libzmq's message: walked the same
        assert heads.run_head(memoryview(frame)) == (at, first, last)


@pytest.mark.parametrize(
    "value",
    [
        frame_of([]),  # no entries
        frame_of([[b"p", 0, None, 5, 1.0], [b"p", 0, None, 7, 1.0]]),  # a gap
        frame_of([[b"p", 0, None, 5, 1.0], [b"p", 0, None, 5, 1.0]]),  # a repeat
        frame_of([[b"p", 0, None, 5, 1.0]]) + b"\x00",  # trailing
        frame_of([[b"p", 0, None, 5, 1.0]])[:-1],  # cut short
        wire.encode_link(wire.MSGS, [["T", b"p", 0, None, "A", 1, 5, 1.0, ["A"], None]]),
        wire.encode_link(wire.MSGR, [["T", "A", 1, [], None, [[b"p", 0, None, 1, 1.0]]]] * 2),
        frame_of([[b"p", 0, msgpack.ExtType(5, b"x"), 5, 1.0]]),
        frame_of([[b"p", 0, {"k": msgpack.ExtType(5, b"x")}, 5, 1.0]]),
        frame_of([[b"p", 0, None, 5, math.nan]]),
        frame_of([[b"p", 0, None, 5, math.inf]]),
        frame_of([[b"p", 0, None, 2**63, 1.0]]),
        frame_of([[b"p", 0, None, 5, 1.0, 9]]),
        b"",
        b"\x92\x24",
    ],
)
def test_other_frames_are_not_taken(value: bytes) -> None:
    assert heads.run_head(value) == NO
    assert SOURCE.run_head(value) == NO


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=12))
def test_header_strings_are_taken_when_they_are_utf8(text: bytes) -> None:
    # (a str header value of these bytes, packed by hand: the packer writes only UTF-8)
    headers = b"\x81\xa1k" + bytes((0xA0 | len(text),)) + text
    frame = raw_frame([entry_bytes(headers)])
    try:
        text.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert (heads.run_head(frame) != NO) is valid
    assert (node_takes(frame) is not None) is valid
    assert SOURCE.run_head(frame) == heads.run_head(frame)


def _f32(bits: int) -> bytes:
    return b"\xca" + bits.to_bytes(4, "big")


def test_a_ts_is_taken_strictly_within_ts_max() -> None:
    below64 = math.nextafter(TS_MAX, 0)
    cases = {
        msgpack.packb(below64): True,
        msgpack.packb(-below64): True,
        msgpack.packb(TS_MAX): False,
        msgpack.packb(-TS_MAX): False,
        msgpack.packb(math.nan): False,
        msgpack.packb(-math.inf): False,
        msgpack.packb(10**15 - 1): True,
        msgpack.packb(10**15): False,
        msgpack.packb(-(10**15) + 1): True,
        msgpack.packb(-(10**15)): False,
        msgpack.packb(-(2**63)): False,
        b"\xd3" + (2**64 - 5).to_bytes(8, "big"): True,  # int 64 of -5
        _f32(0x58635FA9): True,
        _f32(0x58635FAA): False,
        _f32(0xD8635FA9): True,
        _f32(0x7FC00000): False,  # NaN
    }
    for ts, taken in cases.items():
        frame = raw_frame([entry_bytes(b"\xc0", ts=ts)])
        assert (heads.run_head(frame) != NO) is taken, ts
        assert (node_takes(frame) is not None) is taken, ts
    # the constants are the bits of 1e15 and of the least float32 at or above it
    assert int.from_bytes(struct.pack(">d", TS_MAX), "big") == SOURCE._TS64
    assert struct.unpack(">f", SOURCE._TS32.to_bytes(4, "big"))[0] >= TS_MAX
    assert struct.unpack(">f", (SOURCE._TS32 - 1).to_bytes(4, "big"))[0] < TS_MAX


def test_headers_nested_past_depth_go_the_general_way() -> None:
    nested: Any = 1
    for _ in range(heads.DEPTH):
        nested = [nested]
    shallow = frame_of([[b"p", 0, {"k": nested[0]}, 5, 1.0]])
    deep = frame_of([[b"p", 0, {"k": nested}, 5, 1.0]])
    assert heads.run_head(shallow) != NO
    assert heads.run_head(deep) == NO
    assert node_takes(deep) is not None  # (the node takes it: the general way)


_PUBLISH_ENTRY = st.tuples(
    st.one_of(st.binary(max_size=20), st.just("text")),
    st.sampled_from([0, 1, 2, True]),
    st.one_of(
        st.none(),
        st.dictionaries(st.text(max_size=4), _VALUE, max_size=3),
        st.dictionaries(_KEY, _LEAF, max_size=2),
        st.just([1]),
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PUBLISH_ENTRY, min_size=1, max_size=4), st.booleans())
def test_what_the_publish_walk_takes_the_publish_checks_take(
    drawn: list[tuple[Any, ...]], single: bool
) -> None:
    entries = [list(e) for e in drawn]
    frame = msgpack.packb([("T.a", *entries[0])] if single else [["T.a", entries]])
    if single:
        frame = msgpack.packb(["T.a", *entries[0]])
        entries = entries[:1]
    at, spans = heads.publish_run(frame)
    errors: list[tuple[str, str]] = []
    if single:
        taken = wire.check_publishes((frame,), errors, None)[0] is not None
    else:
        runs = msgpack.unpackb(frame, raw=False, strict_map_key=False)
        wire.check_publish_runs(runs, errors, set())
        taken = runs[0] is not None and len(runs[0][1]) == len(entries)
    if at >= 0:
        assert taken and not errors
        assert frame[:at].endswith(msgpack.packb("T.a"))
        fields = [
            msgpack.unpackb(b"\x93" + frame[s:e], raw=False, strict_map_key=False)
            for s, e in zip(spans[::2], spans[1::2], strict=True)
        ]
        assert msgpack.packb(fields) == msgpack.packb(entries)  # (NaN is not NaN)
    else:
        assert not taken or any(_depth(e[2]) >= heads.DEPTH for e in entries)
    assert SOURCE.publish_run(frame) == (at, spans)


def test_other_publish_frames_are_not_walked() -> None:
    for frame in (
        msgpack.packb([msgpack.packb(["T.a", b"p", 0, None])]),  # a publish batch
        msgpack.packb([["T.a", [[b"p", 0, None]]], ["T.b", [[b"p", 0, None]]]]),  # 2 runs
        msgpack.packb([["T.a", []]]),  # no entries
        msgpack.packb(["T.a", b"p", 0, None]) + b"\x00",
        msgpack.packb(["T.a", b"p", 0, {1: "x"}]),  # a header name not a string
        msgpack.packb([1, b"p", 0, None]),
    ):
        assert heads.publish_run(frame) == (-1, [])
        # publish_run is typed for bytes: this checks a memoryview of one reads the same
        view = memoryview(msgpack.packb(["T.a", b"p", 0, None]))
        assert heads.publish_run(view) == (-1, [])  # type: ignore[arg-type]
