"""Queue groups: what waits on a node for a hung member goes to a member elsewhere that
has room (features/queues/spill.py).

A member on B hangs in its callback with its credit used up; a member on A is idle.
Messages that wait on B (a burst published on B, picked for B's member before B knew it
was saturated; or B's share under ``round_robin`` from A) used to wait there for good
(until the bound dropped the oldest): they go to A, all but what is in flight to the
hung member, each message once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.test_queues import WAIT, group_row, link, members_seen, wait_total
from zbroker import Broker, Client, Message
from zbroker.config import QueueRule

N = 2000
CREDIT = 10
#: seconds the idle member may take to get the backlog (it takes well under one)
WITHIN = 5.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


class Hung(Collector):
    """A member whose callback holds the client thread until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def __call__(self, msg: Message) -> None:
        super().__call__(msg)
        self.release.wait(WAIT)


@pytest.mark.parametrize("policy", ["local_first", "round_robin"])
def test_a_backlog_behind_a_hung_member_goes_to_an_idle_one(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    policy: str,
) -> None:
    """``local_first``: published on B, in one burst. ``round_robin`` (configured on A):
    published on A, half of it B's share, each message then a fresh pick from B."""
    rules = (QueueRule(group="w", policy=policy),)
    a = broker_factory(broker_id="A", queues=rules)
    b = broker_factory(broker_id="B", links=(link("ba", a),), queues=rules)
    hung, idle = Hung(), Collector()
    client_factory(a.endpoint).subscribe("jobs.>", idle, queue="w")
    client_factory(b.endpoint).subscribe("jobs.>", hung, queue="w", credit=CREDIT)
    assert wait_until(lambda: members_seen(a, "w") == members_seen(b, "w") == {"A": 1, "B": 1})
    pub = client_factory((b if policy == "local_first" else a).endpoint)
    try:
        for i in range(N):
            pub.publish("jobs.x", i)
        # everything but what is in flight to the hung member, within seconds
        assert idle.wait_for(N - CREDIT, WITHIN), (len(idle), group_row(b, "w"))
        assert len(hung) == 1
        row = group_row(b, "w")
        assert row is not None and (row["pending"], row["in_flight"]) == (0, CREDIT), row
        assert b.status()["queues_totals"]["spilled"] > 0
    finally:
        hung.release.set()
    wait_total(wait_until, [hung, idle], N)  # each message once: none lost nor repeated
    assert len(hung) == CREDIT
    for node in (a, b):
        row = group_row(node, "w")
        assert row is not None and (row["dropped"], row["lost"]) == (0, 0), row


def test_nothing_moves_while_no_other_node_has_room(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Both members hung: what waits on B stays there (moving it would not get it
    processed sooner) and goes to B's member once it has room again."""
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    far, near = Hung(), Hung()
    client_factory(a.endpoint).subscribe("jobs.>", far, queue="w", credit=CREDIT)
    client_factory(b.endpoint).subscribe("jobs.>", near, queue="w", credit=CREDIT)
    assert wait_until(lambda: members_seen(b, "w") == {"A": 1, "B": 1}, WAIT)
    pub = client_factory(b.endpoint)
    n = 200
    try:
        for i in range(n):
            pub.publish("jobs.x", i)
        assert wait_until(lambda: len(far) == len(near) == 1, WAIT)

        def waiting(node: Broker) -> Any:
            row = group_row(node, "w")
            return None if row is None else row["pending"] + row["in_flight"]

        def moved() -> list[int]:
            return [x.status()["queues_totals"]["forwarded"] for x in (a, b)]

        assert wait_until(lambda: waiting(a) + waiting(b) == n, WAIT)
        before = moved()
        time.sleep(1.0)  # (capacity floods, passes: what waits stays where it is)
        assert moved() == before
        assert waiting(a) + waiting(b) == n, (group_row(a, "w"), group_row(b, "w"))
    finally:
        far.release.set()
        near.release.set()
    wait_total(wait_until, [far, near], n)
