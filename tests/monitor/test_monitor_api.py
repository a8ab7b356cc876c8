"""The monitor's HTTP side on in-thread nodes: off by default, its config, the JSON API
against the CLI's ``--json`` (the same replies), and counters that only grow through a
link flap (the per-link totals outlive the link objects that vanish). /healthz:
``tests/monitor/test_monitor_health.py``."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from tests.helpers import Collector, wait_until
from tests.monitor.helpers import (
    FAST_LINK,
    FAST_MONITOR,
    get,
    get_json,
    monitor_url,
    sample,
    scrape,
)
from zbroker import Broker, Client, NodeConfig
from zbroker.broker import node_features
from zbroker.config import LinkConfig, MonitorConfig, config_from_mapping
from zbroker.const import PROTOCOL_VERSION
from zbroker.errors import AddressInUse, ConfigError
from zbroker.features.monitor import Monitor

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WAIT = 20.0


def test_monitor_is_off_by_default(broker: Broker) -> None:
    assert not NodeConfig().monitor.on
    assert not any(isinstance(f, Monitor) for f in node_features(NodeConfig()))
    assert "monitor" not in broker.status()
    # HOST:PORT as the keyword: typed for the MonitorConfig that __post_init__ makes of it
    on = NodeConfig(monitor="127.0.0.1:0")  # type: ignore[arg-type]
    assert any(isinstance(f, Monitor) for f in node_features(on))


def test_monitor_config() -> None:
    cfg = config_from_mapping({"monitor": {"listen": "127.0.0.1:9100", "interval": 2}}, "f.toml")
    assert cfg.monitor.on and cfg.monitor.address() == ("127.0.0.1", 9100)
    assert cfg.monitor.interval == 2.0
    on = config_from_mapping({"monitor": {"enabled": True}}, "f.toml")
    assert on.monitor.address() == ("127.0.0.1", 8222)
    assert MonitorConfig(listen="[::1]:0").address() == ("::1", 0)
    # with security on, only an explicit address turns it on
    with pytest.raises(ConfigError, match=r"monitor\.enabled with security on"):
        config_from_mapping({"monitor": {"enabled": True}, "security": {"enabled": True}}, "f")
    secure = config_from_mapping(
        {"monitor": {"listen": "127.0.0.1:9100"}, "security": {"enabled": True}}, "f"
    )
    assert secure.monitor.on
    for bad, why in [
        ({"listen": "nowhere"}, "is not HOST:PORT"),
        ({"listen": "127.0.0.1:70000"}, "bad port"),
        ({"listen": "[zz::1]:80"}, "bad IPv6"),
        ({"interval": 0}, "out of range"),
        ({"enabled": "yes"}, "true or false"),
        ({"colour": 1}, "unknown key"),
    ]:
        with pytest.raises(ConfigError, match=why):
            config_from_mapping({"monitor": bad}, "f.toml")


def test_monitor_port_taken_fails_start_cleanly(broker_factory: BrokerFactory) -> None:
    a = broker_factory(monitor=FAST_MONITOR)
    taken = monitor_url(a).rsplit(":", 1)[1]
    with pytest.raises(AddressInUse, match=f"monitor: cannot listen on 127.0.0.1:{taken}"):
        Broker(port=0, monitor=f"127.0.0.1:{taken}").start()
    # the failed node released everything: another starts and serves (healthy once its
    # loop has published its first snapshot: /healthz waits for it at most 2 s, which a
    # loaded suite can outlast)
    b = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(b) + "/healthz"
    answers: list[tuple[int, bytes]] = []

    def healthy() -> bool:
        answers.append(get(url))
        return answers[-1][0] == 200

    assert wait_until(healthy, 10.0), answers[-3:]


def _cli_json(args: list[str]) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_api_matches_cli_json(broker_factory: BrokerFactory, client_factory: ClientFactory) -> None:
    a = broker_factory(broker_id="A", monitor=FAST_MONITOR)
    b = broker_factory(broker_id="B", links=(LinkConfig(name="ba", uri=a.endpoint, **FAST_LINK),))
    ca, cb = client_factory(a.endpoint), client_factory(b.endpoint)
    ca.subscribe("alpha.>", Collector())
    cb.subscribe("beta.*", Collector())
    url = monitor_url(a)

    def settled() -> bool:
        routes = get_json(url + "/api/routes")
        return len(routes) == 2 and routes == _cli_json(["routes", "--broker", a.endpoint])

    assert _wait(settled)
    assert get_json(url + "/api/peers") == _cli_json(["peers", "--broker", a.endpoint])
    api, cli_status = get_json(url + "/api/status"), _cli_json(["status", "--broker", a.endpoint])
    assert set(api) == set(cli_status)
    for key in ("broker_id", "incarnation", "endpoints", "subscriptions", "interest", "monitor"):
        assert api[key] == cli_status[key], key
    links = get_json(url + "/api/links")
    # (heartbeats flow meanwhile: the byte counters differ between the two reads)
    live = ("uptime", "bytes_in", "bytes_out")
    assert _without(links, *live) == _without(cli_status["links"], *live)

    def caught_up() -> bool:
        # the API serves a snapshot up to an interval old, which may predate the CLI's
        # read: its counters reach the CLI's once a newer one is published
        rows = get_json(url + "/api/links")
        return all(
            now["bytes_in"] >= then["bytes_in"] and now["bytes_out"] >= then["bytes_out"]
            for now, then in zip(rows, cli_status["links"], strict=True)
        )

    assert _wait(caught_up)
    assert len(links) == 1
    assert api["links"][0]["peer"] == "B" and api["links"][0]["state"] == "up"
    assert get_json(url + "/api/durables") == api["durables"] == []
    assert get_json(url + "/api/queues") == []
    graph = get_json(url + "/api/graph")
    assert sorted(n["id"] for n in graph["nodes"]) == ["A", "B"]
    assert [(e["a"], e["b"], e["state"]) for e in graph["edges"]] == [("A", "B", "up")]
    metrics = scrape(url)
    assert sample(metrics, "zbroker_links_up") == 1
    assert sample(metrics, "zbroker_link_up", link="ba", peer="B", kind="accepted", state="up") == 1
    assert sample(metrics, "zbroker_subscriptions") == 1
    assert sample(metrics, "zbroker_interest_routes") == 2
    assert sample(metrics, "zbroker_forward_queued_total") == 0
    assert sample(metrics, "zbroker_info", broker_id="A", version=str(PROTOCOL_VERSION)) == 1
    assert (sample(metrics, "zbroker_store_bytes") or 0) > 0
    code, body = get(url + "/api/nothing")
    assert code == 404 and b"/api/status" in body


def _without(rows: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in keys} for row in rows]


def _wait(cond: Callable[[], bool], timeout: float = WAIT) -> bool:
    return wait_until(cond, timeout, 0.05)


def test_counters_only_grow_through_a_link_flap(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    """B dials A; on A the accepted link (and its counters) vanishes when B stops: the
    totals A exports for it keep what it counted, and grow again once B is back."""
    a = broker_factory(broker_id="A", monitor=FAST_MONITOR)
    port_b = free_port()
    link = (LinkConfig(name="ba", uri=a.endpoint, **FAST_LINK),)
    url = monitor_url(a)
    inbox = Collector()
    client_factory(a.endpoint).subscribe("flap.>", inbox)

    def send_from_b(n: int, start: int) -> Broker:
        b = broker_factory(broker_id="B", port=port_b, data_dir=tmp_path / "B", links=link)
        pub = client_factory(b.endpoint)
        assert _wait(lambda: any(r["pattern"] == "flap.>" for r in pub.routes()))
        for i in range(start, start + n):
            pub.publish(f"flap.{i}", b"x")
        assert inbox.wait_for(start + n, WAIT)
        return b

    def link_total(name: str) -> float | None:
        return sample(scrape(url), name, link="ba", peer="B", kind="accepted")

    b = send_from_b(30, 0)
    assert _wait(lambda: link_total("zbroker_link_messages_received_total") == 30)
    assert sample(scrape(url), "zbroker_messages_delivered_total") == 30
    b.stop()
    assert _wait(lambda: get_json(url + "/api/links") == [])  # the accepted link is gone
    after_down = scrape(url)
    assert (
        sample(
            after_down, "zbroker_link_messages_received_total", link="ba", peer="B", kind="accepted"
        )
        == 30
    )
    assert sample(after_down, "zbroker_link_downs_total") == 1
    assert sample(after_down, "zbroker_messages_delivered_total") == 30
    send_from_b(20, 30)
    assert _wait(lambda: link_total("zbroker_link_messages_received_total") == 50)
    final = scrape(url)
    assert sample(final, "zbroker_link_ups_total") == 2
    assert sample(final, "zbroker_messages_delivered_total") == 50
    assert len(inbox) == 50


def test_every_metric_is_documented(broker_factory: BrokerFactory) -> None:
    """docs/metrics.md lists exactly the metrics /metrics exports, with their types."""
    a = broker_factory(monitor=FAST_MONITOR)
    code, body = get(monitor_url(a) + "/metrics")
    assert code == 200
    exported = {}
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            exported[name] = kind
    docs = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text("utf-8")
    documented = {}
    section = ""
    for line in docs.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().lower()
        elif line.startswith("| `zbroker_"):
            documented[line.split("`")[1]] = "counter" if section == "counters" else "gauge"
    assert exported == documented


def test_snapshots_only_while_read(broker_factory: BrokerFactory) -> None:
    """The loop builds snapshots only while somebody reads them; a read after a quiet
    spell gets a fresh one."""
    a = broker_factory(monitor=FAST_MONITOR)
    hub = a.call(lambda node: next(f for f in node.features if isinstance(f, Monitor))).hub
    hub.idle = 0.5
    url = monitor_url(a)
    get(url + "/metrics")
    assert _wait(lambda: time.monotonic() - hub.read_at > hub.idle + 0.2)
    quiet = hub.published
    time.sleep(2.0)  # twenty snapshot intervals with nobody reading
    assert hub.published == quiet
    before = time.time()
    samples = scrape(url)
    assert hub.published > quiet  # the read asked for one (and keeps them coming a while)
    assert (sample(samples, "zbroker_snapshot_timestamp_seconds") or 0) >= before


def test_a_scrape_never_holds_up_messages(
    broker_factory: BrokerFactory, client_factory: ClientFactory, monkeypatch: Any
) -> None:
    """A scrape stuck in rendering (here: until messages got through) does not stop the
    node: messages published meanwhile are delivered, all of them, once."""
    from zbroker.features.monitor import metrics

    a = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(a)
    inbox = Collector()
    client_factory(a.endpoint).subscribe("during.>", inbox)
    rendering, delivered = threading.Event(), threading.Event()
    render = metrics.MetricsRenderer.render

    def stuck(self: metrics.MetricsRenderer) -> bytes:
        rendering.set()
        delivered.wait(WAIT)
        return render(self)

    monkeypatch.setattr(metrics.MetricsRenderer, "render", stuck)
    result: list[tuple[int, bytes]] = []
    scraper = threading.Thread(target=lambda: result.append(get(url + "/metrics", WAIT + 10)))
    scraper.start()
    assert rendering.wait(WAIT)
    pub = client_factory(a.endpoint)
    for i in range(200):
        pub.publish(f"during.{i}", b"x")
    assert inbox.wait_for(200, WAIT)
    assert not result  # the scrape is still stuck while all of them arrived
    delivered.set()
    scraper.join(WAIT)
    assert result and result[0][0] == 200
    assert sorted(inbox.topics()) == sorted(f"during.{i}" for i in range(200))
    assert set(inbox.topics().values()) == {1}


def test_bad_http_requests_are_refused_and_the_monitor_goes_on(
    broker_factory: BrokerFactory,
) -> None:
    a = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(a)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    for garbage in (
        b"\x00\xff\xfe garbage\r\n\r\n",
        b"GET\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\n\r\n",
    ):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(garbage)
            reply = sock.recv(4096)
        # (a request line without a version gets an HTTP/0.9 answer: the body alone)
        assert b"400" in reply or b"501" in reply, reply
    assert get(url + "/healthz")[0] == 200
    assert get(url + "/api/status?pretty=1")[0] == 200  # a query string is ignored


def test_api_queues_shows_queue_groups_as_zbroker_queues_does(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """/api/queues is the queues section of the status, as ``zbroker queues --json``."""
    a = broker_factory(broker_id="A", monitor=FAST_MONITOR)
    c = client_factory(a.endpoint)
    c.subscribe("jobs.>", Collector(), queue="workers")
    c.subscribe("jobs.>", Collector(), queue="workers")
    url = monitor_url(a)

    def shown() -> bool:
        rows = get_json(url + "/api/queues")
        return [r.get("group") for r in rows] == ["workers"]

    assert _wait(shown), get_json(url + "/api/queues")
    assert get_json(url + "/api/queues") == _cli_json(["queues", "--broker", a.endpoint])
    assert sample(scrape(url), "zbroker_queues") == 1
