"""A network of brokers at its limits: large messages and persistent ones across links in
both directions, link frames cut to the limit the peer states, interest tables larger than
one frame, and a reply through a relay that never overtakes the interest in it. In-thread
nodes (:mod:`.network`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.helpers import Collector
from tests.integration.network import (
    WAIT,
    ClientFactory,
    Net,
    WaitUntil,
    counters,
    endpoint,
    has_route,
    link_named,
    routes,
    wait_links,
)
from tests.integration.network import net as net  # (the fixture)
from zbroker import Broker, Client

# -- large messages, large tables -----------------------------------------------------------------


def durable_payloads(broker: Broker, name: str) -> list[bytes]:
    """The payloads a node holds for durable subscription ``name``, oldest first."""

    def read(node: Any) -> list[bytes]:
        node.store.commit()
        return [r[2] for r in node.store.pending_durable(name, 0, 1_000)]

    result: list[bytes] = broker.call(read)
    return result


#: a small frame limit for these tests: the same rules, with megabytes fewer
SMALL_FRAMES = 64 * 1024


def test_large_messages_cross_a_link_whole_in_both_directions(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Messages of 1-60 KB, and one of the largest size a publisher may send, with the
    frame limit at 64 KiB: a pass's messages for a link leave in frames cut by bytes (they
    were cut by count only, and a frame of many large messages was refused whole by the
    next node), and a link frame may exceed the limit by what a message gains on the way
    (path, IDs). Both directions: the acceptor's ROUTER and the dialer's DEALER."""
    a = net.start("A", max_frame_bytes=SMALL_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    on_a, on_b = Collector(), Collector()
    client_factory(a.endpoint).subscribe("BIG.FROMB.>", on_a)
    client_factory(b.endpoint).subscribe("BIG.FROMA.>", on_b)
    assert wait_until(
        lambda: has_route(b, "BIG.FROMB.>", "A") and has_route(a, "BIG.FROMA.>", "B"), WAIT
    )
    n = 200
    sizes = [1_000 + (i * 7_919) % 59_000 for i in range(n)]
    largest = SMALL_FRAMES - 64  # a publish frame just within the limit
    pa, pb = client_factory(a.endpoint), client_factory(b.endpoint)
    for publisher, topic in ((pa, "BIG.FROMA.X"), (pb, "BIG.FROMB.X")):
        for i, size in enumerate(sizes):
            publisher.publish(topic, bytes([i % 256]) * size)
        publisher.publish(topic, b"L" * largest)
        publisher.publish(topic + ".END", b"end")
    for got, topic in ((on_b, "BIG.FROMA.X"), (on_a, "BIG.FROMB.X")):
        assert got.wait_topic(topic + ".END"), got.topics()
        payloads = got.payloads(topic)
        assert [len(p) for p in payloads] == [*sizes, largest]
        assert [p[0] for p in payloads[:n]] == [i % 256 for i in range(n)]
        assert payloads[-1] == b"L" * largest
        assert got.topics() == {topic: n + 1, topic + ".END": 1}
    for node in (a, b):
        c = counters(node)
        assert c["bad_input"] == 0 and c["dropped"] == {}, c
        assert c["forwarded"] == n + 2 and c["duplicates"] == 0


def test_large_persistent_messages_cross_a_link(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Store-and-forward frames are cut by bytes too: a PMSGS frame the next node refused
    was resent, and refused, every few seconds for ever."""
    a = net.start("A", max_frame_bytes=SMALL_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    sub = client_factory(b.endpoint)
    sub.subscribe("PBIG.>", Collector(), durable="pbig").unsubscribe()  # kept on B
    assert wait_until(lambda: has_route(a, "PBIG.>", "B"), WAIT)
    n = 40
    sizes = [20_000 + (i * 3_001) % 40_000 for i in range(n)]
    pub = client_factory(a.endpoint)
    pending = [
        pub.publish("PBIG.X", bytes([i]) * size, persistent=True) for i, size in enumerate(sizes)
    ]
    for fut in pending:
        fut.result(WAIT)

    def stored() -> list[bytes]:
        return durable_payloads(b, "pbig")

    assert wait_until(lambda: len(stored()) >= n, WAIT), len(stored())
    assert stored() == [bytes([i]) * size for i, size in enumerate(sizes)]
    assert wait_until(lambda: a.status()["forward"]["held"] == 0, WAIT)
    for node in (a, b):
        c = counters(node)
        assert c["bad_input"] == 0 and c["dropped"] == {}, c


#: a larger limit, for the node that sends to a SMALL_FRAMES one
LARGE_FRAMES = 1024 * 1024


def test_link_frames_fit_the_limit_the_peer_states(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Nodes with different max_frame_bytes: each states its limit in the link handshake
    and the other cuts what it sends to fit. A (1 MiB) sent B (64 KiB) frames of up to
    256 KiB, which B refused whole: most of 200 messages of 1-60 KB were lost at B. A
    message within A's limit but over B's is dropped at A, where it is counted and logged
    (it was counted at B as bad input, with every message of its frame)."""
    a = net.start("A", max_frame_bytes=LARGE_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    assert link_named(a, "ba")["peer_max_frame_bytes"] == SMALL_FRAMES
    assert link_named(b, "ba")["peer_max_frame_bytes"] == LARGE_FRAMES
    got = Collector()
    client_factory(b.endpoint).subscribe("MIX.>", got)
    assert wait_until(lambda: has_route(a, "MIX.>", "B"), WAIT)
    n = 200
    sizes = [1_000 + (i * 7_919) % 59_000 for i in range(n)]
    too_large = 3 * SMALL_FRAMES  # within A's limit, over what B takes on a link
    pub = client_factory(a.endpoint)
    for i, size in enumerate(sizes):
        pub.publish("MIX.X", bytes([i % 256]) * size)
        if i % 50 == 49:
            pub.publish("MIX.X", b"T" * too_large)
    pub.publish("MIX.END", b"end")
    assert got.wait_topic("MIX.END"), got.topics()
    payloads = got.payloads("MIX.X")
    assert [len(p) for p in payloads] == sizes
    assert [p[0] for p in payloads] == [i % 256 for i in range(n)]
    assert got.topics() == {"MIX.X": n, "MIX.END": 1}
    ca, cb = counters(a), counters(b)
    assert ca["dropped"] == {"link_frame_too_large": 4}, ca
    assert link_named(a, "ba")["drops"] == 4
    assert cb["bad_input"] == 0 and cb["dropped"] == {}, cb
    assert ca["forwarded"] == n + 1


def test_persistent_messages_over_the_peers_limit_do_not_block_the_queue(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Store-and-forward toward a node with a smaller max_frame_bytes: frames fit its
    limit, and an entry that can never fit is dropped from the queue (counted) once the
    entries before it are acknowledged. It was sent, refused and resent for ever, and every
    persistent message behind it waited with it."""
    a = net.start("A", max_frame_bytes=LARGE_FRAMES)
    b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
    wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})
    sub = client_factory(b.endpoint)
    sub.subscribe("PMIX.>", Collector(), durable="pmix").unsubscribe()  # kept on B
    assert wait_until(lambda: has_route(a, "PMIX.>", "B"), WAIT)
    n = 30
    sizes = [20_000 + (i * 3_001) % 40_000 for i in range(n)]
    pub = client_factory(a.endpoint)
    pending = []
    for i, size in enumerate(sizes):
        pending.append(pub.publish("PMIX.X", bytes([i]) * size, persistent=True))
        if i in (0, 14):  # one right behind the first, one in the middle
            pending.append(pub.publish("PMIX.X", b"T" * (3 * SMALL_FRAMES), persistent=True))
    for fut in pending:
        fut.result(WAIT)

    def stored() -> list[bytes]:
        return durable_payloads(b, "pmix")

    assert wait_until(lambda: len(stored()) >= n, WAIT), len(stored())
    assert stored() == [bytes([i]) * size for i, size in enumerate(sizes)]
    assert wait_until(lambda: a.status()["forward"]["held"] == 0, WAIT)
    fa, fb = a.status()["forward"], b.status()["forward"]
    assert fa["dropped_too_large"] == 2 and fa["dropped_full"] == 0, fa
    assert fb["lost"] == 2, fb  # B saw the sequence skip them
    assert counters(a)["dropped"] == {"link_frame_too_large": 2}
    cb = counters(b)
    assert cb["bad_input"] == 0 and cb["dropped"] == {}, cb


def test_an_interest_table_fits_the_limit_of_the_neighbour_it_goes_to(
    net: Net, wait_until: WaitUntil
) -> None:
    """A (1 MiB frames) with 4,000 subscriptions (about 200 KB of table) gains a neighbour
    whose limit is 64 KiB: the advertisement is cut for the neighbour's limit, not A's."""
    import zmq

    n = 4_000
    a = net.start("A", max_frame_bytes=LARGE_FRAMES)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SNDHWM, 0)
    try:
        sub.connect(endpoint(a.ports["deliver"]))
        for i in range(n):
            sub.setsockopt(zmq.SUBSCRIBE, f"TABLE.EXCHANGE.SYMBOL{i:07d}.>".encode() + b"\0")
        assert wait_until(lambda: a.status()["subscriptions"]["count"] == n, WAIT)
        b = net.start("B", net.link("B", "A"), max_frame_bytes=SMALL_FRAMES)
        wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})

        def learned() -> int:
            return sum(1 for r in routes(b) if r["origin"] == "A" and r["link"] == "ba")

        assert wait_until(lambda: learned() == n, WAIT), learned()
        assert counters(b)["bad_input"] == 0 and counters(b)["dropped"] == {}
    finally:
        sub.close()


def test_a_large_interest_table_reaches_a_new_neighbour(net: Net, wait_until: WaitUntil) -> None:
    """A node with 30,000 subscriptions (its table encodes to about 1.3 MB) gains a
    neighbour: the first, full advertisement leaves in frames under the neighbour's
    max_frame_bytes (1 MiB). It was one frame, refused whole: the link came up and the
    neighbour knew none of the interest behind it."""
    import zmq

    n = 30_000
    a = net.start("A")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)  # subscribes as the client library does (pattern NUL)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SNDHWM, 0)  # no subscription may be lost on our side
    try:
        sub.connect(endpoint(a.ports["deliver"]))
        patterns = [f"TABLE.EXCHANGE.SYMBOL{i:07d}.>" for i in range(n)]
        for p in patterns:
            sub.setsockopt(zmq.SUBSCRIBE, p.encode() + b"\0")
        assert wait_until(lambda: a.status()["subscriptions"]["count"] == n, WAIT)
        b = net.start("B", net.link("B", "A"))
        wait_links(wait_until, {a: {("ba", "B")}, b: {("ba", "A")}})

        def learned() -> int:
            return sum(1 for r in routes(b) if r["origin"] == "A" and r["link"] == "ba")

        assert wait_until(lambda: learned() == n, WAIT), learned()
        assert counters(b)["bad_input"] == 0
        assert counters(b)["dropped"] == {}
        # and messages follow it: one on the last pattern, published on B, arrives at A
        last = f"TABLE.EXCHANGE.SYMBOL{n - 1:07d}.X"
        client = Client(b.endpoint)
        try:
            client.publish(last, b"found")
            assert sub.poll(int(WAIT * 1000)), "nothing delivered on A"
            frame = sub.recv()
            assert frame.startswith(f"TABLE.EXCHANGE.SYMBOL{n - 1:07d}.>".encode() + b"\0")
            assert b"found" in frame
        finally:
            client.close()
    finally:
        sub.close()


def test_a_reply_through_a_relay_never_overtakes_the_interest_in_it(
    net: Net, client_factory: Callable[..., Client], wait_until: WaitUntil
) -> None:
    """Request/reply across a relay (A - B - C): a requester on A subscribes to a fresh
    reply topic (``subscribe()`` has returned), then publishes its request; the service on
    C answers at once. Interest that reached a node before a message must reach the next
    node before that message: a relay that got the new interest and the request in one
    pass used to send the request first, so C answered before it knew anyone wanted the
    reply, and the reply reached nobody (about 1 in 300, counted nowhere)."""
    a = net.start("A", net.link("A", "B"))
    b = net.start("B", net.link("B", "C"))
    c = net.start("C")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    service = client_factory(c.endpoint)
    service.subscribe("REQ.>", lambda m: service.publish(m.payload.decode(), b"reply"))
    assert wait_until(lambda: has_route(a, "REQ.>", "C", hops=2), WAIT), routes(a)
    requester = client_factory(a.endpoint)
    background = client_factory(a.endpoint)
    lost = []
    for i in range(600):
        got = threading.Event()

        def on_reply(m: Any, got: threading.Event = got) -> None:
            got.set()

        sub = requester.subscribe(f"REPLY.{i}", on_reply)
        requester.publish(f"REQ.{i}", f"REPLY.{i}".encode())
        background.publish("NOISE.X", b"n")  # traffic in the same passes
        if not got.wait(2.0):
            lost.append(i)
        sub.unsubscribe()
    assert lost == [], f"{len(lost)} of 600 replies reached nobody: {lost[:10]}"
