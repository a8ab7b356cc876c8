"""What the one-node integration tests share (``test_node*.py``): the address, the
longest condition wait, the fixtures' types and two status readers.

Waiting is done on conditions, never on fixed sleeps. To prove that nothing *more* arrives
(exactly-once), a test publishes a final "barrier" message after the ones it counts: the
node processes one publisher's messages in order and sends everything for one client down
one connection in order, so once the barrier arrived every earlier copy (or duplicate) has
arrived too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zbroker import Broker, Client

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait (generous: CI machines are slow)

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def patterns_of(target: Broker | Client) -> set[str]:
    return set(target.status()["subscriptions"]["patterns"])


def counters(target: Broker | Client) -> dict[str, Any]:
    result: dict[str, Any] = target.status()["counters"]
    return result
