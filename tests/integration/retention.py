"""What the retention tests (``test_retention*.py``) share: nodes with ``retain`` rules
(:func:`retaining`), waiting for the log to hold a range, and readers of the log and the
store's stats.

In-thread Brokers with ``retain`` rules, real Clients over ZeroMQ on 127.0.0.1. Waiting is
done on conditions with a bound, never on fixed sleeps. Counts are exact: the log must hold
exactly the messages published, with exactly the sequences expected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zbroker import (
    Broker,
    Client,
    Message,
)
from zbroker.config import RetainRule

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait
GRACE = 0.3  # seconds: extra time granted to a message that must *not* arrive


BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def retaining(factory: BrokerFactory, *rules: RetainRule, **options: Any) -> Broker:
    options.setdefault("broker_id", "R")
    return factory(retain=rules, **options)


def wait_log(client: Client, last: int, wait_until: WaitUntil, first: int = 1) -> None:
    """Wait until the node's log range is exactly (first, last)."""
    ok = wait_until(lambda: client.log_range() == (first, last), WAIT, 0.02)
    assert ok, client.log_range()


def store_stats(broker: Broker) -> dict[str, Any]:
    stats: dict[str, Any] = broker.status()["store"]
    return stats


def log_view(msgs: list[Message]) -> list[tuple[int | None, str, Any]]:
    return [(m.log_seq, m.topic, m.payload) for m in msgs]
