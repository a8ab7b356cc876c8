"""Queue groups: a member that leaves (``unsubscribe()`` or ``Client.close()``) with
messages in flight loses none of them. It runs no callback after leaving, acknowledges
exactly what it processed, and its node gives the rest to the other members, here or, if
it was the last here, on another node: every message is processed exactly once.

The leaving member's callback holds the client thread at its ``K``-th message until the
test has made it leave, so the leave comes with a full credit window in flight whatever
the machine's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.helpers import Collector
from tests.integration.test_queues import WAIT, group_row, link, members_seen, wait_total
from zbroker import Broker, Client, Message

N = 300
K = 5
CREDIT = 100
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


class Gate(Collector):
    """A member that stops at its ``K``-th message until released."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, msg: Message) -> None:
        super().__call__(msg)
        if len(self) == K:
            self.reached.set()
            assert self.release.wait(WAIT)


def counts(row: dict[str, Any] | None) -> tuple[int, int, int, int]:
    assert row is not None
    return row["delivered"], row["pending"], row["in_flight"], row["lost"]


def test_unsubscribe_gives_what_is_in_flight_to_the_others(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    leaver, stayer = Gate(), Collector()
    sub = client_factory(broker.endpoint).subscribe("jobs.>", leaver, queue="w", credit=CREDIT)
    client_factory(broker.endpoint).subscribe("jobs.>", stayer, queue="w", credit=CREDIT)
    pub = client_factory(broker.endpoint)
    for i in range(N):
        pub.publish("jobs.x", i)
    assert leaver.reached.wait(WAIT)
    sub.unsubscribe()  # (from this thread, while its callback runs on the client thread)
    leaver.release.set()
    wait_total(wait_until, [leaver, stayer], N)  # each message once, none lost
    assert len(leaver) == K  # nothing after it left
    assert wait_until(lambda: members_seen(broker, "w") == {broker.broker_id: 1}, WAIT)
    # everything was delivered for good once (what went back is not counted twice)
    assert wait_until(lambda: counts(group_row(broker, "w")) == (N, 0, 0, 0), WAIT)


def test_close_gives_what_is_in_flight_to_the_others(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    leaver, stayer = Gate(), Collector()
    closing = client_factory(broker.endpoint)
    closing.subscribe("jobs.>", leaver, queue="w", credit=CREDIT)
    client_factory(broker.endpoint).subscribe("jobs.>", stayer, queue="w", credit=CREDIT)
    pub = client_factory(broker.endpoint)
    for i in range(N):
        pub.publish("jobs.x", i)
    assert leaver.reached.wait(WAIT)
    closer = threading.Thread(target=closing.close)  # (it waits for the client thread)
    closer.start()
    try:
        assert wait_until(lambda: closing._closed, WAIT)  # it has left its groups
    finally:
        leaver.release.set()
        closer.join(WAIT)
    wait_total(wait_until, [leaver, stayer], N)
    assert len(leaver) == K
    assert wait_until(lambda: counts(group_row(broker, "w")) == (N, 0, 0, 0), WAIT)


def test_last_member_here_leaves_the_rest_go_to_another_node(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    leaver, far = Gate(), Collector()
    sub = client_factory(a.endpoint).subscribe("jobs.>", leaver, queue="w", credit=CREDIT)
    client_factory(b.endpoint).subscribe("jobs.>", far, queue="w", credit=CREDIT)
    assert wait_until(lambda: members_seen(a, "w") == {"A": 1, "B": 1}, WAIT)
    pub = client_factory(a.endpoint)
    for i in range(N):
        pub.publish("jobs.x", i)  # (local_first: to A's member until messages wait on A)
    assert leaver.reached.wait(WAIT)
    sub.unsubscribe()
    leaver.release.set()
    wait_total(wait_until, [leaver, far], N)
    assert len(leaver) == K
    assert wait_until(lambda: members_seen(a, "w") == {"B": 1}, WAIT)
    assert a.status()["queues_totals"]["unroutable"] == 0
