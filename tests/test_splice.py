"""A relayed run's entries sent on as the bytes they came as (zbroker/wire/splice.py):
the decode of a MSGR frame of one long run keeps the run's entries' bytes, and the frames that
take the run on whole (MSGR to the next node, delivery runs to subscribers) splice those
bytes in. What leaves must be byte for byte what packing the runs would give, whatever
the runs hold; a frame whose bytes are not kept is decoded (and refused) as before."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.errors import ProtocolError
from zbroker.links.flush import _encode_runs
from zbroker.wire.entries import WRITES
from zbroker.wire.splice import (
    MSGR_HEAD,
    SPLICE_MIN_BYTES,
    SPLICE_MIN_ENTRIES,
    WRITE_MIN_ENTRIES,
    spliced,
    spliced_msgr,
)


def _entries(n: int, size: int, first: int = 1) -> list[list[Any]]:
    return [[bytes([s % 251]) * size, 0, None, s, 1.5] for s in range(first, first + n)]


def _run(topic: str, n: int, size: int, first: int = 1) -> list[Any]:
    return [topic, "o1", 1, ["o1"], None, _entries(n, size, first)]


def _frame(runs: list[list[Any]]) -> bytes:
    return wire.encode_link(wire.MSGR, runs)


def _decoded(frame: bytes) -> list[Any]:
    value: list[Any] = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    return value


def test_a_large_one_run_frame_keeps_its_entries_bytes() -> None:
    run = _run("T.a", SPLICE_MIN_ENTRIES, 300)
    frame = _frame([run])
    value = wire.decode_frame(frame)
    (got,) = value[1]
    assert value[0] == wire.MSGR and got[:6] == run
    assert type(got[6]) is memoryview and bytes(got[6]) == wire.packb(run[5])
    # sent on whole: the frame is the one that came
    assert _encode_runs(value[1]) == frame
    # and as a delivery run, byte for byte what packing it gives
    delivery = [[got[0], got[1], got[2], got[5], got[6]]]
    parts = spliced(delivery, 4)
    assert parts is not None
    assert b"".join(parts) == wire.packb([delivery[0][:4]])


def test_runs_with_and_without_bytes_mix() -> None:
    first = wire.decode_frame(_frame([_run("T.a", 40, 1024)]))[1][0]
    second = _run("T.b", 9, 1024, 30)
    cut = [*second[:5], second[5][:4]]  # (a run cut where a frame ended: packed again)
    parts = spliced([first, cut], 6)
    assert parts is not None
    assert b"".join([MSGR_HEAD, *parts]) == _frame([first[:6], cut])
    assert spliced_msgr([first, cut]) == _frame([first[:6], cut])
    # no run carries bytes: where the entries writer is compiled, runs long enough are
    # written (the same bytes); else there is nothing to splice: pack as usual
    plain = spliced([first[:6], cut], 6)
    if WRITES:
        assert plain is not None and b"".join([MSGR_HEAD, *plain]) == _frame([first[:6], cut])
        assert spliced_msgr([first[:6], cut]) == _frame([first[:6], cut])
    else:
        assert plain is None
        assert spliced_msgr([first[:6], cut]) is None
    short = [*second[:5], second[5][: WRITE_MIN_ENTRIES - 1]]
    assert spliced([short], 6) is None  # (too short to write: packed in one call)


@pytest.mark.parametrize(
    "runs",
    [
        [_run("T.a", SPLICE_MIN_ENTRIES - 1, 1024)],  # too few entries
        [_run("T.a", 40, 10)],  # too short: under SPLICE_MIN_BYTES
        [_run("T.a", 40, 100), _run("T.b", 40, 100, 50)],  # several runs
    ],
    ids=["few", "short", "two-runs"],
)
def test_small_frames_and_frames_of_several_runs_keep_nothing(runs: list[list[Any]]) -> None:
    frame = _frame(runs)
    assert (len(frame) < SPLICE_MIN_BYTES) == (runs[0][5][0][0] == bytes([1]) * 10)
    value = wire.decode_frame(frame)
    assert value == [wire.MSGR, runs] and all(len(r) == 6 for r in value[1])


def test_fields_packed_otherwise_keep_nothing() -> None:
    run = _run("T.a", 40, 100)
    frame = _frame([run])
    # the topic as str 8 where packing gives a fixstr: the same value, other bytes
    other = frame.replace(b"\xa3T.a", b"\xd9\x03T.a", 1)
    assert other != frame
    value = wire.decode_frame(other)
    assert value == [wire.MSGR, [run]] and len(value[1][0]) == 6


def test_other_shapes_are_decoded_and_refused_as_before() -> None:
    good = _frame([_run("T.a", 40, 100)])
    # a run of seven fields on the wire stays seven fields: the check refuses it (a run
    # that is no run's shape counts as one message)
    seven = wire.decode_frame(wire.encode_link(wire.MSGR, [[*_run("T.a", 40, 100), b"x"]]))
    errors: list[tuple[str, str]] = []
    wire.check_runs(seven[1], (set(), set(), None), errors)
    assert seven[1] == [None] and [e[0] for e in errors] == ["bad_shape"]
    # trailing bytes and a cut frame are refused as any frame is
    for frame in (good + b"\x00", good[:-1]):
        with pytest.raises(ProtocolError) as err:
            wire.decode_frame(frame)
        assert err.value.reason == "not_msgpack"


def test_a_bad_entry_takes_the_runs_bytes_away() -> None:
    run = _run("T.a", 40, 100)
    run[5][3][3] = -1  # a negative seq
    value = wire.decode_frame(_frame([run]))
    assert len(value[1][0]) == 7
    errors: list[tuple[str, str]] = []
    wire.check_runs(value[1], (set(), set(), None), errors)
    assert len(errors) == 1
    (bad,) = value[1]
    assert len(bad) == 6 and bad[5][3] is None  # packed again if it goes on


_text = st.text(min_size=1, max_size=12)
_headers = st.none() | st.dictionaries(_text, st.integers(-5, 5) | _text, max_size=3)
_entry = st.tuples(
    st.binary(max_size=600),
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
    st.lists(_entry, min_size=1, max_size=48),
).map(list)


@settings(max_examples=150, deadline=None)
@given(st.lists(_wire_run, min_size=1, max_size=3))
def test_decode_then_send_on_is_the_frame_that_came(runs: list[list[Any]]) -> None:
    frame = _frame(runs)
    value = wire.decode_frame(frame)
    assert [r[:6] for r in value[1]] == _decoded(frame)[1]
    kept = (
        len(value[1]) == 1
        and len(frame) >= SPLICE_MIN_BYTES
        and len(runs[0][5]) >= SPLICE_MIN_ENTRIES
    )
    assert [len(r) for r in value[1]] == [7 if kept else 6] * len(runs)
    assert _encode_runs(value[1]) == frame
    delivery = [[*r[:3], r[5], *r[6:]] for r in value[1]]
    parts = spliced(delivery, 4)
    body = wire.packb(delivery) if parts is None else b"".join(parts)
    assert body == wire.packb([r[:4] for r in delivery])
