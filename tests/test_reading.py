"""Frames read as views (zbroker/wire/reading.py): after a large frame a socket's next
frame is read without a copy when it is large itself; the decoders take the view as they
take bytes (a link frame with its run's bytes kept, a delivery frame whatever its
pattern), and give the same values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from zbroker import wire
from zbroker.errors import ProtocolError
from zbroker.links.flush import _encode_runs
from zbroker.wire.delivery import decode_delivery_items
from zbroker.wire.reading import VIEW_BYTES, FrameReader
from zbroker.wire.splice import SPLICE_MIN_ENTRIES


@pytest.fixture
def pair() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        port = a.bind_to_random_port("tcp://127.0.0.1")
        b.connect(f"tcp://127.0.0.1:{port}")
        yield a, b
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


def test_a_large_frame_is_a_view_only_after_a_large_one(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]],
) -> None:
    a, b = pair
    read = FrameReader(b)
    small, large = b"s" * 100, bytes(range(256)) * (VIEW_BYTES // 256)
    sent = [small, large, large, large, small, large, small]
    got = []
    for body in sent:
        a.send(body)
        assert b.poll(5000)
        got.append(read(zmq.NOBLOCK))
    types = [bytes, bytes, memoryview, memoryview, bytes, bytes, bytes]
    assert [type(g) for g in got] == types
    assert [bytes(g) for g in got] == sent
    with pytest.raises(zmq.Again):  # nothing waiting: as recv(NOBLOCK), either way
        read(zmq.NOBLOCK)
    read.large = True
    with pytest.raises(zmq.Again):
        read(zmq.NOBLOCK)


def _one_run_frame(n: int, size: int) -> bytes:
    entries = [[bytes([s % 251]) * size, 0, None, s, 1.5] for s in range(1, n + 1)]
    return wire.encode_link(wire.MSGR, [["T.a", "o1", 1, ["o1"], None, entries]])


def test_a_link_frame_read_as_a_view_decodes_as_its_bytes() -> None:
    frame = _one_run_frame(SPLICE_MIN_ENTRIES * 4, 300)
    as_bytes, as_view = wire.decode_frame(frame), wire.decode_frame(memoryview(frame))
    (run,) = as_view[1]
    assert as_view == as_bytes and len(run) == 7  # (the run's entries' bytes kept)
    assert bytes(run[6]) == bytes(as_bytes[1][0][6])
    assert _encode_runs(as_view[1]) == frame  # sent on whole: the frame that came
    with pytest.raises(ProtocolError):
        wire.decode_frame(memoryview(frame)[:-3])


def _delivery(pattern: bytes, runs: list[Any], last: int) -> bytes:
    return pattern + b"\0" + wire.packb(runs) + last.to_bytes(8, "big")


@pytest.mark.parametrize("pattern_len", [5, 5000])
def test_a_delivery_frame_read_as_a_view_decodes_as_its_bytes(pattern_len: int) -> None:
    # (a pattern longer than the look at the view's start: found in the whole frame)
    pattern = ("P." + "x" * pattern_len).encode()
    entries = [[b"m" * 700, 0, None, s, 1.5] for s in range(1, 101)]
    frame = _delivery(pattern, [["P.a", "o1", 1, entries]], 100)
    got = decode_delivery_items(memoryview(frame))
    assert got == decode_delivery_items(frame)
    assert got[0] == pattern.decode() and got[1] == 1 and got[3] is True
    for bad in (memoryview(frame)[len(pattern) + 1 :], memoryview(frame)[:9]):
        with pytest.raises(ProtocolError):
            decode_delivery_items(bad)
