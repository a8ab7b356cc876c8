"""The shortcut at the publishing node (Shortcut.publish, zbroker/node/shortcut.py): a
client's publish frame, or batch of one run, whose topic's route is one link out and local
subscribers goes on as it came, numbered here: every message once, in order, with the
seqs and counters the general path gives; bad topics, queue groups and a drain that the
general path began take the general path."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import msgpack
import pytest
import zmq

from zbroker import Broker, Client, wire
from zbroker.node.shortcut import PUBLISH_LONG_ENTRIES

from .fuzz_common import HOST, WAIT, counters
from .test_shortcut import Peer, _chain, _received, taken, wait_for

BrokerFactory = Callable[..., Broker]


@pytest.fixture
def node(broker_factory: BrokerFactory) -> Iterator[tuple[Broker, Peer, zmq.Socket[bytes]]]:
    """A node with Y linked downstream (holding T.>) and a raw PUSH to its publish port."""
    for b, _x, y in _chain(broker_factory()):
        push = y.sock.context.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(f"tcp://{HOST}:{b.ports['publish']}")
        yield b, y, push


def publish_frame(topic: str, payload: bytes, headers: dict[str, str] | None = None) -> bytes:
    frame: bytes = msgpack.packb([topic, payload, 0, headers])
    return frame


def run_frame(topic: str, payloads: list[bytes]) -> bytes:
    frame: bytes = msgpack.packb([[topic, [[p, 0, None] for p in payloads]]])
    return frame


def test_publishes_go_on_as_they_came_numbered_here(
    node: tuple[Broker, Peer, zmq.Socket[bytes]], client_factory: Callable[..., Client]
) -> None:
    b, y, push = node
    got: list[tuple[int, bytes, dict[str, str]]] = []
    client_factory(b.endpoint).subscribe(
        "T.>", lambda m: got.append((m.id.seq, m.payload, m.headers))
    )
    before = counters(b)
    seq0 = b.call(lambda n: n.counters.seq)
    push.send(publish_frame("T.a", b"one", {"k": "v"}))
    wait_for(y, 1)
    push.send(run_frame("T.a", [b"two", b"three"]))
    wait_for(y, 3)
    push.send(publish_frame("T.b", b"four"))
    wait_for(y, 4)
    _received(got, 4)
    want = [(seq0 + 1, b"one", {"k": "v"}), (seq0 + 2, b"two", {}), (seq0 + 3, b"three", {})]
    assert got == [*want, (seq0 + 4, b"four", {})]
    me = b.broker_id
    frames = [f[1] for f in y.frames if f[0] == wire.MSGR]
    assert [[r[:5] for r in f] for f in frames] == [
        [["T.a", me, b.call(lambda n: n.incarnation), [me], ["py"]]]
    ] * 2 + [[["T.b", me, b.call(lambda n: n.incarnation), [me], ["py"]]]]
    entries = [e for f in frames for e in f[0][5]]
    assert [e[:4] for e in entries] == [
        [b"one", 0, {"k": "v"}, seq0 + 1],
        [b"two", 0, None, seq0 + 2],
        [b"three", 0, None, seq0 + 3],
        [b"four", 0, None, seq0 + 4],
    ]
    assert all(abs(e[4] - time.time()) < WAIT for e in entries)
    assert taken(b) == 3  # (frames)
    after = counters(b)
    assert after["received"] - before["received"] == 4
    assert b.call(lambda n: n.counters.seq) - seq0 == 4
    assert after["forwarded"] - before["forwarded"] == 4
    assert after["delivered"] - before["delivered"] == 4


def test_a_bad_topic_takes_the_general_path(node: tuple[Broker, Peer, zmq.Socket[bytes]]) -> None:
    b, y, push = node
    bad = counters(b)["dropped"].get("bad_input.bad_topic", 0)
    push.send(publish_frame("T..a", b"x"))
    push.send(publish_frame("T.a", b"y"))
    wait_for(y, 1)
    assert counters(b)["dropped"].get("bad_input.bad_topic", 0) == bad + 1
    assert [e[0] for f in y.frames if f[0] == wire.MSGR for e in f[1][0][5]] == [b"y"]


def test_a_queue_group_takes_the_general_path(
    node: tuple[Broker, Peer, zmq.Socket[bytes]], client_factory: Callable[..., Client]
) -> None:
    b, y, push = node
    got: list[bytes] = []
    client_factory(b.endpoint).subscribe("T.>", lambda m: got.append(m.payload), queue="g")
    deadline = time.monotonic() + WAIT
    while not b.call(lambda n: n.engine.groups.active):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for k in range(5):
        push.send(publish_frame("T.a", b"%d" % k))
    wait_for(y, 5)
    _received(got, 5)
    assert got == [b"%d" % k for k in range(5)]
    assert taken(b) == 0


def test_many_publishes_arrive_once_in_order_whichever_way_they_went(
    node: tuple[Broker, Peer, zmq.Socket[bytes]], client_factory: Callable[..., Client]
) -> None:
    b, y, push = node
    got: list[bytes] = []  # (per subscription: order holds within one)
    client = client_factory(b.endpoint)
    client.subscribe("L.>", lambda m: got.append(m.payload))  # (L: this node's alone)
    want: list[bytes] = []
    for k in range(60):  # bursts, sent back to back: a drain takes a burst or part of one
        one = b"%d" % k
        push.send(publish_frame("L.a", one + b"a"))  # (the drain's first: the shortcut)
        # two runs in one frame take the general path, and what follows in its drain too
        push.send(msgpack.packb([["L.a", [[one + b"b", 0, None]]], ["T.b", [[one, 0, None]]]]))
        push.send(run_frame("L.a", [one + b"c"]))
        want += [one + b"a", one + b"b", one + b"c"]
        wait_for(y, k + 1)
    _received(got, len(want))
    time.sleep(0.2)
    assert got == want
    assert [e[0] for f in y.frames if f[0] == wire.MSGR for r in f[1] for e in r[5]] == [
        b"%d" % k for k in range(60)
    ]
    assert taken(b) >= 60  # (each burst's first, at least)


def test_long_batches_go_by_the_shortcut_where_c_writes_their_entries(
    node: tuple[Broker, Peer, zmq.Socket[bytes]], client_factory: Callable[..., Client]
) -> None:
    """A flood's batch (here 100 publishes of 600 B) whose topic only local subscribers
    want goes by the shortcut where C writes its numbered entries: one delivery frame,
    numbered as the general path numbers; one bound for a link only, too (held to leave
    with the drain's others as one frame: the next test)."""
    b, y, push = node
    got: list[tuple[int, bytes]] = []
    client_factory(b.endpoint).subscribe("L.>", lambda m: got.append((m.id.seq, m.payload)))
    before = counters(b)
    seq0 = b.call(lambda n: n.counters.seq)
    batches = [[b"%04d" % k + b"." * 596 for k in range(i * 100, i * 100 + 100)] for i in range(3)]
    for i, payloads in enumerate(batches):
        push.send(run_frame("L.a", payloads))
        _received(got, 100 * (i + 1))  # (each batch in a drain of its own)
    push.send(run_frame("T.a", batches[0]))
    wait_for(y, 100)
    time.sleep(0.2)  # (nothing more may come)
    local = [p for batch in batches for p in batch]
    assert got == [(seq0 + 1 + i, p) for i, p in enumerate(local)]
    assert [(e[3], e[0]) for f in y.frames if f[0] == wire.MSGR for e in f[1][0][5]] == [
        (seq0 + 301 + i, p) for i, p in enumerate(batches[0])
    ]
    assert taken(b) == (4 if PUBLISH_LONG_ENTRIES else 0)
    after = counters(b)
    assert after["received"] - before["received"] == 400
    assert after["delivered"] - before["delivered"] == 300
    assert after["forwarded"] - before["forwarded"] == 100


def test_a_drains_batches_bound_for_a_link_leave_as_one_frame(
    node: tuple[Broker, Peer, zmq.Socket[bytes]],
) -> None:
    """Five batches waiting in one drain (the node busy meanwhile), bound for Y only: one
    link frame of their 500 messages, numbered in order, as the general path packs them;
    where C writes the entries, each batch went by the shortcut (held, then sent when the
    drain ended)."""
    b, y, push = node
    before = counters(b)
    seq0 = b.call(lambda n: n.counters.seq)
    frames_before = len([f for f in y.frames if f[0] == wire.MSGR])
    busy = threading.Thread(target=lambda: b.call(lambda n: time.sleep(0.5)))
    busy.start()
    time.sleep(0.1)  # (the node thread is in the call: the batches wait in its socket)
    batches = [[b"%04d" % k + b"," * 196 for k in range(i * 100, i * 100 + 100)] for i in range(5)]
    for payloads in batches:
        push.send(run_frame("T.a", payloads))
    busy.join()
    wait_for(y, 500)
    time.sleep(0.2)  # (nothing more may come)
    frames = [f for f in y.frames if f[0] == wire.MSGR][frames_before:]
    assert len(frames) == 1 and len(frames[0][1]) == 1
    me = b.broker_id
    assert frames[0][1][0][:5] == ["T.a", me, b.call(lambda n: n.incarnation), [me], ["py"]]
    sent_on = [(e[3], e[0]) for e in frames[0][1][0][5]]
    assert sent_on == [(seq0 + 1 + i, p) for i, p in enumerate(p for bt in batches for p in bt)]
    assert len({e[4] for e in frames[0][1][0][5]}) <= 5  # (one receive time per batch)
    assert taken(b) == (5 if PUBLISH_LONG_ENTRIES else 0)
    after = counters(b)
    assert after["received"] - before["received"] == 500
    assert after["forwarded"] - before["forwarded"] == 500
    assert b.call(lambda n: n.counters.seq) - seq0 == 500


def test_held_batches_leave_before_what_follows_them_in_the_drain(
    node: tuple[Broker, Peer, zmq.Socket[bytes]],
) -> None:
    """In one drain: a long batch (held), a lone publish (sent at once: the held batch
    first), a long batch, a frame of two runs (the general way from there on: the held
    batch first), a long batch. Y gets every message once, in the order published."""
    b, y, push = node
    seq0 = b.call(lambda n: n.counters.seq)
    frames_before = len([f for f in y.frames if f[0] == wire.MSGR])
    busy = threading.Thread(target=lambda: b.call(lambda n: time.sleep(0.5)))
    busy.start()
    time.sleep(0.1)
    long = [[b"%d.%d" % (i, k) for k in range(20)] for i in range(3)]
    push.send(run_frame("T.a", long[0]))
    push.send(publish_frame("T.a", b"lone"))
    push.send(run_frame("T.a", long[1]))
    push.send(msgpack.packb([["T.a", [[b"two.a", 0, None]]], ["T.b", [[b"two.b", 0, None]]]]))
    push.send(run_frame("T.a", long[2]))
    busy.join()
    want = [*long[0], b"lone", *long[1], b"two.a", b"two.b", *long[2]]
    wait_for(y, len(want))
    time.sleep(0.2)  # (nothing more may come)
    frames = [f for f in y.frames if f[0] == wire.MSGR][frames_before:]
    got = sorted((e[3], e[0]) for f in frames for r in f[1] for e in r[5])
    assert [p for _s, p in got] == want
    assert [s for s, _p in got] == list(range(seq0 + 1, seq0 + 1 + len(want)))
    # each frame's seqs ascend and every frame follows the one before on the link
    seqs = [e[3] for f in frames for r in f[1] for e in r[5]]
    assert seqs == sorted(seqs)


def test_a_local_batch_no_delivery_frame_holds_takes_the_general_path(
    node: tuple[Broker, Peer, zmq.Socket[bytes]],
) -> None:
    """A batch of more messages than a delivery frame holds (another client than
    zbroker's may send one; zbroker's sends at most 64) whose topic only a local
    subscriber wants is cut into delivery frames as the general path cuts them (256
    messages, then the rest), not delivered whole: the same frames compiled or not."""
    b, _y, push = node
    sub = push.context.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(f"tcp://{HOST}:{b.ports['deliver']}")
    sub.subscribe(b"L.>\0")
    try:
        deadline = time.monotonic() + WAIT
        while not sub.poll(50):  # (a SUB's interest reaches the node a moment later)
            assert time.monotonic() < deadline, "the subscription never took"
            push.send(publish_frame("L.probe", b"p"))
        while sub.poll(200):
            sub.recv()  # (the probes)
        before, seq0 = taken(b), b.call(lambda n: n.counters.seq)
        push.send(run_frame("L.a", [b"%04d" % k for k in range(300)]))
        frames: list[tuple[int, list[bytes]]] = []
        while sum(len(p) for _, p in frames) < 300 and sub.poll(int(WAIT * 1000)):
            _, first, items, runs = wire.decode_delivery_items(sub.recv())
            assert runs
            frames.append((first, [e[0] for item in items for e in item[3]]))
        # (the pattern's numbering went on from the probes': frame 2 follows frame 1)
        assert [len(p) for _, p in frames] == [256, 44]
        assert frames[1][0] == frames[0][0] + 256
        assert [p for _, ps in frames for p in ps] == [b"%04d" % k for k in range(300)]
        assert b.call(lambda n: n.counters.seq) == seq0 + 300
        assert taken(b) == before
    finally:
        sub.close()
