"""Relayed runs sent on as their bytes (zbroker/wire/splice.py), through real nodes: a
one-run MSGR frame of many messages reaches node B by a link; B delivers it to its
subscriber and forwards it to C, which delivers it to its own. Both splice the run's
entries' bytes in (one MSGR frame at B, one delivery frame at each node), and every
message reaches each subscriber exactly once, in order, its payload whole. A run the
dedupe cut is packed again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client, wire
from zbroker.config import LinkConfig
from zbroker.node.delivery import Delivery
from zbroker.wire import splice

from .fuzz_common import LINK_PEER, RawPeer
from .network import WAIT, has_route


def _run(origin: str, topic: str, n: int, first: int = 1) -> list[Any]:
    seqs = range(first, first + n)
    entries = [[f"{origin}-{s:04d}".encode() * 100, 0, None, s, 1.5] for s in seqs]
    return [topic, origin, 1, [origin, LINK_PEER], None, entries]  # (sent by the peer)


def b_and_c(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
    pattern: str,
) -> tuple[Broker, Collector, Collector]:
    """Node B and node C dialing it, a subscriber to ``pattern`` on each (B's route to C's
    known): (B, what B's subscriber gets, what C's gets)."""
    b = broker_factory(broker_id="B")
    c = broker_factory(broker_id="C", links=(LinkConfig(name="cb", uri=b.endpoint, **FAST_LINK),))
    at_b, at_c = Collector(), Collector()
    client_factory(b.endpoint).subscribe(pattern, at_b)
    client_factory(c.endpoint).subscribe(pattern, at_c)
    assert wait_until(lambda: has_route(b, pattern, "C", hops=1), WAIT)
    return b, at_b, at_c


def _count_splices(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Counts, from now on, the frames with a relayed run's bytes spliced in, by run width
    (6: MSGR, 4: delivery; not those whose entries were only written:
    zbroker/wire/entries.py), and (under 0) the runs sent by the delivery's shortcut."""
    made: Counter[int] = Counter()
    real = splice.spliced

    def counting(runs: list[list[Any]], width: int) -> Any:
        parts = real(runs, width)
        if parts is not None and any(len(run) > width for run in runs):
            made[width] += 1
        return parts

    monkeypatch.setattr(wire, "spliced", counting)  # (the delivery's)
    monkeypatch.setattr(splice, "spliced", counting)  # (spliced_msgr's: the link flush's)
    # a frame of one run whose head a node knows may go by the shortcut instead (its
    # entries' bytes as they came: what the spliced delivery frame would have held)
    real_send_run = Delivery.send_run

    def counting_send_run(
        self: Delivery, pattern: str, head: bytes, entries: bytes, k: int
    ) -> None:
        made[0] += 1
        real_send_run(self, pattern, head, entries, k)

    monkeypatch.setattr(Delivery, "send_run", counting_send_run)
    return made


def test_a_large_frame_goes_on_as_it_came(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _count_splices(monkeypatch)
    b, at_b, at_c = b_and_c(broker_factory, client_factory, wait_until, "SPL.>")
    peer = RawPeer(b)
    o1, o2 = _run("o1", "SPL.a", 40), _run("o2", "SPL.b", 35)
    # a run whose first twenty B has seen: the forty it takes are a new list, packed
    # again at B (whose delivery and forward splice nothing); C gets them as a large
    # frame of one run and splices them into its delivery
    again = _run("o1", "SPL.a", 60, first=21)
    # more than a delivery frame's bounds (150 messages of 700 bytes: 105 KB, over
    # DELIVERY_BATCH_BYTES): a run that carries its bytes is not cut for delivery, so it
    # leaves B and C in one spliced delivery frame each (and B's forward is spliced)
    large = _run("o3", "SPL.c", 150)
    try:
        peer.handshake()
        for run, total, want in (
            (o1, 40, {6: 1, 4: 2}),
            (o2, 75, {6: 2, 4: 4}),
            (again, 115, {6: 2, 4: 5}),
            (large, 265, {6: 3, 4: 7}),
        ):
            frame = wire.encode_link(wire.MSGR, [run])
            assert len(wire.decode_frame(frame)[1][0]) == 7  # (its bytes are kept)
            peer.link.send(frame)
            assert at_b.wait_for(total, WAIT) and at_c.wait_for(total, WAIT)
            assert (made[6], made[4] + made[0]) == (want[6], want[4])
    finally:
        peer.close()
    want_msgs = [
        (r[0], r[1], e[3], e[0])
        for r in (o1, o2, again, large)
        for e in r[5]
        if r is not again or e[3] > 40
    ]
    for got in (at_b, at_c):
        assert [(m.topic, m.id.origin, m.id.seq, m.payload) for m in got.messages] == want_msgs
    assert b.status()["counters"]["forwarded"] == 265
