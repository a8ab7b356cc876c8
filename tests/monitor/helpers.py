"""Helpers of the monitor tests: HTTP reads and Prometheus text parsing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.node_configs import FAST_LINK as FAST_LINK
from zbroker import Broker
from zbroker.config import LinkConfig, MonitorConfig

#: a monitor on a free port, publishing snapshots often (tests wait on their values)
FAST_MONITOR = MonitorConfig(listen="127.0.0.1:0", interval=0.1)


def dialling_each_other(
    broker_factory: Callable[..., Broker], free_port: Callable[[], int], a_link: str, b_link: str
) -> Broker:
    """A (with the monitor) dials B over link ``a_link`` and B dials A over ``b_link``:
    A holds two links to B. Returns A."""
    pa, pb = free_port(), free_port()
    a = broker_factory(
        broker_id="A",
        port=pa,
        monitor=FAST_MONITOR,
        links=(LinkConfig(name=a_link, uri=f"tcp://127.0.0.1:{pb}", **FAST_LINK),),
    )
    broker_factory(
        broker_id="B",
        port=pb,
        links=(LinkConfig(name=b_link, uri=f"tcp://127.0.0.1:{pa}", **FAST_LINK),),
    )
    return a


def monitor_url(broker: Broker) -> str:
    url: str = broker.status()["monitor"]["url"]
    return url


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """(status code, body) of a GET, also for error codes."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url: str) -> Any:
    code, body = get(url)
    assert code == 200, (code, body)
    return json.loads(body)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    code, body = get(url + "/metrics")
    assert code == 200, body
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
