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
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tests.helpers import Collector
from tests.integration.test_queues import (
    GRACE,
    WAIT,
    group_row,
    link,
    members_seen,
    wait_total,
)
from zbroker import Broker, Client, Message
from zbroker.config import QueueRule

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


def leave_under_flow(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil, ttl: int
) -> tuple[Broker, Broker, list[Collector], int]:
    """Members on A and B (linked with ``ttl``), ``round_robin`` from A, messages flowing:
    B's only member leaves. B's loop is held while the leave waits there and A goes on
    sending, so that many messages reach B after its member left, with A on their path.
    Returns the nodes, the members (A's, B's) and how many messages were published."""
    rules = (QueueRule(group="w", policy="round_robin"),)
    a = broker_factory(broker_id="A", queues=rules)
    b = broker_factory(broker_id="B", links=(replace(link("ba", a), ttl=ttl),))
    near, far = Collector(), Collector()
    client_factory(a.endpoint).subscribe("jobs.>", near, queue="w")
    sub = client_factory(b.endpoint).subscribe("jobs.>", far, queue="w")
    assert wait_until(lambda: members_seen(a, "w") == {"A": 1, "B": 1}, WAIT)
    pub = client_factory(a.endpoint)
    stop = threading.Event()
    sent = 0

    def publish() -> None:
        nonlocal sent
        while not stop.is_set() or sent < 3000:
            pub.publish("jobs.x", sent)
            sent += 1
            if sent % 20 == 0:
                time.sleep(0.001)

    publisher = threading.Thread(target=publish)
    publisher.start()
    held = threading.Event()

    def hold(node: Any) -> None:
        held.set()
        time.sleep(0.5)  # B's loop takes nothing meanwhile; A's messages pile up for it

    try:
        assert far.wait_for(200, WAIT)
        holder = threading.Thread(target=b.call, args=(hold,))
        holder.start()
        assert held.wait(WAIT)
        leaving = threading.Thread(target=sub.unsubscribe)  # (answered once B's loop runs)
        leaving.start()
        holder.join(WAIT)
        leaving.join(WAIT)
    finally:
        stop.set()
        publisher.join(WAIT)
    return a, b, [near, far], sent


def test_a_leave_under_flow_loses_nothing_on_its_way_to_the_leaving_node(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """What A sent B before it heard that B's member left has no member off its path left
    at B: it goes back to A, on its path (it was dropped, ``queue_unroutable``)."""
    a, b, members, sent = leave_under_flow(broker_factory, client_factory, wait_until, 32)
    wait_total(wait_until, members, sent)  # each message once: none lost nor repeated
    totals = [x.status()["queues_totals"] for x in (a, b)]
    assert [t["unroutable"] for t in totals] == [0, 0], totals
    assert totals[1]["repicked"] > 0, totals  # (the window was hit: some went back)
    assert "queue_unroutable" not in b.status()["counters"]["dropped"]


def test_what_cannot_go_back_is_counted_lost_in_the_groups_row(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """The same with a link whose ttl (1) allows no way back: what reaches B after the
    leave is lost, and B's row of the group (which has a member on A) counts it as
    ``lost``, as the node counts it (``queue_unroutable``): every message is delivered
    once or counted there."""
    _, b, members, sent = leave_under_flow(broker_factory, client_factory, wait_until, 1)

    def accounted() -> int:
        lost: int = (group_row(b, "w") or {}).get("lost", 0)
        return sum(len(m) for m in members) + lost

    assert wait_until(lambda: accounted() >= sent, WAIT), (accounted(), sent)
    time.sleep(GRACE)
    got = [p for m in members for p in m.payloads()]
    row = group_row(b, "w")
    assert row is not None and row["lost"] > 0 and row["members"] == {"A": 1}, row
    assert len(got) == len(set(got)) == sent - row["lost"]
    assert b.status()["queues_totals"]["unroutable"] == row["lost"]
    assert b.status()["counters"]["dropped"]["queue_unroutable"] == row["lost"]
