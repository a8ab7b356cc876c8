"""Relayed runs sent on as their bytes (zbroker/wire/splice.py), through real nodes: a
large MSGR frame reaches node B by a link; B delivers it to its subscriber and forwards
it to C, which delivers it to its own. Both splice the runs' entries' bytes in (one MSGR
frame at B, one delivery frame at each node), and every message reaches each subscriber
exactly once, in order, its payload whole. A run the dedupe cut is packed again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import Collector
from zbroker import Broker, Client, wire
from zbroker.config import LinkConfig

from .test_fuzz import RawPeer
from .test_network import FAST, WAIT, has_route


def _run(origin: str, topic: str, n: int, first: int = 1) -> list[Any]:
    seqs = range(first, first + n)
    entries = [[f"{origin}-{s:04d}".encode() * 100, 0, None, s, 1.5] for s in seqs]
    return [topic, origin, 1, [origin], None, entries]


def test_a_large_frame_goes_on_as_it_came(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: Counter[int] = Counter()  # frames spliced, by run width (6: MSGR, 4: delivery)
    real = wire.spliced

    def counting(runs: list[list[Any]], width: int) -> Any:
        parts = real(runs, width)
        if parts is not None:
            made[width] += 1
        return parts

    monkeypatch.setattr(wire, "spliced", counting)
    b = broker_factory(broker_id="B")
    c = broker_factory(broker_id="C", links=(LinkConfig(name="cb", uri=b.endpoint, **FAST),))
    at_b, at_c = Collector(), Collector()
    client_factory(b.endpoint).subscribe("SPL.>", at_b)
    client_factory(c.endpoint).subscribe("SPL.>", at_c)
    assert wait_until(lambda: has_route(b, "SPL.>", "C", hops=1), WAIT)
    peer = RawPeer(b)
    try:
        peer.handshake()
        runs = [_run("o1", "SPL.a", 12), _run("o2", "SPL.b", 10)]
        frame = wire.encode_link(wire.MSGR, runs)
        assert wire.runs_with_bytes(frame) is not None  # (a frame the decode splices)
        peer.link.send(frame)
        assert at_b.wait_for(22, WAIT) and at_c.wait_for(22, WAIT)
        assert made == {6: 1, 4: 2}
        # a run whose first six B has seen: the fourteen it takes are a new list, packed
        # again at B (whose deliveries and forward splice nothing); C gets them as a
        # large frame of one run and splices them into its delivery
        again = _run("o1", "SPL.a", 20, first=7)
        peer.link.send(wire.encode_link(wire.MSGR, [again]))
        assert at_b.wait_for(36, WAIT) and at_c.wait_for(36, WAIT)
    finally:
        peer.close()
    want = [
        (r[0], r[1], e[3], e[0])
        for r in [*runs, again]
        for e in r[5]
        if e[3] > 12 or r is not again
    ]
    for got in (at_b, at_c):
        assert [(m.topic, m.id.origin, m.id.seq, m.payload) for m in got.messages] == want
    assert made == {6: 1, 4: 3}
    assert b.status()["counters"]["forwarded"] == 36
