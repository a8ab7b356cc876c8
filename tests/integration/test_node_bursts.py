"""Integration tests of one node under load: stalled subscribers, publish batches at a
burst's end and at close, batch frames, raw TCP junk. An in-thread Broker, real ZeroMQ
sockets on 127.0.0.1, real Clients (and raw zmq sockets).

How they wait, and how they prove that nothing more arrives: :mod:`.one_node`.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections import Counter

import zmq

from tests.helpers import Collector
from tests.integration.one_node import (
    HOST,
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    counters,
)
from zbroker import (
    Broker,
    Client,
    ClientClosed,
    Message,
    wire,
)


def test_stalled_subscriber_does_not_cost_healthy_subscribers_messages(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    b = broker_factory(hwm=50)
    release = threading.Event()
    stalled_calls = [0]

    def stalled(msg: Message) -> None:  # blocks the stalled client's thread
        stalled_calls[0] += 1
        release.wait(30)

    slow = client_factory(b.endpoint, hwm=10)
    fast = client_factory(b.endpoint)
    healthy = Collector()
    try:
        slow.subscribe("SLOW.>", stalled)
        fast.subscribe("SLOW.>", healthy)
        payload = b"p" * 65536
        n = 600
        for i in range(n):
            fast.publish("SLOW.X", payload)
            if i % 20 == 19:
                # pace: let the node and the healthy client catch up (a message the node
                # dropped is counted, so this waits for both outcomes)
                def caught_up(k: int = i + 1) -> bool:
                    c = counters(b)
                    dropped: int = c["dropped"].get("subscriber_queue_full", 0)
                    return bool(c["received"] >= k and len(healthy) + dropped >= k)

                assert wait_until(caught_up, WAIT)
        assert wait_until(
            lambda: len(healthy) + counters(b)["dropped"].get("subscriber_queue_full", 0) >= n,
            WAIT,
        )
        assert counters(b)["dropped"].get("subscriber_queue_full", 0) == 0
        assert len(healthy) == n
        # the stalled subscriber lost only its own copies, and the loss is counted: it sees
        # the gaps in the per-pattern sequence and reports them to the node
        release.set()
        assert wait_until(lambda: stalled_calls[0] >= 1, WAIT)
        before = -1
        while stalled_calls[0] != before:  # let it drain what its queues hold
            before = stalled_calls[0]
            time.sleep(0.3)
        fast.publish("SLOW.X", b"barrier")  # reveals drops at the very end too
        assert wait_until(lambda: stalled_calls[0] + slow.missed == n + 1, WAIT)
        assert slow.missed > 0
        assert wait_until(
            lambda: counters(b)["dropped"].get("slow_subscriber", 0) == slow.missed, WAIT
        )
        assert len(healthy) == n + 1
    finally:
        release.set()


def test_publish_batches_lose_nothing_at_close_or_at_the_end_of_a_burst(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """Publishes made in a tight loop travel in publish batches: the batch a burst leaves
    unfilled is sent by the client thread, and close() sends what is still batched."""
    got = Collector()
    sub = client_factory(broker.endpoint)
    sub.subscribe("PB.>", got)
    pub = client_factory(broker.endpoint)
    assert pub.hello["publish_batch"] == broker.config.max_frame_bytes
    for i in range(1_003):  # not a multiple of the batch size: a tail is left over
        pub.publish("PB.TAIL", b"%d" % i)
    assert got.wait_for(1_003)  # nothing published after the burst: the thread sent it
    closing = Client(broker.endpoint)
    for i in range(2_005):
        closing.publish("PB.CLOSE", b"%d" % i)
    closing.close()  # at once: what is batched must still reach the node
    pub.publish("PB.END", b"barrier")
    assert got.wait_topic("PB.END")
    assert got.wait_for(1_003 + 2_005 + 1)
    assert got.payloads("PB.TAIL") == [b"%d" % i for i in range(1_003)]
    assert got.payloads("PB.CLOSE") == [b"%d" % i for i in range(2_005)]
    assert len(got) == 1_003 + 2_005 + 1


def _flood_until_closed(client: Client, start: threading.Barrier, taken: list[int], k: int) -> None:
    """Publish until the client is closed; count in ``taken[k]`` what publish() took."""
    start.wait()
    with contextlib.suppress(ClientClosed):
        while True:
            client.publish("RACE.X", b"x")
            taken[k] += 1


def test_every_publish_that_returned_while_another_thread_closes_is_delivered(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """Publishes racing close() from another thread: one that joined a batch after
    close() had handed the batch to the socket, and before the socket closed, returned
    as taken and was lost with the socket (a few trials in ten lost some). Now each one
    either reaches the node or raises ClientClosed."""
    got = Collector()
    client_factory(broker.endpoint).subscribe("RACE.>", got, initial=False)
    for trial in range(30):
        got.clear()
        closing = Client(broker.endpoint)
        taken = [0, 0, 0]
        start = threading.Barrier(len(taken) + 1)
        threads = [
            threading.Thread(target=_flood_until_closed, args=(closing, start, taken, k))
            for k in range(len(taken))
        ]
        for thread in threads:
            thread.start()
        start.wait()
        time.sleep(0.02)  # (a flood is under way: batches form)
        closing.close()
        for thread in threads:
            thread.join(WAIT)
        assert got.wait_for(sum(taken), WAIT), (trial, sum(taken), len(got))
        assert len(got) == sum(taken)


def test_a_catch_up_publish_left_in_a_batch_wakes_the_client_thread(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """A paced publisher catching up after a late wake-up makes two publishes within
    PUBLISH_LINGER and then pauses: the second waits in a batch nobody fills. The client
    thread sends that tail and disarms its fast polls, so the next pair's batch wakes it
    again (rather than waiting for a 1 ms poll, which was the latency tail of a paced
    publisher). Every message arrives once, in order."""
    got = Collector()
    sub = client_factory(broker.endpoint)
    sub.subscribe("CATCHUP.>", got)
    pub = client_factory(broker.endpoint)
    batched = 0
    for r in range(30):
        time.sleep(0.005)  # a pause: the first publish of the pair leaves alone
        pub.publish("CATCHUP.X", b"%d" % (2 * r))
        pub.publish("CATCHUP.X", b"%d" % (2 * r + 1))
        batched += bool(pub._publisher.batch_state()[0])
        assert got.wait_for(2 * r + 2)
        # read under the publisher's lock: the tail left under it, and the flusher disarmed
        assert not pub._publisher.batch_state()[1], f"round {r}: still armed after its tail left"
    assert batched > 0  # the pairs did use a batch (the second came within the linger)
    assert got.payloads("CATCHUP.X") == [b"%d" % i for i in range(60)]
    assert len(got) == 60


def test_a_burst_is_delivered_in_batch_frames_numbered_per_message(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """What a subscriber's socket receives for a burst: delivery frames holding one or
    several messages of the pattern (wire.decode_delivery_batch), every message once, in
    order, their pattern sequence numbers 1..n without a gap."""
    n = 20_000
    pub = client_factory(broker.endpoint)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 0)  # nothing may be dropped toward this test's socket
    try:
        sub.connect(f"tcp://{HOST}:{broker.ports['deliver']}")
        sub.subscribe(b"BURST.>\0")
        assert wait_until(lambda: "BURST.>" in pub.status()["subscriptions"]["patterns"], WAIT)
        for i in range(n):
            pub.publish("BURST.X", b"%d" % i)
        seqs: list[int] = []
        payloads: list[bytes] = []
        sizes: Counter[int] = Counter()
        deadline = time.monotonic() + WAIT
        while len(payloads) < n and time.monotonic() < deadline:
            if not sub.poll(100):
                continue
            pattern, first, envelopes = wire.decode_delivery_batch(sub.recv())
            assert pattern == "BURST.>"
            seqs.extend(range(first, first + len(envelopes)))
            payloads.extend(e[1] for e in envelopes)
            sizes[len(envelopes)] += 1
        assert payloads == [b"%d" % i for i in range(n)]
        assert seqs == list(range(1, n + 1))
        assert not sub.poll(200)  # nothing more (no duplicate)
        # a burst of 20,000 cannot be handled one message per poll pass
        assert sum(k for k in sizes if k > 1) > 0, sizes
        assert max(sizes) <= wire.DELIVERY_BATCH
    finally:
        sub.close()


def test_a_stalled_subscriber_counts_batches_it_lost_in_messages(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Messages travel in batch frames; a stalled subscriber's queue drops whole
    frames, and the gap it counts (and reports to the node) is in messages, exactly."""
    b = broker_factory(hwm=20)
    release = threading.Event()
    stalled_calls = [0]

    def stalled(msg: Message) -> None:
        stalled_calls[0] += 1
        release.wait(30)

    slow = client_factory(b.endpoint, hwm=5)
    pub = client_factory(b.endpoint)
    try:
        slow.subscribe("SMALL.>", stalled)
        # 4 KB each: 16 to a batch frame, 24 MB in all, more than the socket buffers hold
        n = 6_000
        for i in range(n):
            pub.publish("SMALL.X", b"%d" % i + b"." * 4000)
        assert wait_until(lambda: counters(b)["delivered"] >= n, WAIT)
        release.set()
        before = -1
        while stalled_calls[0] != before:  # let it drain what its queues hold
            before = stalled_calls[0]
            time.sleep(0.3)
        pub.publish("SMALL.X", b"barrier")  # reveals a drop at the very end too
        assert wait_until(lambda: stalled_calls[0] + slow.missed == n + 1, WAIT)
        assert slow.missed > 0
        assert wait_until(
            lambda: counters(b)["dropped"].get("slow_subscriber", 0) == slow.missed, WAIT
        )
    finally:
        release.set()


def test_raw_tcp_junk_is_survived(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Bytes that are not ZeroMQ at all, on every port. libzmq parses a stream that does not
    open with a ZMTP/3 greeting as ZMTP/1.0 (no handshake, no socket type), so some junk may
    reach the node as frames and be counted; the node must keep serving correctly."""
    rng = random.Random(7)
    ports = broker.ports
    for port in ports.values():
        for _ in range(5):
            with socket.create_connection((HOST, port), timeout=5) as raw:
                raw.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2048))))
    # and connections that send half a greeting, then nothing
    stuck = [socket.create_connection((HOST, port), timeout=5) for port in ports.values()]
    try:
        for s in stuck:
            s.sendall(b"\xff\x00\x00")
        client = client_factory(broker.endpoint)
        got = Collector()
        client.subscribe("RAW.>", got)
        for i in range(100):
            client.publish("RAW.X", i)
        client.publish("RAW.END", b"barrier")
        assert got.wait_topic("RAW.END")
        assert got.payloads("RAW.X") == list(range(100))
        assert broker.running
        c = counters(broker)
        assert c["received"] == 101
        assert c["delivered"] == 101
        bad = sum(v for k, v in c["dropped"].items() if k.startswith("bad_input."))
        assert c["bad_input"] == bad
    finally:
        for s in stuck:
            s.close()
