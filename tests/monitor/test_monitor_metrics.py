"""/metrics against what the node counts: refusals under the right reason, one series
per link (two links of one name to one peer are two series), and per-link totals that
neither hold on to links gone nor mix two links up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import wait_until
from tests.monitor.helpers import FAST_MONITOR, monitor_url, scrape
from zbroker import Broker
from zbroker.config import LinkConfig

BrokerFactory = Callable[..., Broker]
WAIT = 20.0
FAST_LINK: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "reconnect_initial_delay": 0.1,
    "reconnect_max_delay": 0.5,
}


def _failures(url: str) -> dict[str, float]:
    return {
        dict(labels)["reason"]: value
        for (name, labels), value in scrape(url).items()
        if name == "zbroker_handshake_failures_total"
    }


def test_a_refused_handshake_is_not_called_a_duplicate_broker_id(
    broker_factory: BrokerFactory,
) -> None:
    """A link refused because its peer is in another group counts under ``handshake``;
    ``duplicate_broker_id`` counts only what the node refused for a duplicate ID."""
    b = broker_factory(broker_id="B", group="other")
    slow = {**FAST_LINK, "reconnect_initial_delay": 60.0, "reconnect_max_delay": 60.0}
    a = broker_factory(
        broker_id="A", monitor=FAST_MONITOR, links=(LinkConfig(name="ab", uri=b.endpoint, **slow),)
    )
    url = monitor_url(a)
    assert wait_until(lambda: _failures(url).get("handshake", 0) >= 1, WAIT), _failures(url)
    st = a.status()["counters"]
    assert st["handshakes_refused"] == 1 and "duplicate_broker_id" not in st["dropped"]
    assert _failures(url) == {"duplicate_broker_id": 0, "handshake": 1, "auth": 0}
