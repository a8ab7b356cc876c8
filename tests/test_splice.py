"""A relayed run's entries sent on as the bytes they came as (zbroker/wire/splice.py):
a large MSGR frame's decode keeps each run's entries' bytes, and the frames that take a
run on whole (MSGR to the next node, delivery runs to subscribers) splice those bytes in.
What leaves must be byte for byte what packing the runs would give, whatever the runs
hold; a frame the splicing decode does not take is decoded (and refused) as before."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.errors import ProtocolError
from zbroker.links.flush import _encode_runs
from zbroker.wire.splice import SPLICE_MIN_BYTES, SPLICE_RUN_BYTES, runs_with_bytes, spliced


def _entries(n: int, size: int, first: int = 1) -> list[list[Any]]:
    return [[bytes([s % 251]) * size, 0, None, s, 1.5] for s in range(first, first + n)]


def _run(topic: str, n: int, size: int, first: int = 1) -> list[Any]:
    return [topic, "o1", 1, ["o1"], None, _entries(n, size, first)]


def _frame(runs: list[list[Any]]) -> bytes:
    return wire.encode_link(wire.MSGR, runs)


def test_a_large_frame_keeps_each_runs_entries_bytes() -> None:
    runs = [_run("T.a", 8, 1024), _run("T.b", 5, 1000, 20), _run("T.a", 3, 900, 40)]
    frame = _frame(runs)
    assert len(frame) >= SPLICE_MIN_BYTES
    value = wire.decode_frame(frame)
    assert value[0] == wire.MSGR and len(value[1]) == 3
    for got, want in zip(value[1], runs, strict=True):
        assert got[:6] == want
        assert type(got[6]) is memoryview and bytes(got[6]) == wire.packb(want[5])
    # sent on whole: the frame is the one that came
    assert _encode_runs(value[1]) == frame
    # and as delivery runs, byte for byte what packing them gives
    delivery = [[r[0], r[1], r[2], r[5], r[6]] for r in value[1]]
    parts = spliced(delivery, 4)
    assert parts is not None
    assert b"".join(parts) == wire.packb([r[:4] for r in delivery])


def test_runs_with_and_without_bytes_mix() -> None:
    value = wire.decode_frame(_frame([_run("T.a", 10, 1024), _run("T.b", 9, 1024, 30)]))
    first, second = value[1]
    cut = [*second[:5], second[5][:4]]  # (a run cut where a frame ended: packed again)
    parts = spliced([first, cut], 6)
    assert parts is not None
    assert b"".join([bytes((0x92, wire.MSGR)), *parts]) == _frame([first[:6], cut])
    assert spliced([first[:6], cut], 6) is None  # nothing to splice: pack as usual


@pytest.mark.parametrize(
    "runs",
    [
        [_run("T.a", 7, 1024)],  # under SPLICE_MIN_BYTES
        [_run(f"T.{i}", 1, 300) for i in range(40)],  # many short runs
    ],
    ids=["small", "short-runs"],
)
def test_small_frames_and_short_runs_are_decoded_whole(runs: list[list[Any]]) -> None:
    frame = _frame(runs)
    assert runs_with_bytes(frame) is None
    assert wire.decode_frame(frame) == [wire.MSGR, runs]


def test_other_shapes_fall_back_to_the_whole_decode() -> None:
    good = _frame([_run("T.a", 12, 1024)])
    seven = wire.encode_link(wire.MSGR, [[*_run("T.a", 12, 1024), b"junk"]])
    msgs = wire.encode_link(wire.MSGS, [_run("T.a", 12, 1024)])
    for frame in (seven, msgs, good[:-1]):
        assert runs_with_bytes(frame) is None
    # a run of seven fields on the wire stays seven fields: the check refuses it (a run
    # that is no run's shape counts as one message)
    value = wire.decode_frame(seven)
    errors: list[tuple[str, str]] = []
    wire.check_runs(value[1], (set(), set(), None), errors)
    assert value[1] == [None] and [e[0] for e in errors] == ["bad_shape"]
    # trailing bytes and a cut frame are refused as any frame is
    for frame in (good + b"\x00", good[:-1]):
        with pytest.raises(ProtocolError) as err:
            wire.decode_frame(frame)
        assert err.value.reason == "not_msgpack"


def test_a_bad_entry_takes_the_runs_bytes_away() -> None:
    run = _run("T.a", 12, 1024)
    run[5][3][3] = -1  # a negative seq
    value = wire.decode_frame(_frame([run, _run("T.b", 12, 1024, 50)]))
    assert [len(r) for r in value[1]] == [7, 7]
    errors: list[tuple[str, str]] = []
    wire.check_runs(value[1], (set(), set(), None), errors)
    assert len(errors) == 1
    bad, good = value[1]
    assert len(bad) == 6 and bad[5][3] is None  # packed again if it goes on
    assert len(good) == 7 and bytes(good[6]) == wire.packb(good[5])


def test_the_threshold_counts_runs_by_bytes() -> None:
    n = SPLICE_MIN_BYTES // SPLICE_RUN_BYTES + 2
    runs = [_run(f"T.{i}", 2, SPLICE_RUN_BYTES // 2) for i in range(n)]
    frame = _frame(runs)
    assert (runs_with_bytes(frame) is not None) == (n * SPLICE_RUN_BYTES <= len(frame))


_text = st.text(min_size=1, max_size=12)
_headers = st.none() | st.dictionaries(_text, st.integers(-5, 5) | _text, max_size=3)
_entry = st.tuples(
    st.binary(max_size=3000),
    st.sampled_from([0, 1]),
    _headers,
    st.integers(1, 2**40),
    st.floats(0, 2e9, allow_nan=False),
).map(list)
_wire_run = st.tuples(
    _text,
    _text,
    st.integers(0, 2**40),
    st.lists(_text, min_size=1, max_size=4),
    st.none() | st.lists(_text, max_size=3),
    st.lists(_entry, min_size=1, max_size=24),
).map(list)


@settings(max_examples=150, deadline=None)
@given(st.lists(_wire_run, min_size=1, max_size=6))
def test_decode_then_send_on_is_the_frame_that_came(runs: list[list[Any]]) -> None:
    frame = _frame(runs)
    value = wire.decode_frame(frame)
    assert [r[:6] for r in value[1]] == msgpack.unpackb(frame, raw=False)[1]
    assert _encode_runs(value[1]) == frame
    delivery = [[*r[:3], r[5], *r[6:]] for r in value[1]]
    parts = spliced(delivery, 4)
    body = wire.packb(delivery) if parts is None else b"".join(parts)
    assert body == wire.packb([r[:4] for r in delivery])
