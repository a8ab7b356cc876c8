"""A real Prometheus server (Debian's ``prometheus``, started by this test on 127.0.0.1
with a temporary config and a 1 s scrape interval, stopped by PID at teardown) scrapes a
``zbroker start --monitor`` process under traffic. The test asks Prometheus's HTTP API:
``zbroker_messages_received_total`` rises, and it and the per-link counters keep rising
through a link flap (the peer stops and comes back: the link object on the scraped node
vanishes and a new one replaces it) with no counter reset Prometheus can see."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.monitor.helpers import get
from tests.node_configs import FAST_LINK
from tests.processes import Procs
from zbroker import Broker, Client
from zbroker.config import LinkConfig

pytestmark = pytest.mark.slow

WAIT = 60.0


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict[str, Any]]:
        code, body = get(f"{self.url}/api/v1/query?query={urllib.parse.quote(promql)}")
        assert code == 200, body
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The single value of an instant query (None: no sample)."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def wait(self, promql: str, cond: Callable[[float], bool]) -> float:
        deadline = time.monotonic() + WAIT
        value = self.value(promql)
        while (value is None or not cond(value)) and time.monotonic() < deadline:
            time.sleep(0.25)
            value = self.value(promql)
        assert value is not None and cond(value), (promql, value)
        return value


@pytest.fixture
def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    return binary


def start_prometheus(
    procs: Procs, binary: str, tmp_path: Path, port: int, target: str
) -> Prometheus:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: zbroker\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    proc = procs.start(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.console.templates=/dev/null",
            "--web.console.libraries=/dev/null",
        ]
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr_text()
        try:
            if get(url + "/-/ready", timeout=2.0)[0] == 200:
                return Prometheus(url)
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"prometheus not ready: {proc.stderr_text()[-2000:]}")


class Traffic:
    """Publishes to the scraped node from a thread until stopped."""

    def __init__(self, client: Client) -> None:
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client,), daemon=True)
        self._thread.start()

    def _run(self, client: Client) -> None:
        while not self._stop.wait(0.05):
            for _ in range(20):
                client.publish("load.tick", b"x")
                self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def traffic() -> Iterator[list[Traffic]]:
    started: list[Traffic] = []
    try:
        yield started
    finally:
        for t in started:
            t.stop()


def test_prometheus_sees_counters_rise_through_a_link_flap(
    procs: Procs,
    prometheus_binary: str,
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    traffic: list[Traffic],
    tmp_path: Path,
) -> None:
    port_a, monitor_port, port_b = free_port(), free_port(), free_port()
    node = procs.zbroker(
        "start", "--id", "A", "--port", str(port_a), "--data-dir", str(tmp_path / "A"),
        "--monitor", f"127.0.0.1:{monitor_port}",
    )  # fmt: skip
    endpoint_a = f"tcp://127.0.0.1:{port_a}"
    wait_ready(endpoint_a, proc=node)
    assert node.wait_stderr(f"zbroker monitor at http://127.0.0.1:{monitor_port}", 10)
    links = (LinkConfig(name="ba", uri=endpoint_a, **FAST_LINK),)

    def start_b() -> Broker:
        b = broker_factory(broker_id="B", port=port_b, data_dir=tmp_path / "B", links=links)
        inbox = Collector()
        client_factory(b.endpoint).subscribe("load.>", inbox)
        assert inbox.wait_for(1, WAIT)  # the route is up and messages cross the link
        return b

    traffic.append(Traffic(client_factory(endpoint_a)))
    b = start_b()
    prom = start_prometheus(
        procs, prometheus_binary, tmp_path, free_port(), f"127.0.0.1:{monitor_port}"
    )
    prom.wait('up{job="zbroker"}', lambda v: v == 1)
    received = "zbroker_messages_received_total"
    sent_on_link = 'zbroker_link_messages_sent_total{link="ba",peer="B"}'
    first = prom.wait(received, lambda v: v > 0)
    prom.wait(received, lambda v: v > first)  # rising under traffic
    link_before = prom.wait(sent_on_link, lambda v: v > 0)

    b.stop()  # the flap: A's link from B goes down and its link object is dropped
    prom.wait("zbroker_link_downs_total", lambda v: v == 1)
    during = prom.wait(received, lambda v: v > first)
    start_b()
    prom.wait("zbroker_link_ups_total", lambda v: v == 2)
    prom.wait(received, lambda v: v > during)  # still rising after the flap
    prom.wait(sent_on_link, lambda v: v > link_before)  # the link's total goes on from there
    # over the whole run, Prometheus saw no counter go down
    for counter in (received, sent_on_link, "zbroker_messages_forwarded_total"):
        assert prom.value(f"resets({counter}[10m])") == 0, counter
    samples = prom.query(f"{received}[10m]")[0]["values"]
    values = [float(v) for _, v in samples]
    assert len(values) >= 3 and values == sorted(values)
