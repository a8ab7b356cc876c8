"""Queue groups: the capacity (members, free credit) nodes flood per group and origin.

A node keeps capacity only for the origins it has an entry of: groups joined and left
leave nothing behind, on the node of the members nor on the others (it used to keep a
``(stamp, 0, 0)`` entry per group ever seen, flood it, and send them all on every link
that came up). A link that comes up still gets the capacity of the groups it now has
entries of, after the interest that makes them known.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.helpers import Collector
from tests.integration.test_queues import WAIT, link, members_seen
from zbroker import Broker, Client
from zbroker.routing.groups import group_key

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def held(broker: Broker) -> tuple[dict[Any, Any], int, int]:
    """(capacity entries, group keys with origins, capacity changes not flooded yet)."""

    def read(node: Any) -> tuple[dict[Any, Any], int, int]:
        groups = node.engine.groups
        return dict(groups.capacity), len(groups.origins), len(groups.changed_capacity)

    out: tuple[dict[Any, Any], int, int] = broker.call(read)
    return out


def test_groups_joined_and_left_leave_no_capacity_behind(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    cb, ca = client_factory(b.endpoint), client_factory(a.endpoint)
    cb.subscribe("keep.>", Collector(), queue="keep", credit=7)  # stays: its entry too
    assert wait_until(lambda: members_seen(a, "keep") == {"B": 1}, WAIT)
    for i in range(60):
        # left at once, or after its capacity was flooded (0.1 s): both leave nothing
        for c in (cb, ca):
            sub = c.subscribe(f"jobs.{i}", Collector(), queue=f"g{i}")
            if i % 3 == 0:
                time.sleep(0.15)
            sub.unsubscribe()
    keep = group_key("keep", "keep.>")

    def only_keep(broker: Broker) -> bool:
        caps, origins, unsent = held(broker)
        return set(caps) == {(keep, "B")} and origins == 1 and unsent == 0

    assert wait_until(lambda: only_keep(a) and only_keep(b), WAIT), (held(a), held(b))
    time.sleep(0.5)  # (several capacity floods later: still nothing else)
    assert only_keep(a) and only_keep(b), (held(a), held(b))
    assert held(a)[0][(keep, "B")][1:] == (1, 7)
    assert [r["group"] for r in a.status()["queues"]] == ["keep"]


def test_a_link_that_comes_up_gets_the_capacity_of_what_it_now_reaches(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """B has a member (credit 7); C links to B after that, then D to C: each learns the
    member's free credit from the link-up exchange of the node before it (no capacity
    changes meanwhile, so nothing else would tell them)."""
    b = broker_factory(broker_id="B")
    client_factory(b.endpoint).subscribe("jobs.>", Collector(), queue="w", credit=7)
    gkey = group_key("w", "jobs.>")
    assert wait_until(lambda: (gkey, "B") in held(b)[0], WAIT)
    time.sleep(0.3)  # (its capacity flooded: to no link yet)
    c = broker_factory(broker_id="C", links=(link("cb", b),))
    assert wait_until(lambda: held(c)[0].get((gkey, "B"), (0,))[1:] == (1, 7), WAIT), held(c)
    d = broker_factory(broker_id="D", links=(link("dc", c),))
    assert wait_until(lambda: held(d)[0].get((gkey, "B"), (0,))[1:] == (1, 7), WAIT), held(d)
