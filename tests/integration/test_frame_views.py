"""Large frames read as views through real nodes (zbroker/wire/reading.py): a flood of
large one-run MSGR frames reaches node B by a link; C dials B and reads B's forwards on
its DEALER, its subscriber reads C's delivery frames on its SUB socket. After the first
large frame each reader takes the next ones as views of libzmq's messages; every message
reaches each subscriber exactly once, in order, its payload whole, and a small frame after
the flood is read as bytes and delivered as well."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import zmq

from zbroker import Broker, Client, wire
from zbroker.wire import reading

from .fuzz_common import LINK_PEER, RawPeer
from .network import WAIT
from .test_splice_chain import b_and_c


def _run(topic: str, first: int, n: int, size: int) -> list[Any]:
    seqs = range(first, first + n)
    entries = [[f"{s:06d}".encode() * (size // 6), 0, None, s, 1.5] for s in seqs]
    return [topic, "o1", 1, ["o1", LINK_PEER], None, entries]  # (sent by the peer)


def _counting(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[int, str]]:
    """Count the frames every FrameReader reads, by its socket's type and the frame's
    (views and bytes)."""
    seen: Counter[tuple[int, str]] = Counter()
    real = reading.FrameReader.__call__

    def counting(self: reading.FrameReader, flags: int = 0) -> bytes | memoryview:
        body = real(self, flags)
        seen[self._recv.__self__.type, type(body).__name__] += 1  # type: ignore[attr-defined]
        return body

    monkeypatch.setattr(reading.FrameReader, "__call__", counting)
    return seen


def test_a_flood_of_large_frames_is_read_as_views_and_delivered_once(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _counting(monkeypatch)
    b, at_b, at_c = b_and_c(broker_factory, client_factory, wait_until, "VIEW.>")
    peer = RawPeer(b)
    # five runs of 120 messages of 600 bytes (about 73 KB a frame: over VIEW_BYTES),
    # then one of a single small message
    runs = [_run("VIEW.a", 1 + 120 * k, 120, 600) for k in range(5)] + [_run("VIEW.b", 601, 1, 6)]
    try:
        peer.handshake()
        total = 0
        for run in runs:  # one at a time: each leaves B as a frame of its own
            peer.link.send(wire.encode_link(wire.MSGR, [run]))
            total += len(run[5])
            assert at_b.wait_for(total, WAIT) and at_c.wait_for(total, WAIT)
    finally:
        peer.close()
    want = [(r[0], e[3], e[0]) for r in runs for e in r[5]]
    for got in (at_b, at_c):
        assert [(m.topic, m.id.seq, m.payload) for m in got.messages] == want
    assert b.status()["counters"]["forwarded"] == 601
    # C's link frames: the first large one copied, the next large ones views (but one
    # after a heartbeat, a small frame, is copied), the last small one copied; the
    # subscribers' delivery frames likewise
    for kind in (zmq.DEALER, zmq.SUB):
        assert seen[kind, "memoryview"] >= 1 and seen[kind, "bytes"] >= 2
