"""Local branches and shared durables on real nodes: a shared durable homed on a node
whose local branch its pattern meets takes no consumer from another node (a clear error)
and never moves away, and a node never adopts one whose pattern its own local branch
meets — the branch's messages it stores never leave it (features/durables/remote.py)."""

from __future__ import annotations

import time

import pytest

from tests.helpers import Collector
from tests.integration.test_shared_remote import (
    GRACE,
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    homed,
    link,
    queue_row,
)
from zbroker import Broker
from zbroker.errors import RequestError

N = 5


def _links_out(node: Broker) -> int:
    return sum(int(lk["msgs_out"]) for lk in node.status()["links"])


@pytest.mark.parametrize("pattern", ["CACHE.>", ">"])
def test_no_network_consumer_of_a_durable_its_homes_local_branch_meets(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    pattern: str,
) -> None:
    y = broker_factory(broker_id="Y")
    x = broker_factory(
        broker_id="X",
        local_branches=("CACHE.>",),
        links=(link("xy", y),),
        redistribution_delay=0.2,
    )
    cx, cy = client_factory(x.endpoint), client_factory(y.endpoint)
    at_x, at_y = Collector(), Collector()
    sub = cx.subscribe(pattern, at_x, durable="sd", shared=True)
    homed(client_factory, wait_until, [x, y], "sd", "X")
    with pytest.raises(RequestError, match=r"local branch 'CACHE\.>' keeps its messages"):
        cy.subscribe(pattern, at_y, durable="sd", shared=True)
    for i in range(N):
        cx.publish("CACHE.secret", i, persistent=True, confirm=True)
    assert wait_until(lambda: len(at_x) == N, WAIT)
    # X's own consumer leaves: the durable stores, and stays (no node consumes it)
    sub.unsubscribe()
    out = _links_out(x)
    for i in range(N, 2 * N):
        cx.publish("CACHE.secret", i, persistent=True, confirm=True)
    time.sleep(GRACE + 0.5)
    row = queue_row(x, "sd")
    assert row is not None and row["home"] == "X" and row["stored"] == N
    assert _links_out(x) == out  # not one message of the branch left X
    assert sorted(m.payload for m in at_x.snapshot()) == list(range(N)) and len(at_y) == 0
    assert x.status()["counters"]["durable_moves"] == 0


def test_a_node_keeping_the_pattern_local_does_not_adopt_the_durable(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    # H (no local branch) homes "sd" on CACHE.>; its only consumer is on T, which keeps
    # CACHE.> local: T takes H's messages over the network (they come in, which a local
    # branch allows), but refuses to become the home, which would refuse consumers elsewhere
    h = broker_factory(broker_id="H", redistribution_delay=0.2)
    t = broker_factory(broker_id="T", local_branches=("CACHE.>",), links=(link("th", h),))
    ch = client_factory(h.endpoint)
    ch.subscribe("CACHE.>", Collector(), durable="sd", shared=True).unsubscribe()
    homed(client_factory, wait_until, [h, t], "sd", "H")
    at_t = Collector()
    client_factory(t.endpoint).subscribe("CACHE.>", at_t, durable="sd", shared=True)
    for i in range(N):
        ch.publish("CACHE.x", i, persistent=True, confirm=True)
    assert wait_until(lambda: len(at_t) == N, WAIT)
    time.sleep(GRACE + 1.0)  # (several redistribution delays: offers made and refused)
    assert sorted(m.payload for m in at_t.snapshot()) == list(range(N))
    row = queue_row(h, "sd")
    assert row is not None and row["home"] == "H" and row["stored"] == 0
    member = queue_row(t, "sd")  # (T's consumers, of the durable homed on H)
    assert member is not None and member["home"] == "H" and member["delivered"] == N
    assert h.status()["counters"]["durable_moves"] == 0
    assert t.status()["counters"]["durable_adopted"] == 0
