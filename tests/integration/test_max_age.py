"""``max_age`` applies with nothing new arriving: a retention rule's and a durable's old
messages go once older than ``max_age`` (swept every ``AGE_SWEEP``), not only when the next
message of the rule or durable comes. Real in-thread nodes and clients; waits are
conditions with deadlines, counts exact."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.config import RetainRule

WAIT = 20.0
GRACE = 0.3

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def test_retained_messages_expire_without_a_new_message(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    broker = broker_factory(retain=(RetainRule("LOG.>", max_age=0.5), RetainRule("KEEP.>")))
    client = client_factory(broker.endpoint)
    for i in range(5):
        client.publish("LOG.A", i, persistent=True, confirm=True)
    client.publish("KEEP.A", "stays", persistent=True, confirm=True)
    assert len(client.read("LOG.>")) == 5

    def rules() -> dict[str, Any]:
        return {r["pattern"]: r for r in broker.status()["store"]["rules"]}

    assert wait_until(lambda: rules()["LOG.>"]["held_msgs"] == 0, WAIT)
    assert client.read("LOG.>") == []
    assert [m.payload for m in client.read(">")] == ["stays"]  # (no max_age: kept)
    assert broker.status()["store"]["dropped"] == {"max_age": 5}
    assert client.log_range() == (6, 6)


def test_a_durables_old_messages_expire_while_nobody_is_attached(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    broker = broker_factory()
    client = client_factory(broker.endpoint)
    client.subscribe("ORD.>", Collector(), durable="aged", max_age=0.5).unsubscribe()
    client.subscribe("ORD.>", Collector(), durable="kept").unsubscribe()
    for i in range(5):
        client.publish("ORD.A", i, persistent=True, confirm=True)

    def rows() -> dict[str, Any]:
        return {d["name"]: d for d in broker.status()["durables"]}

    assert rows()["kept"]["stored"] == 5
    assert wait_until(lambda: rows()["aged"]["stored"] == 0, WAIT)
    assert rows()["aged"]["dropped"] == 5
    assert rows()["kept"]["stored"] == 5
    got = Collector()
    client.subscribe("ORD.>", got, durable="aged", max_age=0.5)
    time.sleep(GRACE)  # (nothing may come: a bound on what must not arrive)
    assert got.payloads() == []
    kept = Collector()
    client.subscribe("ORD.>", kept, durable="kept")
    assert kept.wait_for(5)
    assert kept.payloads() == [0, 1, 2, 3, 4]
