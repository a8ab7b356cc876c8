"""What the tests of a shared durable's moving home share (test_durable_moves.py): a
slow consumer, the nodes' view of their durables, a backlog, and a target node that stops
in the middle of a move and comes back."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from tests.helpers import Collector
from tests.integration.test_shared_remote import (
    GRACE,
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    link,
    queue_row,
)
from tests.ports import free_port
from zbroker import Broker, Client
from zbroker.client import Message

__all__ = [
    "Slow",
    "StallingTarget",
    "backlog",
    "consumed_once",
    "counters",
    "emptied_home",
    "holds",
    "publishing_until_moved",
]


class Slow(Collector):
    """A consumer that takes ``pause`` seconds per message (so a backlog lasts)."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause = pause

    def __call__(self, msg: Message) -> None:
        time.sleep(self.pause)
        super().__call__(msg)


def holds(broker: Broker, name: str) -> bool:
    return any(d["name"] == name for d in broker.status()["durables"])


def counters(broker: Broker) -> dict[str, Any]:
    return dict(broker.status()["counters"])


def backlog(client: Client, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        client.publish("bill.x", i, persistent=True, confirm=i == start + n - 1)


def publishing_until_moved(
    wait_until: WaitUntil,
    client: Client,
    old_home: Broker,
    start: int,
    *,
    pause: float = 0.0,
    confirm_every: int = 1,
) -> int:
    """Publish persistent ``bill.x`` payloads ``start``, ``start + 1``, ... from a
    thread, without a break longer than ``pause``, until ``old_home`` holds durable
    ``billing`` no more (it must, within WAIT) and a second after; returns how many."""
    stop, sent = threading.Event(), list[int]()

    def publish() -> None:
        while not stop.is_set():
            confirm = len(sent) % confirm_every == 0
            client.publish("bill.x", start + len(sent), persistent=True, confirm=confirm)
            sent.append(1)
            time.sleep(pause)

    t = threading.Thread(target=publish)
    t.start()
    try:
        moved = wait_until(lambda: not holds(old_home, "billing"), WAIT)
        assert moved, queue_row(old_home, "billing")
        time.sleep(1.0)
    finally:
        stop.set()
        t.join()
    return len(sent)


def emptied_home(client_factory: ClientFactory, a: Broker) -> None:
    """Create shared durable ``billing`` on ``a`` and leave it without consumers."""
    client_factory(a.endpoint).subscribe(
        "bill.>", Collector(), durable="billing", shared=True
    ).unsubscribe()


class StallingTarget:
    """Node C, a move's target, that keeps the durable once it has it and can stop in the
    middle of the move: its consumer holds what it is sent until C stops, and C comes back
    as the same node (its data directory and port)."""

    def __init__(
        self,
        broker_factory: BrokerFactory,
        client_factory: ClientFactory,
        tmp_path: Any,
        dial: Broker,
        link_name: str,
    ) -> None:
        self._start = functools.partial(
            broker_factory,
            broker_id="C",
            links=(link(link_name, dial),),
            data_dir=tmp_path / "c",
            port=free_port(),
            redistribution_delay=600.0,
        )
        self._clients = client_factory
        self.node = self._start()
        self._gate = threading.Event()
        self._sub: Client | None = None

    def stall(self) -> None:
        """A consumer on C that takes 5 messages and holds them (a consumer about to die)."""
        self._sub = self._clients(self.node.endpoint)
        self._sub.subscribe(
            "bill.>", lambda m: self._gate.wait(WAIT), durable="billing", shared=True, credit=5
        )

    def restart(self) -> Broker:
        """Stop C, let its consumer go, and start C again 3 s later (its routes gone
        meanwhile, as a target's that dies mid-move)."""
        self.node.stop()
        self._gate.set()
        if self._sub is not None:
            self._sub.close()
        time.sleep(3.0)
        self.node = self._start()
        return self.node


def consumed_once(
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    a: Broker,
    c: Broker,
    n: int,
    credit: int,
    timeout: float,
) -> None:
    """A consumer on ``c`` gets each of the ``n`` messages, none twice unless flagged
    redelivered, and the old home ``a`` ends holding nothing."""
    got = Collector()
    client_factory(c.endpoint).subscribe(
        "bill.>", got, durable="billing", shared=True, credit=credit
    )
    assert wait_until(lambda: set(got.payloads()) == set(range(n)), timeout), len(
        set(got.payloads())
    )
    time.sleep(GRACE)
    plain = [m.payload for m in got.snapshot() if not m.redelivered]
    assert len(plain) == len(set(plain))
    assert wait_until(lambda: not holds(a, "billing"), WAIT)
