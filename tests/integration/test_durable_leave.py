"""Durable subscriptions: a consumer that leaves (``unsubscribe()``, its own callback
ending it, ``Client.close()``) in the middle of what was delivered to it loses nothing
and runs no callback after leaving. It acknowledges exactly what its callback ran on;
the rest comes again to the next consumer (or the other consumer of a shared durable),
flagged ``redelivered``; nothing it processed comes again.

The leaving consumer's callback holds the client thread at its ``K``-th message until
the test has made it leave, so the leave comes with a full credit window in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.test_queue_leave import Gate
from tests.integration.test_shared_durables import durable_row
from tests.integration.test_shared_remote import FIXED_HOME, homed, link, queue_row, stored
from zbroker import Broker, Client, Message

WAIT = 20.0
N = 300
K = 5
CREDIT = 100
BARRIER = -1
LEAVES = ["unsubscribe", "callback", "close"]
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


class Leaver(Gate):
    """Held at its ``K``-th message until released; with ``ends``, its callback then
    ends its own subscription."""

    def __init__(self, ends: bool) -> None:
        super().__init__()
        self.ends = ends
        self.sub: Any = None

    def __call__(self, msg: Message) -> None:
        super().__call__(msg)
        if self.ends and len(self) == K:
            self.sub.unsubscribe()


class Holder:
    """Holds the client thread at its first message until released."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, msg: Message) -> None:
        self.reached.set()
        assert self.release.wait(WAIT)


def publish(client: Client, payloads: list[int]) -> None:
    for i, p in enumerate(payloads):
        client.publish("d.x", p, persistent=True, confirm=i == len(payloads) - 1)


def held_with_full_window(
    how: str, broker: Broker, client: Client, pub: Client, wait_until: WaitUntil, **kw: Any
) -> Leaver:
    """A consumer of durable ``d`` held at its ``K``-th message, ``CREDIT`` in flight."""
    leaver = Leaver(ends=how == "callback")
    leaver.sub = client.subscribe("d.>", leaver, durable="d", credit=CREDIT, **kw)
    publish(pub, list(range(N)))
    assert leaver.reached.wait(WAIT)
    assert wait_until(lambda: durable_row(broker, "d")["in_flight"] == CREDIT, WAIT)
    return leaver


def leave(how: str, client: Client, leaver: Leaver, wait_until: WaitUntil) -> None:
    """Make the held consumer leave, then let its callback return."""
    if how != "close":
        if how == "unsubscribe":
            leaver.sub.unsubscribe()  # (from this thread, while its callback runs)
        leaver.release.set()
        return
    closer = threading.Thread(target=client.close)  # (it waits for the client thread)
    closer.start()
    try:
        assert wait_until(lambda: client._closed, WAIT)  # it has left its durables
    finally:
        leaver.release.set()
        closer.join(WAIT)


def check_flagged(got: Collector, *, shared: bool = False) -> None:
    """Flagged: exactly what was sent to the leaver after its ``K``-th message: its
    window, up to a little past ``CREDIT`` (it may have acknowledged a few before it was
    held, and the node may send a few more between its last acknowledgement and its
    detach: of a shared durable, those may be any the other consumer has not taken)."""
    flagged = {m.payload for m in got.snapshot() if m.redelivered}
    assert set(range(K, CREDIT)) <= flagged, sorted(flagged)
    assert len(flagged) <= CREDIT, sorted(flagged)  # (at most its window)
    if not shared:
        assert flagged == set(range(K, max(flagged) + 1)), sorted(flagged)
        assert max(flagged) < K + CREDIT, sorted(flagged)


@pytest.mark.parametrize("how", LEAVES)
def test_exclusive_durable_consumer_leaves_mid_batch(
    how: str, broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    first, pub = client_factory(broker.endpoint), client_factory(broker.endpoint)
    leaver = held_with_full_window(how, broker, first, pub, wait_until)
    leave(how, first, leaver, wait_until)
    assert wait_until(lambda: not durable_row(broker, "d")["attached"], WAIT)
    # exactly what its callback ran on was acknowledged: the rest is stored still
    assert durable_row(broker, "d")["stored"] == N - K
    assert leaver.payloads() == list(range(K))  # no callback after it left
    after = Collector()
    client_factory(broker.endpoint).subscribe("d.>", after, durable="d", credit=CREDIT)
    publish(pub, [BARRIER])  # (one connection, in queue order: all before it came first)
    assert after.wait_payload(BARRIER, WAIT), len(after)
    assert after.payloads() == [*range(K, N), BARRIER]  # each once, none lost
    check_flagged(after)
    assert wait_until(lambda: durable_row(broker, "d")["stored"] == 0, WAIT)


@pytest.mark.parametrize("how", LEAVES)
def test_shared_durable_consumer_leaves_mid_batch(
    how: str, broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    first, pub = client_factory(broker.endpoint), client_factory(broker.endpoint)
    leaver = held_with_full_window(how, broker, first, pub, wait_until, shared=True)
    other = Collector()  # (it gets what was not handed out yet at once)
    client_factory(broker.endpoint).subscribe("d.>", other, durable="d", shared=True)
    leave(how, first, leaver, wait_until)
    assert wait_until(lambda: durable_row(broker, "d")["consumers"] == 1, WAIT)
    assert wait_until(lambda: durable_row(broker, "d")["stored"] == 0, WAIT), durable_row(
        broker, "d"
    )
    assert leaver.payloads() == list(range(K))  # no callback after it left
    assert sorted(other.payloads()) == list(range(K, N)), len(other)  # each once, none lost
    check_flagged(other, shared=True)
    assert durable_row(broker, "d")["redelivered"] == other.redelivered().count(True)


@pytest.mark.parametrize("how", LEAVES)
def test_shared_durable_consumer_on_a_member_node_leaves_mid_batch(
    how: str, broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """The same through a node that is not the durable's home: what the member node
    holds for the leaver (in flight and prefetched) goes back to the home, for the
    consumer there; what the leaver processed does not come again."""
    a = broker_factory(broker_id="A", **FIXED_HOME)
    b = broker_factory(broker_id="B", links=(link("ba", a),), **FIXED_HOME)
    other = Collector()
    client_factory(a.endpoint).subscribe("d.>", other, durable="d", shared=True, credit=1)
    homed(client_factory, wait_until, [a, b], "d", "A")
    first, pub = client_factory(b.endpoint), client_factory(a.endpoint)
    leaver = Leaver(ends=how == "callback")
    leaver.sub = first.subscribe("d.>", leaver, durable="d", shared=True, credit=CREDIT)
    publish(pub, list(range(N)))
    assert leaver.reached.wait(WAIT)
    assert wait_until(lambda: (queue_row(b, "d") or {}).get("in_flight") == CREDIT, WAIT)
    leave(how, first, leaver, wait_until)
    assert wait_until(lambda: stored(a, "d") == 0, WAIT), stored(a, "d")
    assert len(leaver) == K  # no callback after it left
    done = set(leaver.payloads())
    got = other.payloads()
    assert len(got) == len(set(got)) == N - K and set(got) | done == set(range(N))
    flagged = {m.payload for m in other.snapshot() if m.redelivered}
    assert len(flagged) >= CREDIT - K  # (at least what the leaver held unprocessed)
    assert queue_row(a, "d")["redelivered"] == len(flagged)  # type: ignore[index]


def test_durable_opened_again_while_its_old_window_is_drained(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """A client detaches durable ``d`` mid-window and opens it again (another thread)
    while its client thread still reads what was sent for the first subscription: the
    rest of that old window is not run (the node sends it all again after the open), and
    no cumulative acknowledgement covers what the first skipped. Another durable's
    callback holds the client thread between the two halves of ``d``'s window."""
    client, pub = client_factory(broker.endpoint), client_factory(broker.endpoint)
    first, between = Leaver(ends=False), Holder()
    first.sub = client.subscribe("d.>", first, durable="d", credit=CREDIT)
    client.subscribe("e.>", between, durable="e", credit=CREDIT)
    publish(pub, list(range(CREDIT // 2)))  # (sent to the client before e's message)
    pub.publish("e.x", 0, persistent=True, confirm=True)
    publish(pub, list(range(CREDIT // 2, N)))
    assert first.reached.wait(WAIT)
    assert wait_until(lambda: durable_row(broker, "d")["in_flight"] == CREDIT, WAIT)
    first.sub.unsubscribe()
    first.release.set()  # (the rest of d's first half is skipped, then e's callback holds)
    assert between.reached.wait(WAIT)
    second = Collector()
    opener = threading.Thread(
        target=client.subscribe, args=("d.>", second), kwargs={"durable": "d", "credit": CREDIT}
    )
    opener.start()
    try:
        assert wait_until(lambda: "d" in client._durables._open, WAIT)  # open here, not yet
    finally:
        between.release.set()  # (d's second half is read now)
        opener.join(WAIT)
    assert client.durable_info["d"]["home"] == broker.broker_id
    publish(pub, [BARRIER])
    assert second.wait_payload(BARRIER, WAIT), len(second)
    assert first.payloads() == list(range(K))
    assert second.payloads() == [*range(K, N), BARRIER]  # each once, none lost
    check_flagged(second)
    assert wait_until(lambda: durable_row(broker, "d")["stored"] == 0, WAIT)
