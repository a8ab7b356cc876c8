"""A lone message's delivery frame read by its bytes (zbroker/wire/lone.py) against the
general decode: for every frame, the one read answers None or the very message the
general decode gives; it reads every frame of the common spelling; and the compiled read
and its Python source answer alike, on valid frames and on damaged ones."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zbroker
from tests.helpers import from_source
from zbroker import _compiled, wire
from zbroker.client.messages import Message, messages_from_runs
from zbroker.errors import ProtocolError
from zbroker.wire import lone

_PATH = Path(zbroker.__file__).resolve().parent / "wire" / "lone.py"


SOURCE = from_source(lone)
READS = [lone.lone_delivery, SOURCE.lone_delivery]


def _frame(pattern: bytes, run: Any, trailer: int) -> bytes:
    packed: bytes = msgpack.packb([run])
    return pattern + b"\0" + packed + trailer.to_bytes(8, "big")


def _general(frame: bytes) -> Any:
    """What the subscriber's general path makes of a frame: its pattern, sequence and
    messages' fields, or the error it refuses it with."""
    try:
        pattern, first, items, runs = wire.decode_delivery_items(frame)
        if not runs:
            return "envelopes"
        msgs = messages_from_runs(pattern, items)
    except ProtocolError as exc:
        return exc.reason
    return pattern, first, [tuple(getattr(m, k) for k in m.__slots__) for m in msgs]


def _as_read(frame: bytes, read: Any) -> Any:
    """The same, from the lone read's answer (the subscriber's Message built as it builds
    it), or None."""
    got = read(frame)
    if got is None:
        return None
    pattern, first, topic, origin, inc, raw, seq, ts = got
    msg = wire_message(topic, raw, origin, inc, seq, ts, pattern)
    return pattern, first, [tuple(getattr(msg, k) for k in msg.__slots__)]


def wire_message(topic: str, raw: bytes, origin: str, inc: int, seq: int, ts: float, p: str) -> Any:
    return Message(topic, raw, "bytes", None, origin, inc, seq, ts, p, raw)


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a ts may be one: neither read checks its range)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


_TEXT = st.one_of(st.text(max_size=40), st.text(min_size=250, max_size=300))
_UINT = st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1))
_TS = st.one_of(st.floats(), st.integers(-(2**63), 2**63 - 1))
_COMMON = st.tuples(
    st.text(min_size=1, max_size=20).filter(lambda s: "\0" not in s),
    _TEXT,
    _TEXT,
    _UINT,
    st.one_of(st.binary(max_size=40), st.binary(min_size=255, max_size=300)),
    _UINT,
    st.floats(),
    _UINT,
)


@settings(max_examples=300, deadline=None)
@given(case=_COMMON)
def test_every_frame_of_the_common_spelling_is_read_as_the_general_decode_reads_it(
    case: tuple[str, str, str, int, bytes, int, float, int],
) -> None:
    pattern, topic, origin, inc, payload, seq, ts, trailer = case
    frame = _frame(pattern.encode(), [topic, origin, inc, [[payload, 0, None, seq, ts]]], trailer)
    want = _general(frame)
    for read in READS:
        got = _as_read(frame, read)
        assert got is not None
        assert _same(got, want)


_ANY = st.one_of(st.none(), st.booleans(), _UINT, _TS, st.text(max_size=5), st.binary(max_size=5))


@settings(max_examples=300, deadline=None)
@given(
    fields=st.lists(
        st.one_of(_ANY, st.dictionaries(st.text(max_size=3), _ANY)), min_size=8, max_size=8
    ),
    cut=st.integers(0, 60),
    flip=st.tuples(st.integers(0, 200), st.integers(0, 255)),
)
def test_any_other_frame_is_left_to_the_general_decode_or_read_alike(
    fields: list[Any], cut: int, flip: tuple[int, int]
) -> None:
    topic, origin, inc, payload, fmt, headers, seq, ts = fields
    frame = _frame(b"A.>", [topic, origin, inc, [[payload, fmt, headers, seq, ts]]], 5)
    at, byte = flip
    damaged = bytearray(frame)
    if at < len(damaged):
        damaged[at] = byte
    for f in (frame, bytes(damaged), frame[: max(len(frame) - cut, 0)], frame + b"\0" * cut):
        want = _general(f)
        answers = [_as_read(f, read) for read in READS]
        assert _same(answers[0], answers[1])
        if answers[0] is not None:
            assert _same(answers[0], want)


@pytest.mark.parametrize(
    "run",
    [
        ["T", "N", 1, [[b"x", 1, None, 2, 0.5]]],  # a msgpack payload: decoded by the general
        ["T", "N", 1, [[b"x", 0, {"h": 1}, 2, 0.5]]],  # headers
        ["T", "N", 1, [[b"x", 0, None, 2, 7]]],  # an int ts
        ["T", "N", 1, [[b"x", 0, None, 2, 0.5]] * 2],  # two messages
        ["T", "N", -1, [[b"x", 0, None, 2, 0.5]]],  # a negative incarnation
        ["T", "N", 1, [[b"x", 0, None, 2, 0.5, 9]]],  # an entry of six fields
    ],
)
def test_what_is_not_the_common_spelling_answers_none(run: list[Any]) -> None:
    frame = _frame(b"A.>", run, 3)
    for read in READS:
        assert read(frame) is None


def test_long_fields_and_a_payload_of_every_bin_width_are_read() -> None:
    for size in (0, 255, 256, 65535, 65536, 70000):
        payload = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
        run = ["T." + "x" * 70000, "N" * 300, 2**64 - 1, [[payload, 0, None, 2**32, -1.5]]]
        frame = _frame("Pé.>".encode(), run, 2**64 - 1)
        for read in READS:
            want = ("Pé.>", 2**64 - 1, run[0], run[1], 2**64 - 1, payload, 2**32, -1.5)
            assert read(frame) == want


def test_bad_utf8_and_frames_too_short_answer_none() -> None:
    good = _frame(b"A.>", ["T", "N", 1, [[b"x", 0, None, 2, 0.5]]], 3)
    bad_topic = good.replace(b"\xa1T", b"\xa1\xff")
    bad_pattern = b"\xff" + good[1:]
    for read in READS:
        for frame in (bad_topic, bad_pattern, b"", b"\0" * 9, good[:-1], b"\0" + good[3:]):
            assert read(frame) is None


def test_the_compiled_read_is_the_extension_where_built() -> None:
    built = _compiled.built_from(_PATH) is True and not _compiled.pure_python()
    assert lone.COMPILED is built
    assert SOURCE.COMPILED is False
