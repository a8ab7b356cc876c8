"""Half-open client connections on one in-thread node: a queue-group member or a durable
consumer whose control connection goes silent without closing (its host lost, a
partition: a :class:`~.freezing_proxy.FreezingProxy` that freezes) is closed by the
node's ZMTP heartbeat, and its probe then finds it gone: a queue member's share is
counted lost (queue groups are at most once), a shared durable consumer's goes to the
live one and an exclusive durable opens for another consumer, flagged redelivered. A
member whose callback merely takes longer than the heartbeat timeout keeps its
membership (libzmq answers the node's pings from its own thread).

The first test runs with the node's own heartbeat values and checks the bound they give;
the others scale them down (the mechanism is the same) to keep the suite short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.freezing_proxy import FreezingProxy
from zbroker import Broker, Client, Message, RequestError
from zbroker.const import CONTROL_HEARTBEAT_IVL_MS, CONTROL_HEARTBEAT_TIMEOUT_MS
from zbroker.node import sockets

WAIT = 20.0
GRACE = 0.5
N = 200
CREDIT = 10
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]
ProxyTo = Callable[[Broker], FreezingProxy]


@pytest.fixture
def proxy_to() -> Iterator[ProxyTo]:
    """A freezing proxy in front of a node's control port (its data ports, which a client
    learns from the node's HELLO, are reached directly)."""
    made: list[FreezingProxy] = []

    def make(broker: Broker) -> FreezingProxy:
        made.append(FreezingProxy(("127.0.0.1", int(broker.endpoint.rsplit(":", 1)[1]))))
        return made[-1]

    try:
        yield make
    finally:
        for proxy in made:
            proxy.close()


@pytest.fixture
def fast_heartbeat(monkeypatch: pytest.MonkeyPatch) -> float:
    """Nodes started after this ping every 0.1 s and close a connection silent for 0.3 s
    after a ping; returns that timeout in seconds."""
    monkeypatch.setattr(sockets, "CONTROL_HEARTBEAT_IVL_MS", 100)
    monkeypatch.setattr(sockets, "CONTROL_HEARTBEAT_TIMEOUT_MS", 300)
    return 0.3


class Stuck:
    """A callback whose first call holds the client's thread until the test ends: the
    messages after it wait unacknowledged (what a ghost holds)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.calls = 0

    def __call__(self, msg: Message) -> None:
        self.calls += 1
        self.release.wait(WAIT)


@pytest.fixture
def stuck() -> Iterator[Callable[[], Stuck]]:
    """Makes :class:`Stuck` callbacks, all released at teardown (before the clients close:
    request this fixture after ``client_factory``)."""
    release = threading.Event()
    try:
        yield lambda: Stuck(release)
    finally:
        release.set()


class Busy(Collector):
    """Collects; its first call holds the client's thread for ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def __call__(self, msg: Message) -> None:
        if not len(self):
            time.sleep(self.seconds)
        super().__call__(msg)


def group_row(broker: Broker, group: str) -> dict[str, Any]:
    return dict(next(r for r in broker.status()["queues"] if r.get("group") == group))


def durable_row(broker: Broker, name: str) -> dict[str, Any]:
    return dict(next(d for d in broker.status()["durables"] if d["name"] == name))


def once_each(got: Collector, n: int) -> list[Message]:
    """``n`` messages, no payload twice (and nothing more within a grace)."""
    assert got.wait_for(n, WAIT), len(got)
    time.sleep(GRACE)
    msgs = got.snapshot()
    assert len(msgs) == n and len({m.payload for m in msgs}) == n
    return msgs


def test_a_frozen_queue_member_is_removed_within_seconds(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    proxy_to: ProxyTo,
) -> None:
    """Queue groups are at most once (README): what the ghost held is lost, counted, and
    every other message, before its removal and after, goes to the live member once."""
    b = broker_factory(broker_id="B")
    proxy = proxy_to(b)
    ghost, live = Collector(), Collector()
    client_factory(proxy.endpoint).subscribe("jobs.>", ghost, queue="w", credit=CREDIT)
    client_factory(b.endpoint).subscribe("jobs.>", live, queue="w", credit=CREDIT)
    assert wait_until(lambda: group_row(b, "w")["members"] == {"B": 2}, WAIT)
    proxy.freeze()
    frozen_at = time.monotonic()
    pub = client_factory(b.endpoint)
    for i in range(N):
        pub.publish("jobs.x", i)
    # the ghost's share (its credit) waits on it, the rest goes to the live one
    assert wait_until(lambda: len(live) >= N - CREDIT, WAIT)
    assert wait_until(lambda: group_row(b, "w")["in_flight"] == CREDIT, WAIT)
    assert wait_until(lambda: group_row(b, "w")["members"] == {"B": 1}, WAIT)
    took = time.monotonic() - frozen_at
    # silent for the timeout after a ping (sent one interval at most after the freeze),
    # then the next probe (every second); slack for a slow machine
    bound = (CONTROL_HEARTBEAT_IVL_MS + CONTROL_HEARTBEAT_TIMEOUT_MS) / 1000 + 1.0
    assert took < bound + 2.0, took
    row = group_row(b, "w")
    assert (row["in_flight"], row["pending"], row["lost"]) == (0, 0, CREDIT)
    for i in range(N, 2 * N):  # all for the live one now
        pub.publish("jobs.x", i)
    msgs = once_each(live, 2 * N - CREDIT)
    held = set(range(2 * N)) - {m.payload for m in msgs}
    assert len(held) == CREDIT and max(held) < N, held
    assert not any(m.redelivered for m in msgs)
    assert len(ghost) == 0


def test_a_member_whose_callback_outlasts_the_heartbeat_timeout_stays(
    fast_heartbeat: float,
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
) -> None:
    """Its callback holds the client's thread for five heartbeat timeouts: the node's
    pings are answered by the client's libzmq meanwhile, and nothing is taken from it."""
    b = broker_factory(broker_id="B")
    busy_for = 5 * fast_heartbeat
    busy, live = Busy(busy_for), Collector()
    client_factory(b.endpoint).subscribe("jobs.>", busy, queue="w", credit=CREDIT)
    client_factory(b.endpoint).subscribe("jobs.>", live, queue="w", credit=CREDIT)
    assert wait_until(lambda: group_row(b, "w")["members"] == {"B": 2}, WAIT)
    pub = client_factory(b.endpoint)
    n = 40
    started = time.monotonic()
    for i in range(n):
        pub.publish("jobs.x", i)
    assert wait_until(lambda: len(busy) >= 1, WAIT)
    assert time.monotonic() - started >= busy_for  # (it was busy that long)
    assert wait_until(lambda: len(busy) + len(live) >= n, WAIT)
    time.sleep(GRACE)
    got = busy.snapshot() + live.snapshot()
    assert sorted(m.payload for m in got) == list(range(n))
    assert not any(m.redelivered for m in got)  # nothing was taken back from it
    row = group_row(b, "w")
    assert (row["members"], row["in_flight"], row["lost"]) == ({"B": 2}, 0, 0)


def test_a_frozen_shared_durable_consumer_is_removed_and_its_messages_go_to_the_live_one(
    fast_heartbeat: float,
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    proxy_to: ProxyTo,
    stuck: Callable[[], Stuck],
) -> None:
    b = broker_factory(broker_id="B")
    proxy = proxy_to(b)
    ghost, live = stuck(), Collector()
    opts: dict[str, Any] = {"durable": "work", "shared": True, "credit": CREDIT}
    client_factory(proxy.endpoint).subscribe("jobs.>", ghost, **opts)
    client_factory(b.endpoint).subscribe("jobs.>", live, **opts)
    assert wait_until(lambda: durable_row(b, "work")["consumers"] == 2, WAIT)
    pub = client_factory(b.endpoint)
    n = 50
    for i in range(n):
        pub.publish("jobs.x", i, persistent=True)
    assert wait_until(lambda: len(live) == n - CREDIT, WAIT)
    assert wait_until(lambda: durable_row(b, "work")["in_flight"] == CREDIT, WAIT)
    proxy.freeze()
    msgs = once_each(live, n)
    assert sorted(m.payload for m in msgs) == list(range(n))
    assert sum(m.redelivered for m in msgs) == CREDIT  # what the ghost held, once each
    assert ghost.calls == 1
    assert wait_until(lambda: durable_row(b, "work")["stored"] == 0, WAIT)
    row = durable_row(b, "work")
    assert (row["consumers"], row["in_flight"], row["delivered"]) == (1, 0, n + CREDIT)


def test_a_frozen_exclusive_durable_consumer_lets_a_new_one_open_it(
    monkeypatch: pytest.MonkeyPatch,
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    proxy_to: ProxyTo,
    stuck: Callable[[], Stuck],
) -> None:
    """No takeover of a live holder: a ghost refuses the durable to its successor (a
    consumer restarted elsewhere) until it is found gone, then the successor gets all,
    what the ghost held flagged."""
    # silent for 1 s after a ping (0.8 s after the freeze at the earliest): room for the
    # first open to be refused
    monkeypatch.setattr(sockets, "CONTROL_HEARTBEAT_IVL_MS", 200)
    monkeypatch.setattr(sockets, "CONTROL_HEARTBEAT_TIMEOUT_MS", 1000)
    b = broker_factory(broker_id="B")
    proxy = proxy_to(b)
    ghost, heir = stuck(), Collector()
    client_factory(proxy.endpoint).subscribe("jobs.>", ghost, durable="solo", credit=CREDIT)
    pub = client_factory(b.endpoint)
    n = 2 * CREDIT
    for i in range(n):
        pub.publish("jobs.x", i, persistent=True)
    assert wait_until(lambda: durable_row(b, "solo")["in_flight"] == CREDIT, WAIT)
    successor = client_factory(b.endpoint)

    def opened() -> bool:
        try:
            successor.subscribe("jobs.>", heir, durable="solo", credit=CREDIT)
        except RequestError as exc:
            assert "held by another consumer" in str(exc)
            return False
        return True

    proxy.freeze()
    assert not opened()  # (the ghost still looks alive)
    assert wait_until(opened, WAIT)
    msgs = once_each(heir, n)
    assert sorted(m.payload for m in msgs) == list(range(n))
    assert sum(m.redelivered for m in msgs) == CREDIT
    assert ghost.calls == 1


def test_a_busy_member_with_more_queued_than_a_default_receive_queue_stays(
    fast_heartbeat: float,
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
) -> None:
    """Its callback holds the client's thread while 1,500 deliveries arrive one by one,
    more than libzmq's default receive queue (1,000): the client's session has none, so
    its libzmq keeps reading, answers the node's pings, and keeps its membership."""
    b = broker_factory(broker_id="B")
    n, held = 1500, 10 * fast_heartbeat
    busy = Busy(held)
    client_factory(b.endpoint).subscribe("jobs.>", busy, queue="w", credit=5000)
    assert wait_until(lambda: group_row(b, "w")["members"] == {"B": 1}, WAIT)
    pub = client_factory(b.endpoint)
    for i in range(n):
        pub.publish("jobs.x", i)
        time.sleep(0.0005)  # (a trickle: one delivery frame each)
    msgs = once_each(busy, n)
    assert sorted(m.payload for m in msgs) == list(range(n))
    row = group_row(b, "w")
    assert (row["members"], row["in_flight"], row["lost"]) == ({"B": 1}, 0, 0)


def test_a_connection_the_node_no_longer_knows_is_started_afresh(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """When the node closes a client's connection (as silent) and libzmq reconnects it,
    the node answers the client's next ping ``unknown``: the client then starts a new
    session and joins its groups again, rather than acknowledging for ever as a member
    the node has forgotten. (Here the node is made to forget the connection.)"""
    b = broker_factory(broker_id="B")
    got = Collector()
    client = client_factory(b.endpoint)
    client.subscribe("jobs.>", got, queue="w", credit=CREDIT)
    assert wait_until(lambda: group_row(b, "w")["members"] == {"B": 1}, WAIT)

    def forget(node: Any) -> None:
        intro = next(f for f in node.features if type(f).__name__ == "Introspection")
        intro._greeted.clear()

    b.call(forget)
    assert wait_until(lambda: "the node had closed this connection" in caplog.text, WAIT)
    pub = client_factory(b.endpoint)

    def member_again() -> bool:  # (until it joined anew, a probe may go to the old one)
        pub.publish("jobs.probe", -1)
        return got.wait_for(1, 0.2)

    assert wait_until(member_again, WAIT)
    time.sleep(GRACE)
    probes = len(got)
    for i in range(20):
        pub.publish("jobs.x", i)
    assert got.wait_for(probes + 20, WAIT)
    time.sleep(GRACE)
    assert sorted(m.payload for m in got.snapshot()[probes:]) == list(range(20))
    assert group_row(b, "w")["members"] == {"B": 1}
