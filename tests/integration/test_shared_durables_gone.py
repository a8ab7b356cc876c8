"""Shared durables: a consumer whose connection died, found gone by the send of a message
(before any probe), leaves that message to the other consumers at once, with no further
traffic; if it was the last consumer, the durable is detached (advisory) as on a probe.

The probe is pushed out of the way (an hour) so that only the send can find the consumer
gone, and the test waits, inside the node thread, until the node's ROUTER has seen the
killed process's connection go: what happens next does not depend on timing.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.features.durables import feature as durables_feature
from zbroker.features.durables.attaching import alive
from zbroker.node.kernel import Node

WAIT = 20.0
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


@pytest.fixture
def broker(broker_factory: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.setattr(durables_feature, "DURABLE_PROBE_INTERVAL", 3600.0)
    return broker_factory(broker_id="a")


def _durables(node: Node) -> Any:
    return next(f for f in node.features if f.name == "durables")


def consumer_idents(broker: Broker, name: str) -> list[bytes]:
    """The durable's consumers' connections, in the order they attached."""
    return list(broker.call(lambda node: list(_durables(node)._durables[name].shared.consumers)))


def gone(broker: Broker, ident: bytes) -> bool:
    """Has the node's ROUTER seen this connection go? (A PING: it detaches nothing.)"""
    return not broker.call(lambda node: alive(_durables(node)._ctx, ident))


def probe_pushed_off(node: Node) -> bool:
    return bool(_durables(node)._next_probe > time.monotonic() + 60.0)


def attached(node: Node, name: str) -> bool:
    """Is the durable ``name`` attached in the node's store?"""
    assert node.store is not None
    return name in node.store.durable_queues._attached


def shared_row(broker: Broker, name: str) -> dict[str, Any]:
    return dict(next(d for d in broker.status()["durables"] if d["name"] == name))


def start_doomed(procs: Any, broker: Broker, wait_until: WaitUntil) -> Any:
    """A consumer in its own process, attached first (so it wins the first message)."""
    doomed = procs.zbroker(
        "sub", "jobs.>", "--durable", "work", "--shared", "--json", "-b", broker.endpoint
    )
    assert doomed.wait_stderr("subscribed to", WAIT), doomed.stderr_text()
    # the durable's first probe (the first tick that sees it) is done: the next is an hour off
    assert wait_until(lambda: broker.call(probe_pushed_off), WAIT)
    return doomed


def kill(doomed: Any, broker: Broker, ident: bytes, wait_until: WaitUntil) -> None:
    """SIGKILL the consumer; returns once the node's ROUTER knows its connection is gone."""
    doomed.send_signal(signal.SIGKILL)
    assert doomed.wait(10.0) == -signal.SIGKILL
    assert wait_until(lambda: gone(broker, ident), WAIT)


def test_message_to_a_dead_consumer_goes_to_the_idle_one(
    procs: Any, broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    doomed = start_doomed(procs, broker, wait_until)
    survivor = Collector()
    client_factory(broker.endpoint).subscribe(
        "jobs.>", survivor, durable="work", shared=True, credit=10
    )
    first, second = consumer_idents(broker, "work")
    kill(doomed, broker, first, wait_until)
    pub = client_factory(broker.endpoint)
    pub.publish("jobs.a", "m1", persistent=True, confirm=True)
    # the send to the dead one failed: the survivor gets it with nothing else happening,
    # flagged (its delivery mark was committed before that send)
    assert wait_until(lambda: len(survivor) >= 1, WAIT)
    assert [(m.payload, m.redelivered) for m in survivor.snapshot()] == [("m1", True)]
    assert consumer_idents(broker, "work") == [second]
    assert wait_until(lambda: shared_row(broker, "work")["stored"] == 0, WAIT)
    row = shared_row(broker, "work")
    assert (row["consumers"], row["in_flight"], row["delivered"]) == (1, 0, 1)
    assert len(survivor) == 1


def test_last_consumer_dead_detaches_the_durable(
    procs: Any, broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    advisories = Collector()
    watcher = client_factory(broker.endpoint)
    watcher.subscribe("$ZB.ADVISORY.a.DURABLE_DETACHED", advisories)
    doomed = start_doomed(procs, broker, wait_until)
    (ident,) = consumer_idents(broker, "work")
    kill(doomed, broker, ident, wait_until)
    client_factory(broker.endpoint).publish("jobs.a", "m1", persistent=True, confirm=True)
    assert wait_until(lambda: len(advisories) >= 1, WAIT)
    assert [(p["name"], p["reason"]) for p in advisories.payloads()] == [
        ("work", "subscriber gone")
    ]
    assert shared_row(broker, "work")["attached"] is False
    assert not broker.call(lambda node: attached(node, "work"))
    # the message waits for the next consumer, flagged
    late = Collector()
    client_factory(broker.endpoint).subscribe("jobs.>", late, durable="work", shared=True)
    assert wait_until(lambda: len(late) >= 1, WAIT)
    assert [(m.payload, m.redelivered) for m in late.snapshot()] == [("m1", True)]
