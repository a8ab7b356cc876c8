"""Local branches and queue groups on real nodes: a topic a node keeps local goes only to
a member on that node, whichever policy picks and whichever node the message came from;
with none there it is lost there and counted (``queue_unroutable``, the group's
``lost``), never sent on; and what waits there for a hung member never spills away.

A is the node with the local branch ``CACHE.>`` throughout; members join group ``w`` on
``>`` (interest A advertises: the branch covers only part of it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.helpers import Collector
from tests.integration.test_queue_spill import CREDIT, Hung
from tests.integration.test_queues import GRACE, WAIT, group_row, link, members_seen
from zbroker import Broker, Client
from zbroker.config import QueueRule

N = 100
KEPT = ("CACHE.>",)
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def counted(node: Broker) -> tuple[int, int, int]:
    """(``queue_unroutable`` drops, group ``w``'s lost, the feature's unroutable) at ``node``."""
    st = node.status()
    row: Any = group_row(node, "w") or {"lost": 0}
    drops = st["counters"]["dropped"].get("queue_unroutable", 0)
    return drops, row["lost"], st["queues_totals"]["unroutable"]


def settle(wait_until: WaitUntil, collectors: list[Collector], n: int) -> None:
    """``n`` messages in all arrived, and no more within the grace period."""
    assert wait_until(lambda: sum(len(c) for c in collectors) >= n, WAIT), [
        len(c) for c in collectors
    ]
    time.sleep(GRACE)
    assert sum(len(c) for c in collectors) == n, [len(c) for c in collectors]


def test_a_kept_topic_goes_to_the_member_on_its_node_only(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """``round_robin`` on A shares the other topics one for one, not the kept ones."""
    a = broker_factory(
        broker_id="A", local_branches=KEPT, queues=(QueueRule(group="w", policy="round_robin"),)
    )
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    at_a, at_b, plain_b = Collector(), Collector(), Collector()
    client_factory(a.endpoint).subscribe(">", at_a, queue="w", credit=4 * N)
    cb = client_factory(b.endpoint)
    cb.subscribe(">", at_b, queue="w", credit=4 * N)
    cb.subscribe(">", plain_b)
    assert wait_until(lambda: members_seen(a, "w") == {"A": 1, "B": 1}, WAIT)
    pub = client_factory(a.endpoint)
    for i in range(N):
        pub.publish("CACHE.k", i)
        pub.publish("JOBS.k", i)
    settle(wait_until, [at_a, at_b], 2 * N)
    assert at_a.topics() == {"CACHE.k": N, "JOBS.k": N // 2}
    assert at_b.topics() == {"JOBS.k": N // 2}
    assert sorted(at_a.payloads("CACHE.k")) == list(range(N))  # each once
    assert sorted(at_a.payloads("JOBS.k") + at_b.payloads("JOBS.k")) == list(range(N))
    assert plain_b.wait_for(N, WAIT) and plain_b.topics() == {"JOBS.k": N}
    assert counted(a) == (0, 0, 0)


def test_a_kept_topic_with_no_member_on_its_node_is_counted_lost_there(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A", local_branches=KEPT)
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    at_b = Collector()
    client_factory(b.endpoint).subscribe(">", at_b, queue="w")
    assert wait_until(lambda: members_seen(a, "w") == {"B": 1}, WAIT)
    pub = client_factory(a.endpoint)
    for i in range(N):
        pub.publish("CACHE.k", i)
    pub.publish("JOBS.end", b"end")
    assert at_b.wait_topic("JOBS.end", WAIT)
    time.sleep(GRACE)
    assert at_b.topics() == {"JOBS.end": 1}
    assert counted(a) == (N, N, N)
    # a drop, not also "no subscriber anywhere"; nothing went over the link but JOBS.end
    assert a.status()["counters"]["unrouted"] == 0
    assert [row["msgs_out"] for row in a.status()["links"]] == [1]
    assert counted(b) == (0, 0, 0)


def test_a_kept_topic_from_another_node_stops_at_the_keeping_node(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """B publishes (it keeps nothing local) through A (which keeps ``CACHE.>``) to C. As a
    plain message of the branch, one that comes to A from another node is delivered on A
    and goes no further (docs/architecture.md, "Local branches"): B's pick of C is lost on
    A while A has no member, and picked again for A's member once A has one."""
    a = broker_factory(broker_id="A", local_branches=KEPT)
    rr = (QueueRule(group="w", policy="round_robin"),)
    b = broker_factory(broker_id="B", links=(link("ba", a),), queues=rr)
    c = broker_factory(broker_id="C", links=(link("ca", a),))
    at_a, at_c = Collector(), Collector()
    client_factory(c.endpoint).subscribe(">", at_c, queue="w", credit=4 * N)
    assert wait_until(lambda: members_seen(b, "w") == {"C": 1}, WAIT)
    pub = client_factory(b.endpoint)
    for i in range(N):
        pub.publish("CACHE.k", i)
    pub.publish("JOBS.end", b"end")
    assert at_c.wait_topic("JOBS.end", WAIT)
    time.sleep(GRACE)
    assert at_c.topics() == {"JOBS.end": 1}
    assert counted(a) == (N, N, N) and counted(b)[0] == counted(c)[0] == 0
    # a member on A: B shares one for one between A and C; those for C stop on A too
    client_factory(a.endpoint).subscribe(">", at_a, queue="w", credit=4 * N)
    assert wait_until(lambda: members_seen(b, "w") == {"A": 1, "C": 1}, WAIT)
    at_c.clear()
    repicked = a.status()["queues_totals"]["repicked"]
    for i in range(N):  # (one topic after the other: the two share B's turns)
        pub.publish("CACHE.k", i)
    for i in range(N):
        pub.publish("JOBS.k", i)
    settle(wait_until, [at_a, at_c], 2 * N)
    assert at_a.topics() == {"CACHE.k": N, "JOBS.k": N // 2}
    assert at_c.topics() == {"JOBS.k": N // 2}
    assert sorted(at_a.payloads("CACHE.k")) == list(range(N))
    assert a.status()["queues_totals"]["repicked"] - repicked == N // 2
    assert counted(a) == (N, N, N)  # (nothing more lost)


def test_what_waits_for_a_hung_member_on_its_node_never_spills(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """A's member hangs with its credit used up, B's is idle and advertises room: the
    kept topic's backlog waits on A, while the other topics go to B."""
    a = broker_factory(broker_id="A", local_branches=KEPT)
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    hung, idle = Hung(), Collector()
    client_factory(a.endpoint).subscribe(">", hung, queue="w", credit=CREDIT)
    client_factory(b.endpoint).subscribe(">", idle, queue="w", credit=4 * N)
    assert wait_until(lambda: members_seen(a, "w") == {"A": 1, "B": 1}, WAIT)
    pub = client_factory(a.endpoint)
    try:
        for i in range(N):
            pub.publish("CACHE.k", i)
        waiting = (N - CREDIT, CREDIT)
        row: Any = None

        def backlog() -> bool:
            nonlocal row
            row = group_row(a, "w")
            return row is not None and (row["pending"], row["in_flight"]) == waiting

        assert wait_until(backlog, WAIT), row
        for i in range(N):  # (A is saturated now: these go to B)
            pub.publish("JOBS.k", i)
        assert idle.wait_for(N, WAIT), len(idle)
        time.sleep(GRACE)  # (passes enough for a spill: A keeps trying while it waits)
        assert idle.topics() == {"JOBS.k": N} and len(hung) == 1
        assert backlog(), row
    finally:
        hung.release.set()
    assert hung.wait_for(N, WAIT), len(hung)
    time.sleep(GRACE)
    assert hung.topics() == {"CACHE.k": N} and sorted(hung.payloads()) == list(range(N))
    assert idle.topics() == {"JOBS.k": N}
    assert counted(a) == (0, 0, 0)
