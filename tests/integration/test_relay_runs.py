"""The relay takes a link frame run by run (zbroker/node/relay.py): a run's route, path
and buckets are worked out once, and in-order seqs pass the dedupe inline. What a node
delivers must not depend on how a frame's messages fall into runs, nor on the frame's
form (MSGS, each message whole, or MSGR, runs): repeats, gaps, loops, interleaved origins
and topics, bad entries in a run, and runs across frames, each delivered exactly once, in
the order received, or counted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import zmq

from zbroker import Broker, Client, Message, wire
from zbroker.wire.gaps import decode_gap_notice

from .fuzz_common import HOST, LINK_PEER, WAIT, RawPeer, _entry, counters
from .fuzz_common import raw as raw  # (the fixture: a node and raw sockets to it)
from .fuzz_link_oracle import as_runs

Subscriber = tuple[list[tuple[str, str, int]], threading.Lock]


def _subscribe(client: Client, pattern: str) -> Subscriber:
    got: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def on(m: Message) -> None:
        with lock:
            got.append((m.topic, m.id.origin, m.id.seq))

    client.subscribe(pattern, on)
    return got, lock


def _m(origin: str, seq: int, topic: str = "T.a", **changes: Any) -> list[Any]:
    # (sent by the link's peer: a path ends with the node that sent it)
    return _entry(origin=origin, seq=seq, topic=topic, path=[origin, LINK_PEER], **changes)


def _frame(op: int, entries: list[list[Any]]) -> bytes:
    return wire.encode_link(op, entries if op == wire.MSGS else as_runs(entries))


@pytest.mark.parametrize("op", [wire.MSGS, wire.MSGR], ids=["MSGS", "MSGR"])
def test_a_frame_of_mixed_runs_is_delivered_exactly_once_in_order(
    op: int,
    raw: RawPeer,
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    me = raw.b.broker_id
    got, lock = _subscribe(client_factory(raw.b.endpoint), "T.>")
    raw.handshake()
    # (the node knows the subscription: the link advertises it back; sends need no route)
    before = counters(raw.b)
    first = [
        *(_m("o1", s) for s in range(1, 6)),  # a run of five
        _m("o1", 3),  # a repeat inside the run's range
        _m("o2", 1, "T.b"),  # another origin and topic
        _m("o1", 7),  # a gap ...
        _m("o1", 6),  # ... filled
        _m("o1", 7),  # a repeat of the gap's seq
        _entry(origin="o1", seq=8, topic="T.a", path=["o1", me, LINK_PEER]),  # a loop
        _m("o2", 2, "T.b"),
        _m("o1", 8, "T.b"),  # the same origin on another topic (8 was not taken above)
        _entry(origin="o1", seq=9, path=["o1", 1]),  # bad entry: counted, run goes on
        _m("o1", 9),
        _m("o1", 10, "T.a", inc=2),  # a new incarnation of o1: a new dedupe window
    ]
    raw.link.send(_frame(op, first))
    # the next frame continues o1's run; its first entry repeats the last one taken
    second = [_m("o1", 9), *(_m("o1", s) for s in range(10, 13))]
    raw.link.send(_frame(op, second))
    want = [
        *(("T.a", "o1", s) for s in range(1, 6)),
        ("T.b", "o2", 1),
        ("T.a", "o1", 7),
        ("T.a", "o1", 6),
        ("T.b", "o2", 2),
        ("T.b", "o1", 8),
        ("T.a", "o1", 9),
        ("T.a", "o1", 10),  # (incarnation 2)
        *(("T.a", "o1", s) for s in range(10, 13)),
    ]
    assert wait_until(lambda: len(got) >= len(want), timeout=30.0)
    assert raw.ping(raw.link)  # (anything more would have arrived by now)
    assert raw.ping(raw.control)
    with lock:
        assert got == want
    after = counters(raw.b)
    assert after["duplicates"] - before["duplicates"] == 3  # o1:3, o1:7, o1:9
    assert after["bad_input"] - before["bad_input"] == 1
    assert after["delivered"] - before["delivered"] == len(want)


def test_relayed_messages_reach_subscribers_as_delivery_runs(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    """What a subscriber's socket receives for relayed messages: delivery frames of runs
    (a run's topic, origin and incarnation once), cut at DELIVERY_BATCH messages or
    DELIVERY_BATCH_BYTES of payload, numbered per message without a gap: each message
    once, in the order the link brought them."""
    big = b"x" * (wire.DELIVERY_BATCH_BYTES // 3 + 1)  # three of them pass the bytes bound
    sent = [
        *(_m("o1", s) for s in range(1, 301)),  # more than a frame's DELIVERY_BATCH
        *(_m("o2", s, "T.b") for s in range(1, 4)),
        *(_m("o1", s, payload=big) for s in range(301, 305)),
    ]
    raw = RawPeer(broker_factory())  # (the default frame limit: a frame of 88 KB)
    client = client_factory(raw.b.endpoint)
    sub = raw.ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    try:
        sub.connect(f"tcp://{HOST}:{raw.b.ports['deliver']}")
        sub.subscribe(b"T.>\0")
        assert wait_until(lambda: "T.>" in client.status()["subscriptions"]["patterns"], WAIT)
        raw.handshake()
        raw.link.send(_frame(wire.MSGR, sent))
        frames = _delivery_runs(sub, len(sent))
        assert not sub.poll(300)  # nothing more: no duplicate
    finally:
        sub.close()  # (before the context ends: term() waits for every socket)
        raw.close()
    got = [
        (topic, origin, e[3], e[0])
        for _, runs in frames
        for topic, origin, _, es in runs
        for e in es
    ]
    assert got == [(m[0], m[4], m[6], m[1]) for m in sent]
    numbers = [first + i for first, runs in frames for i in range(sum(len(r[3]) for r in runs))]
    assert numbers == list(range(1, len(sent) + 1))
    # a run split where a frame ends (at 256 messages, then at the payload bytes' bound)
    assert [[len(r[3]) for r in runs] for _, runs in frames] == [[256], [44, 3, 3], [1]]


def _delivery_runs(sub: zmq.Socket[bytes], n: int) -> list[tuple[int, list[Any]]]:
    """Delivery frames until ``n`` messages arrived: (first pattern seq, runs) each; gap
    notices are skipped."""
    frames: list[tuple[int, list[Any]]] = []
    while sum(len(r[3]) for _, runs in frames for r in runs) < n and sub.poll(int(WAIT * 1000)):
        frame = sub.recv()
        if decode_gap_notice(frame) is not None:
            continue  # (not a message)
        pattern, first, runs, are_runs = wire.decode_delivery_items(frame)
        assert (pattern, are_runs) == ("T.>", True)
        frames.append((first, runs))
    return frames


def test_relayed_runs_reach_selector_subscriptions_by_their_headers(
    raw: RawPeer, client_factory: Callable[..., Client], wait_until: Callable[..., bool]
) -> None:
    """A relayed run's entries reach a plain subscription all, and a subscription with a
    selector those its headers pass, each once, in order: one delivery run per
    subscription of the entries it takes (relay.selected_runs)."""
    client = client_factory(raw.b.endpoint)
    plain, plain_lock = _subscribe(client, "T.>")
    eu: list[int] = []
    client.subscribe("T.>", lambda m: eu.append(m.id.seq), selector="region = 'EU'")
    raw.handshake()
    regions = ["EU", "US", "EU", None, "EU", "US"]
    sent = [
        _m("o1", s, headers=None if r is None else {"region": r})
        for s, r in enumerate(regions, start=1)
    ]
    raw.link.send(_frame(wire.MSGR, sent))
    assert wait_until(lambda: len(plain) >= len(sent) and len(eu) >= 3, timeout=30.0)
    assert raw.ping(raw.link)  # (anything more would have arrived by now)
    with plain_lock:
        assert plain == [("T.a", "o1", s) for s in range(1, 7)]
    assert eu == [1, 3, 5]
