"""Client subscriptions to the nodes' internal branches of ``$ZB`` (``$ZB.Q.``,
``$ZB.DURABLE.``, ``$ZB.SD.``, ``$ZB.HOST.``): their interest keys *are* queue-group
members, durable homes, shared durables' listeners and topic hosts, so a client may not
subscribe there. The client API refuses before sending; a node refuses a subscription
that comes anyway (a raw SUB socket here, as another client implementation would send
it), counts it as bad input and adds no interest: the fake member or home never appears.
In-thread Brokers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypedDict

import pytest
import zmq

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.config import LinkConfig, QueueRule
from zbroker.const import INTERNAL_PREFIXES
from zbroker.errors import ReservedTopic
from zbroker.features.durables.options import open_options
from zbroker.features.durables.remote import SD_PREFIX
from zbroker.routing.durable_homes import HOME_PREFIX
from zbroker.routing.hosts import HOST_PREFIX
from zbroker.routing.keys import GROUP_PREFIX

WAIT = 20.0
N = 100


def test_the_internal_prefixes_are_the_ones_the_nodes_use() -> None:
    assert set(INTERNAL_PREFIXES) == {GROUP_PREFIX, HOME_PREFIX, SD_PREFIX, HOST_PREFIX}


class Kind(TypedDict, total=False):
    """What makes a subscription durable or a queue member (neither: a plain one)."""

    durable: str
    queue: str


KINDS: tuple[Kind, ...] = ({}, {"durable": "d"}, {"queue": "w"})


def test_the_client_refuses_internal_patterns_and_keeps_the_others(
    broker: Broker, client_factory: Callable[..., Client]
) -> None:
    client = client_factory(broker.endpoint)
    for pattern in ("$ZB.Q.w.jobs.>", "$ZB.DURABLE.billing", "$ZB.SD.A", "$ZB.HOST.>", "$ZB.Q"):
        for kw in KINDS:
            with pytest.raises(ReservedTopic, match="internal to the nodes"):
                client.subscribe(pattern, Collector(), **kw)
    # the node's other $ZB topics are still for clients to subscribe to by name
    client.subscribe("$ZB.ADVISORY.>", Collector())
    client.subscribe("$ZB.SYS.>", Collector())
    patterns = {r["pattern"] for r in client.routes()}
    assert {"$ZB.ADVISORY.>", "$ZB.SYS.>"} <= patterns
    assert not any(p.startswith(INTERNAL_PREFIXES) for p in patterns), patterns


@contextmanager
def raw_subscription(broker: Broker, pattern: str) -> Iterator[None]:
    """A SUB socket on the node's delivery port subscribed to ``pattern`` as the wire
    spells it (pattern, NUL), past every client-side check."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"tcp://127.0.0.1:{broker.ports['deliver']}")
        sock.setsockopt(zmq.SUBSCRIBE, pattern.encode() + b"\0")
        yield
    finally:
        sock.close()
        ctx.term()


def refused(broker: Broker) -> int:
    n: int = broker.status()["counters"]["dropped"].get("bad_input.internal_pattern", 0)
    return n


def group_members(broker: Broker, group: str) -> dict[str, int]:
    for row in broker.status()["queues"]:
        if row.get("group") == group:
            members: dict[str, int] = row["members"]
            return members
    return {}


def test_a_raw_subscription_to_a_group_key_is_no_member(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    a = broker_factory(broker_id="A", queues=(QueueRule(group="w", policy="round_robin"),))
    c = broker_factory(broker_id="C", links=(LinkConfig(name="ca", uri=a.endpoint),))
    real = Collector()
    client_factory(a.endpoint).subscribe("jobs.>", real, queue="w")
    marks = Collector()
    client_factory(c.endpoint).subscribe("MARK", marks)
    with raw_subscription(c, "$ZB.Q.w.jobs.>"):
        assert wait_until(lambda: refused(c) == 1, WAIT), c.status()["counters"]
        pub = client_factory(a.endpoint)
        # C's interest in MARK crossed the link after the refusal: had C advertised the
        # group key, A would have had it first
        assert wait_until(lambda: any(r["pattern"] == "MARK" for r in pub.routes()), WAIT)
        assert group_members(a, "w") == {"A": 1}
        for i in range(N):
            pub.publish("jobs.x", i)
        pub.publish("MARK", b"end")
        assert marks.wait_for(1, WAIT) and real.wait_for(N, WAIT)
        assert sorted(real.payloads()) == list(range(N))  # every one to the real member
        assert c.status()["queues_totals"]["unroutable"] == 0
        assert refused(c) == 1


def test_a_raw_subscription_to_a_home_key_takes_no_durable_name(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    a = broker_factory(broker_id="A")
    c = broker_factory(broker_id="C", links=(LinkConfig(name="ca", uri=a.endpoint),))
    ca = client_factory(a.endpoint)
    client_factory(c.endpoint).subscribe("MARK", Collector())
    with raw_subscription(c, "$ZB.DURABLE.billing"):
        assert wait_until(lambda: refused(c) == 1, WAIT), c.status()["counters"]
        assert wait_until(lambda: any(r["pattern"] == "MARK" for r in ca.routes()), WAIT)
        got = Collector()
        ca.subscribe("billing.>", got, durable="billing")  # created here, not refused
        for i in range(N):
            ca.publish("billing.x", i)
        assert got.wait_for(N, WAIT)
        assert got.payloads() == list(range(N))


def test_the_node_refuses_durables_and_queue_members_on_internal_patterns() -> None:
    """Past the client's own check (a raw DURABLE_OPEN), the node's options check
    refuses such a pattern with the same reason."""
    for pattern in ("$ZB.DURABLE.billing", "$ZB.SD.A"):
        said = open_options({"name": "d", "pattern": pattern})
        assert isinstance(said, str) and "internal to the nodes" in said
    for pattern in ("$ZB.ADVISORY.>", "$ZB.>"):
        assert isinstance(open_options({"name": "d", "pattern": pattern}), dict)
