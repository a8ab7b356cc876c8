"""The relay's shortcut (zbroker/node/shortcut.py) on a real node between two raw link
peers, X upstream and Y downstream: a lone run whose head the node knows goes on as it
came (path and targets the node's own), every message exactly once and in order, with the
counters the general path keeps; repeats, gaps, local subscribers and interest waiting to
be advertised take the general path."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sized
from typing import Any

import msgpack
import pytest
import zmq

from zbroker import Broker, Client, wire
from zbroker.config import LinkConfig, RetainRule
from zbroker.node.interest import LocalInterest
from zbroker.node.shortcut import WALK_MAX_BYTES
from zbroker.routing import RoutingEngine
from zbroker.wire.reading import VIEW_BYTES

from .fuzz_common import HOST, WAIT, link_hello

BrokerFactory = Callable[..., Broker]


class Peer:
    """A raw link DEALER to the node, handshaken as broker ``name``."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], b: Broker, name: str) -> None:
        self.name = name
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, f"{name}/l{name}".encode())
        self.sock.connect(f"tcp://{HOST}:{b.ports['control']}")
        hello = {**link_hello(), "id": name, "name": f"l{name}", "heartbeat_timeout": 60.0}
        self.sock.send(wire.encode_link(wire.LINK_HELLO, hello))
        assert self.next(lambda v: v[0] == wire.LINK_WELCOME) is not None
        self.frames: list[list[Any]] = []  # ADVERT and MSGR frames, in the order they came

    def next(self, want: Callable[[list[Any]], bool]) -> list[Any] | None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.sock.poll(50):
                value = msgpack.unpackb(self.sock.recv(), raw=False, strict_map_key=False)
                if value[0] in (wire.ADVERT, wire.MSGR) and hasattr(self, "frames"):
                    self.frames.append(value)
                if want(value):
                    return list(value)
        return None

    def seqs(self) -> list[tuple[str, str, list[str], list[str] | None, int]]:
        """Every message in the MSGR frames received: (topic, origin, path, targets, seq)."""
        return [
            (topic, origin, path, targets, e[3])
            for f in self.frames
            if f[0] == wire.MSGR
            for topic, origin, _inc, path, targets, entries in f[1]
            for e in entries
        ]


@pytest.fixture
def chain(broker_factory: BrokerFactory) -> Iterator[tuple[Broker, Peer, Peer]]:
    yield from _chain(broker_factory())


@pytest.fixture
def retaining_chain(broker_factory: BrokerFactory) -> Iterator[tuple[Broker, Peer, Peer]]:
    yield from _chain(broker_factory(retain=(RetainRule("T.>"),)))


def _chain(b: Broker) -> Iterator[tuple[Broker, Peer, Peer]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        x, y = Peer(ctx, b, "px"), Peer(ctx, b, "py")
        y.sock.send(wire.encode_link(wire.ADVERT, True, [["T.>", "py", ["py"]]]))
        deadline = time.monotonic() + WAIT
        while not b.call(lambda n: n.engine.has_route("T.>", "py")):
            assert time.monotonic() < deadline, "the node never took Y's interest"
            time.sleep(0.02)
        yield b, x, y
    finally:
        ctx.destroy(linger=0)


def lone(seqs: range, topic: str = "T.a") -> bytes:
    entries = [[f"m{s}".encode(), 0, None, s, 1.7e9] for s in seqs]
    return wire.encode_link(wire.MSGR, [[topic, "px", 1, ["px"], ["py"], entries]])


def taken(b: Broker) -> int:
    return int(b.call(lambda n: n.shortcut.taken))


def in_frames(x: Peer, y: Peer, *runs: range) -> None:
    """Each range of seqs (from 1 on) in a lone frame, the next sent once Y has the one
    before (each read in a pass of its own: a frame behind one queued in the pass waits)."""
    for seqs in runs:
        x.sock.send(lone(seqs))
        wait_for(y, seqs.stop - 1)


def one_by_one(x: Peer, y: Peer, seqs: range) -> None:
    """Each seq in a lone frame of its own (:func:`in_frames`)."""
    in_frames(x, y, *(range(s, s + 1) for s in seqs))


def wait_for(y: Peer, count: int) -> None:
    y.next(lambda _v: len(y.seqs()) >= count)
    assert len(y.seqs()) >= count, y.seqs()


def test_a_known_head_goes_on_as_it_came_every_message_once(
    chain: tuple[Broker, Peer, Peer],
) -> None:
    b, x, y = chain
    before = b.status()["counters"]["forwarded"]
    runs = [range(1, 2), range(2, 3), range(3, 6), range(6, 7), range(7, 40)]
    in_frames(x, y, *runs)
    me = b.broker_id
    assert y.seqs() == [("T.a", "px", ["px", me], ["py"], s) for s in range(1, 40)]
    # the first frame taught the node the head and the origin: the general path; the
    # others went by the shortcut, as one frame each, and are counted as forwarded
    assert taken(b) == len(runs) - 1
    assert len([f for f in y.frames if f[0] == wire.MSGR]) == len(runs)
    assert b.status()["counters"]["forwarded"] - before == 39
    links = {link["peer"]: link for link in b.status()["links"]}
    assert (links["px"]["msgs_in"], links["py"]["msgs_out"]) == (39, 39)


def test_repeats_and_gaps_take_the_general_path(chain: tuple[Broker, Peer, Peer]) -> None:
    b, x, y = chain
    in_frames(x, y, range(1, 4), range(4, 6))
    assert taken(b) == 1
    x.sock.send(lone(range(3, 5)))  # a repeat: dropped by the dedupe
    x.sock.send(lone(range(7, 9)))  # a gap before it: the general path delivers it
    wait_for(y, 7)
    x.sock.send(lone(range(6, 7)))  # the gap filled: the floor moves past 8
    wait_for(y, 8)
    x.sock.send(lone(range(9, 11)))  # in order again: the shortcut
    wait_for(y, 10)
    assert [m[4] for m in y.seqs()] == [1, 2, 3, 4, 5, 7, 8, 6, 9, 10]
    assert taken(b) == 2


def _routed_here(b: Broker) -> None:
    deadline = time.monotonic() + WAIT
    while not b.call(lambda n: bool(n.engine.route("T.a", ("px",), ("py",))[0])):
        assert time.monotonic() < deadline, "the subscription never reached the engine"
        time.sleep(0.02)


def _received(got: Sized, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while len(got) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_local_subscribers_get_the_run_as_it_came_once(
    chain: tuple[Broker, Peer, Peer], client_factory: Callable[..., Client]
) -> None:
    b, x, y = chain
    got: list[tuple[str, int, bytes, dict[str, Any]]] = []
    client = client_factory(b.endpoint)
    client.subscribe("T.>", lambda m: got.append((m.topic, m.id.seq, m.payload, m.headers)))
    other: list[int] = []
    client.subscribe("T.a", lambda m: other.append(m.id.seq))
    _routed_here(b)
    before = b.status()["counters"]["delivered"]
    one_by_one(x, y, range(1, 8))
    in_frames(x, y, range(8, 12))
    assert [m[4] for m in y.seqs()] == list(range(1, 12))
    _received(got, 11)
    _received(other, 11)
    assert got == [("T.a", s, f"m{s}".encode(), {}) for s in range(1, 12)]
    assert other == list(range(1, 12))
    assert taken(b) == 7  # (the first frame: the origin was not known yet)
    assert b.status()["counters"]["delivered"] - before == 22


def test_the_last_hop_delivers_by_the_shortcut(
    broker_factory: BrokerFactory, client_factory: Callable[..., Client]
) -> None:
    b = broker_factory()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        x = Peer(ctx, b, "px")
        got: list[int] = []
        client_factory(b.endpoint).subscribe("T.>", lambda m: got.append(m.id.seq))
        for s in range(1, 21):
            x.sock.send(
                wire.encode_link(
                    wire.MSGR,
                    [["T.a", "px", 1, ["px"], [b.broker_id], [[b"m", 0, None, s, 1.7e9]]]],
                )
            )
        _received(got, 20)
        time.sleep(0.2)  # (nothing more may come)
        assert got == list(range(1, 21))
        assert taken(b) == 19
    finally:
        ctx.destroy(linger=0)


def test_a_subscriber_with_a_selector_takes_the_general_path(
    chain: tuple[Broker, Peer, Peer], client_factory: Callable[..., Client]
) -> None:
    b, x, y = chain
    got: list[int] = []
    client_factory(b.endpoint).subscribe("T.>", lambda m: got.append(m.id.seq), selector="k = 'v'")
    _routed_here(b)
    for s in range(1, 6):
        headers = {"k": "v"} if s % 2 else None
        entries = [[b"m", 0, headers, s, 1.7e9]]
        x.sock.send(wire.encode_link(wire.MSGR, [["T.a", "px", 1, ["px"], ["py"], entries]]))
    wait_for(y, 5)
    _received(got, 3)
    time.sleep(0.2)
    assert [m[4] for m in y.seqs()] == [1, 2, 3, 4, 5]
    assert got == [1, 3, 5]
    assert taken(b) == 0


def test_interest_that_came_first_is_advertised_first(chain: tuple[Broker, Peer, Peer]) -> None:
    b, x, y = chain
    one_by_one(x, y, range(1, 3))
    assert taken(b) == 1
    # X's new interest and a message right behind it, most likely read in one pass: the
    # node's advertisement of it must reach Y before the message does
    for n in range(3, 13):
        x.sock.send(wire.encode_link(wire.ADVERT, False, [[f"R{n}.>", "px", ["px"]]]))
        x.sock.send(lone(range(n, n + 1)))
        wait_for(y, n)
        kinds = [
            (f[0], e[0] if f[0] == wire.ADVERT else e[3])
            for f in y.frames
            for e in (f[2] if f[0] == wire.ADVERT else f[1][0][5])
        ]
        assert kinds.index((wire.ADVERT, f"R{n}.>")) < kinds.index((wire.MSGR, n)), kinds
    assert [m[4] for m in y.seqs()] == list(range(1, 13))


def test_a_message_received_whole_is_the_same_either_way(chain: tuple[Broker, Peer, Peer]) -> None:
    b, x, y = chain
    headers = {"k": "é", "n": [1, 2.5, None], b"raw": {3: True}}
    for s in range(1, 4):
        entries = [[b"\x00" * s, s % 2, headers, s, 1.7e9 + s]]
        x.sock.send(wire.encode_link(wire.MSGR, [["T.h", "px", 1, ["px"], ["py"], entries]]))
        wait_for(y, s)
    assert taken(b) == 2
    got = [f[1][0][5][0] for f in y.frames if f[0] == wire.MSGR]
    assert got == [[b"\x00" * s, s % 2, headers, s, 1.7e9 + s] for s in range(1, 4)]


def test_a_feature_sink_takes_the_general_path(
    retaining_chain: tuple[Broker, Peer, Peer], client_factory: Callable[..., Client]
) -> None:
    b, x, y = retaining_chain
    one_by_one(x, y, range(1, 6))
    assert taken(b) == 0
    log = client_factory(b.endpoint).read("T.>")
    assert [(m.topic, m.id.seq) for m in log] == [("T.a", s) for s in range(1, 6)]


def test_a_durable_opened_later_is_decided_again(
    chain: tuple[Broker, Peer, Peer], client_factory: Callable[..., Client]
) -> None:
    b, x, y = chain
    one_by_one(x, y, range(1, 4))
    assert taken(b) == 2
    got: list[int] = []
    client_factory(b.endpoint).subscribe("T.>", lambda m: got.append(m.id.seq), durable="d1")
    one_by_one(x, y, range(4, 9))
    _received(got, 5)
    time.sleep(0.2)
    assert got == [4, 5, 6, 7, 8]
    assert [m[4] for m in y.seqs()] == list(range(1, 9))
    assert taken(b) == 2  # (its sink takes them: the general path)


def test_a_second_source_of_a_pattern_moves_the_interest_version() -> None:
    # (the engine hears a pattern's first source and its last, not a sink's in between:
    # the version is how the shortcut learns that a feature now takes the messages)
    engine = RoutingEngine("B")
    interest = LocalInterest(engine)
    interest.add("T.>", "clients")
    route = engine.route("T.a", ("px",), None)
    versions = [interest.version]
    interest.add("T.>", "retain")
    versions.append(interest.version)
    assert engine.route("T.a", ("px",), None) is route
    interest.drop("T.>", "retain")
    interest.add("T.>", "clients")  # (already a source: no change)
    versions.append(interest.version)
    assert versions == [1, 2, 3]


def test_long_heads_loops_and_long_runs_take_the_general_path(
    chain: tuple[Broker, Peer, Peer],
) -> None:
    b, x, y = chain
    me = b.broker_id
    x.sock.send(lone(range(1, 2)))
    wait_for(y, 1)
    # a loop: our own ID on its path (dropped and counted, never learnt)
    loop = [["T.a", "px", 1, ["px", me, "px"], ["py"], [[b"m", 0, None, 2, 1.7e9]]]]
    for _ in range(2):
        x.sock.send(wire.encode_link(wire.MSGR, loop))
    # a head over HEAD_MAX_BYTES (a long path of other nodes)
    far = [f"n{i}" + "x" * 420 for i in range(5)]  # (within the ttl: 6 hops)
    x.sock.send(
        wire.encode_link(
            wire.MSGR, [["T.a", "o2", 1, [*far, "px"], ["py"], [[b"m", 0, None, 1, 1.7e9]]]]
        )
    )
    x.sock.send(
        wire.encode_link(
            wire.MSGR, [["T.a", "o2", 1, [*far, "px"], ["py"], [[b"m", 0, None, 2, 1.7e9]]]]
        )
    )
    wait_for(y, 3)
    # a run longer than a link frame's LINK_BATCH: the general path cuts it
    x.sock.send(lone(range(2, 602)))
    wait_for(y, 603)
    assert [m[4] for m in y.seqs() if m[1] == "px"] == list(range(1, 602))
    assert [m[4] for m in y.seqs() if m[1] == "o2"] == [1, 2]
    assert b.status()["counters"]["dropped"].get("loop") == 2
    assert taken(b) == 0
    assert len(b.call(lambda n: n.shortcut._heads)) == 2  # (T.a of px; the loop, as None)


def test_large_frames_read_as_views_go_by_the_shortcut_at_every_hop(
    broker_factory: BrokerFactory, client_factory: Callable[..., Client]
) -> None:
    """A flood's link frames are large, and a dialed link reads a large frame after a
    large one as a view of libzmq's message (zbroker.wire.reading): X -> A -> B -> C, B
    dialing A and C dialing B, runs of 300 messages of 512 B; every hop takes each frame
    after its first by the shortcut, and C's subscriber gets each message once, in order,
    each run in one delivery frame (longer than a delivery frame the general path packs:
    as it does with a run relayed whole)."""
    a = broker_factory(broker_id="a")
    b = broker_factory(broker_id="b", links=(LinkConfig(name="ba", uri=a.endpoint),))
    c = broker_factory(broker_id="c", links=(LinkConfig(name="cb", uri=b.endpoint),))
    got: list[tuple[int, bytes]] = []
    client_factory(c.endpoint).subscribe("T.>", lambda m: got.append((m.id.seq, m.payload)))
    deadline = time.monotonic() + WAIT
    while not a.call(lambda n: n.engine.has_route("T.>", "c")):
        assert time.monotonic() < deadline, "C's interest never reached A"
        time.sleep(0.02)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        x = Peer(ctx, a, "px")
        k, size = 300, 512
        for i in range(4):
            seqs = range(1 + i * k, 1 + (i + 1) * k)
            entries = [[s.to_bytes(4, "big") * (size // 4), 0, None, s, 1.7e9] for s in seqs]
            frame = wire.encode_link(wire.MSGR, [["T.a", "px", 1, ["px"], None, entries]])
            assert len(frame) > VIEW_BYTES
            x.sock.send(frame)
            _received(got, seqs.stop - 1)  # (each frame in a pass of its own)
        time.sleep(0.2)  # (nothing more may come)
    finally:
        ctx.destroy(linger=0)
    assert [s for s, _ in got] == list(range(1, 4 * k + 1))
    assert all(p == s.to_bytes(4, "big") * (size // 4) for s, p in got)
    # at each node the first frame went the general way (the origin was new there); at
    # B and C the next three were read as views (from the source, frames this long are
    # not walked: all go the general way)
    assert [taken(n) for n in (a, b, c)] == ([3] * 3 if WALK_MAX_BYTES is None else [0] * 3)
    assert c.status()["counters"]["delivered"] == 4 * k
    assert [n.status()["counters"]["forwarded"] for n in (a, b)] == [4 * k, 4 * k]
