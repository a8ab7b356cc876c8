"""Idempotent persistent publishes (issue 18, item 8): a persistent publish whose
confirmation is lost and that is retried is stored exactly once.

The confirmation is lost at the client (its reply dropped as it arrives), so the node has
stored the message and answered, and the publisher never hears of it: the situation a
timeout leaves. Counts are exact: the node's retention log and a durable queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from zbroker import Broker, Client, PublishTimeout, wire
from zbroker.store import RetainRule

WAIT = 30.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


class LostReplies:
    """Drops the PUBLISH replies a client gets while ``dropping`` is above 0 (each drop
    counts it down; -1: drop every one until set to 0)."""

    def __init__(self, client: Client, dropping: int = 1) -> None:
        self.dropping = dropping
        self.dropped = 0
        self._lock = threading.Lock()
        requests = client._thread._requests  # the client thread's requests in flight
        self._reply = requests.reply
        requests.reply = self._filter  # type: ignore[method-assign]

    def _filter(self, op: int, req_id: int, body: dict[str, Any]) -> None:
        with self._lock:
            drop = op == wire.PUBLISH and self.dropping != 0
            if drop:
                self.dropped += 1
                if self.dropping > 0:
                    self.dropping -= 1
        if not drop:
            self._reply(op, req_id, body)


def publish_until_confirmed(client: Client, topic: str, payload: bytes) -> dict[str, Any]:
    """What an application does with a persistent message it must not lose."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            reply: dict[str, Any] = client.publish(topic, payload, persistent=True, confirm=True)
            return reply
        except PublishTimeout as exc:
            assert time.monotonic() < deadline, exc


def durable_stored(client: Client, name: str) -> int:
    (d,) = [d for d in client.status()["durables"] if d["name"] == name]
    return int(d["stored"])


def test_lost_confirmation_retried_is_stored_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(broker_id="I", retain=(RetainRule("IP.>"),))
    sub = client_factory(broker.endpoint)
    sub.subscribe("IP.>", lambda m: None, durable="d").unsubscribe()  # a queue, detached
    pub = client_factory(broker.endpoint, publish_timeout=2.0)
    lost = LostReplies(pub)
    first = publish_until_confirmed(pub, "IP.X", b"once")
    assert lost.dropped == 1
    second = pub.publish("IP.X", b"next", persistent=True, confirm=True)
    assert [m.payload for m in sub.read("IP.>")] == [b"once", b"next"]
    assert durable_stored(sub, "d") == 2
    # the retry was answered as the first try was: same message id and log sequence
    assert first["id"] == ["I", broker.incarnation, 1] and first["retained_seq"] == 1
    assert second["id"] == ["I", broker.incarnation, 2] and second["retained_seq"] == 2
