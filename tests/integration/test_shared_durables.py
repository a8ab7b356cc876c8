"""Shared durable subscriptions: many consumers on one durable queue, each stored message
to one of them, acknowledged after the callback, redelivered (flagged) to another when
its consumer dies or detaches unacknowledged; stored while no consumer is attached; an
exclusive durable held by a live consumer is refused, never taken over silently."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector, wait_until
from zbroker import Broker, Client
from zbroker.errors import ConfigError, RequestError

WAIT = 20.0
GRACE = 0.5
N = 300
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def durable_row(broker: Broker, name: str) -> dict[str, Any]:
    rows = [d for d in broker.status()["durables"] if d["name"] == name]
    assert len(rows) == 1
    return dict(rows[0])


def test_each_message_to_one_consumer(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    consumers = [Collector() for _ in range(3)]
    for c in consumers:
        client_factory(broker.endpoint).subscribe(
            "bill.>", c, durable="billing", shared=True, credit=10
        )
    assert durable_row(broker, "billing")["consumers"] == 3
    pub = client_factory(broker.endpoint)
    for i in range(N):
        pub.publish("bill.x", i, persistent=True, confirm=i == N - 1)
    assert wait_until(lambda: sum(len(c) for c in consumers) >= N, WAIT)
    time.sleep(GRACE)
    got = [p for c in consumers for p in c.payloads()]
    assert sorted(got) == list(range(N))
    assert all(len(c) > 0 for c in consumers), [len(c) for c in consumers]
    assert not any(r for c in consumers for r in c.redelivered())
    assert wait_until(lambda: durable_row(broker, "billing")["stored"] == 0, WAIT)
    row = durable_row(broker, "billing")
    assert (row["delivered"], row["redelivered"], row["in_flight"]) == (N, 0, 0)


def test_stored_while_no_consumer_then_shared_out(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    first = client_factory(broker.endpoint)
    first.subscribe("bill.>", Collector(), durable="billing", shared=True).unsubscribe()
    assert wait_until(lambda: durable_row(broker, "billing")["consumers"] == 0, WAIT)
    pub = client_factory(broker.endpoint)
    for i in range(N):
        pub.publish("bill.x", i, persistent=True, confirm=i == N - 1)
    assert durable_row(broker, "billing")["stored"] == N
    a, b = Collector(), Collector()
    client_factory(broker.endpoint).subscribe("bill.>", a, durable="billing", shared=True)
    client_factory(broker.endpoint).subscribe("bill.>", b, durable="billing", shared=True)
    assert wait_until(lambda: len(a) + len(b) >= N, WAIT)
    time.sleep(GRACE)
    assert sorted(a.payloads() + b.payloads()) == list(range(N))
    assert wait_until(lambda: durable_row(broker, "billing")["stored"] == 0, WAIT)


def test_detached_unacknowledged_go_to_another_flagged(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """A consumer holding messages it has not acknowledged detaches: they go to the other
    consumer, flagged redelivered; nothing is lost, nothing else repeats."""
    release = threading.Event()
    held: list[Any] = []

    def stuck(msg: Any) -> None:
        held.append(msg.payload)
        release.wait(WAIT)

    slow_client = client_factory(broker.endpoint)
    slow = slow_client.subscribe("bill.>", stuck, durable="billing", shared=True, credit=5)
    pub = client_factory(broker.endpoint)
    for i in range(20):
        pub.publish("bill.x", i, persistent=True, confirm=i == 19)
    assert wait_until(lambda: durable_row(broker, "billing")["in_flight"] == 5, WAIT)
    other = Collector()
    client_factory(broker.endpoint).subscribe("bill.>", other, durable="billing", shared=True)
    assert wait_until(lambda: len(other) >= 15, WAIT)
    # detach (sent once the stuck callback returns: callbacks run on the client thread);
    # the stuck consumer processed message 0 and nothing after it
    slow.unsubscribe()
    release.set()
    assert wait_until(lambda: set(other.payloads()) >= set(range(1, 20)), WAIT)
    assert wait_until(lambda: durable_row(broker, "billing")["stored"] == 0, WAIT)
    time.sleep(GRACE)
    assert held == [0]
    got = other.payloads()
    assert len(got) == len(set(got)) and set(got) | {0} == set(range(20))
    flagged = {m.payload for m in other.snapshot() if m.redelivered}
    # its 4 unacknowledged; message 0 too if the detach overtook its acknowledgement
    assert set(range(1, 5)) <= flagged <= set(range(5))
    assert durable_row(broker, "billing")["redelivered"] == len(flagged)


def test_exclusive_durable_is_not_taken_over(broker: Broker, client_factory: ClientFactory) -> None:
    one, two = client_factory(broker.endpoint), client_factory(broker.endpoint)
    sub = one.subscribe("bill.>", Collector(), durable="solo")
    with pytest.raises(RequestError, match="held by another consumer"):
        two.subscribe("bill.>", Collector(), durable="solo")
    with pytest.raises(RequestError, match="held by an exclusive consumer"):
        two.subscribe("bill.>", Collector(), durable="solo", shared=True)
    sub.unsubscribe()  # (a one-way detach on another connection: wait for the node to have it)
    assert wait_until(
        lambda: not any(d["attached"] for d in broker.status()["durables"] if d["name"] == "solo"),
        WAIT,
    ), broker.status()["durables"]
    assert two.subscribe("bill.>", Collector(), durable="solo", shared=True).active
    with pytest.raises(RequestError, match="shared by 1 consumer"):
        one.subscribe("bill.>", Collector(), durable="solo")
    with pytest.raises(ConfigError, match="needs durable=NAME"):
        one.subscribe("bill.>", Collector(), shared=True)


@pytest.mark.slow
def test_consumer_sigkilled_mid_stream(
    procs: Any,
    broker: Broker,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """A ``zbroker sub --durable billing --shared`` process is SIGKILLed mid-stream: what
    it had not acknowledged goes to the other consumer, flagged; every message is
    processed, and only flagged ones twice."""
    doomed = procs.zbroker(
        "sub", "bill.>", "--durable", "billing", "--shared", "--json", "-b", broker.endpoint
    )
    assert doomed.wait_stderr("subscribed to", WAIT), doomed.stderr_text()
    survivor, survivor_window = Collector(), 50
    client_factory(broker.endpoint).subscribe(
        "bill.>", survivor, durable="billing", shared=True, credit=survivor_window
    )
    pub = client_factory(broker.endpoint)
    total = 2000
    for i in range(total):
        pub.publish("bill.x", i, persistent=True, confirm=i % 200 == 199)
        if i == 600:
            assert wait_until(lambda: len(doomed.stdout_text().splitlines()) > 50, WAIT)
            # stopped first: it keeps its connection and acknowledges nothing more, so
            # the node fills its credit window (100), which the kill then leaves unacknowledged
            doomed.send_signal(signal.SIGSTOP)
    assert wait_until(
        lambda: durable_row(broker, "billing")["in_flight"] > survivor_window, WAIT
    ), durable_row(broker, "billing")
    doomed.send_signal(signal.SIGKILL)
    assert doomed.wait(10.0) == -signal.SIGKILL
    killed = [json.loads(x)["payload"] for x in doomed.stdout_text().splitlines() if x]
    assert wait_until(lambda: set(killed) | set(survivor.payloads()) == set(range(total)), WAIT)
    assert wait_until(lambda: durable_row(broker, "billing")["stored"] == 0, WAIT)
    time.sleep(GRACE)
    seen = Counter(survivor.payloads())
    assert all(n == 1 for n in seen.values())  # the survivor never got one twice
    twice = set(killed) & set(seen)
    flagged = {m.payload for m in survivor.snapshot() if m.redelivered}
    assert twice <= flagged  # what both processed came flagged the second time
    # what the killed one held went to the survivor, flagged, and the node counted it
    assert flagged and durable_row(broker, "billing")["redelivered"] == len(flagged)
    assert durable_row(broker, "billing")["consumers"] == 1
