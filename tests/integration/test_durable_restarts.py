"""Durable subscriptions across a node's restart (in-thread, and a ``zbroker start`` process
killed with SIGKILL) and in a network, where their interest stays while the subscriber is
away (:mod:`.durables`)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.durables import (
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    detach_and_sync,
    durable_is,
    durable_of,
    endpoint,
    numbers,
    publish_all,
    route_patterns,
)
from tests.node_configs import FAST_LINK
from zbroker import Client
from zbroker.config import LinkConfig

# -- 7. node restart (in-thread) -----------------------------------------------------------------


def test_durables_and_stored_messages_survive_a_restart(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: WaitUntil,
) -> None:
    n = 50
    port, data_dir = free_port(), tmp_path / "restart-node"
    node = broker_factory(port=port, data_dir=data_dir)
    with Client(node.endpoint, timeout=10.0) as client:
        detach_and_sync(client, client.subscribe("RS.>", lambda m: None, durable="rs"))
        detach_and_sync(
            client, client.subscribe("RS.CAP.>", lambda m: None, durable="rscap", max_msgs=5)
        )
        publish_all(client, "RS.A", numbers(n))
        publish_all(client, "RS.CAP.B", numbers(8))
        assert wait_until(lambda: durable_is(node, "rs", stored=n + 8), WAIT)
        assert wait_until(lambda: durable_is(node, "rscap", stored=5, dropped=3), WAIT)
    node.stop()

    node = broker_factory(port=port, data_dir=data_dir)
    entry = durable_of(node, "rs")
    assert entry is not None
    assert entry == {
        "name": "rs",
        "pattern": "RS.>",
        "attached": False,
        "in_flight": 0,
        "stored": n + 8,
        "dropped": 0,
        "max_msgs": 0,
    }
    assert durable_is(node, "rscap", stored=5, dropped=3, max_msgs=5)
    assert {"RS.>", "RS.CAP.>"} <= route_patterns(node)

    client = client_factory(node.endpoint)
    got = Collector()
    client.subscribe("RS.>", got, durable="rs")
    assert client.durable_info["rs"]["created"] is False
    client.publish("RS.A", b"barrier")
    assert got.wait_payload(b"barrier"), got.payloads()
    assert [m.payload for m in got.messages if m.topic == "RS.A"] == [*numbers(n), b"barrier"]
    assert [m.payload for m in got.messages if m.topic == "RS.CAP.B"] == numbers(8)
    assert len(got) == n + 8 + 1
    assert not any(got.redelivered())
    capped = Collector()
    client.subscribe("RS.CAP.>", capped, durable="rscap")
    assert client.durable_info["rscap"]["stored"] == 5
    assert wait_until(lambda: durable_is(node, "rs", stored=0, in_flight=0), WAIT)
    # queue sequence numbers continue after the restart: new messages are not mistaken
    # for acknowledged ones
    client.publish("RS.CAP.B", b"after")
    assert capped.wait_payload(b"after"), capped.payloads()
    assert capped.payloads() == [*numbers(5, 3), b"after"]
    assert got.wait_payload(b"after")
    assert got.payloads()[-1] == b"after"
    assert len(got) == n + 8 + 2
    assert not any(capped.redelivered())
    assert wait_until(lambda: durable_is(node, "rscap", stored=0, in_flight=0), WAIT)


def restart_with_connected_subscriber(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    port: int,
    data_dir: Path,
    wait_until: WaitUntil,
    *,
    heartbeat_timeout: float,
    down_for: float,
    attach_timeout: float,
) -> None:
    """A subscriber stays connected while its node restarts (down for ``down_for`` s):
    its client must reattach the durable by itself and get exactly what follows."""
    n = 30
    node = broker_factory(port=port, data_dir=data_dir)
    got = Collector()
    sub_client = client_factory(
        node.endpoint,
        heartbeat_interval=0.2,
        heartbeat_timeout=heartbeat_timeout,
        reconnect_initial_delay=0.1,
        reconnect_max_delay=0.5,
    )
    sub_client.subscribe("RA.>", got, durable="ra")
    with Client(node.endpoint, timeout=10.0) as pub:
        publish_all(pub, "RA.X", numbers(n))
    assert got.wait_for(n)
    assert wait_until(lambda: durable_is(node, "ra", stored=0, in_flight=0), WAIT)
    node.stop()
    if down_for:
        # the scenario, not a wait for a condition: the node stays down this long
        time.sleep(down_for)

    node = broker_factory(port=port, data_dir=data_dir)
    # the client notices, reconnects and reattaches without being asked to
    assert wait_until(lambda: durable_is(node, "ra", attached=True), attach_timeout), durable_of(
        node, "ra"
    )
    with Client(node.endpoint, timeout=10.0) as pub:
        publish_all(pub, "RA.X", numbers(n, n))
        pub.publish("RA.X", b"barrier")
    assert got.wait_payload(b"barrier"), got.payloads()
    assert got.payloads() == [*numbers(2 * n), b"barrier"]
    assert not any(got.redelivered())


def test_connected_subscriber_reattaches_by_itself_after_a_restart(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: WaitUntil,
) -> None:
    # down longer than the client's heartbeat timeout: the client sees the node go
    restart_with_connected_subscriber(
        broker_factory,
        client_factory,
        free_port(),
        tmp_path / "reattach-node",
        wait_until,
        heartbeat_timeout=1.0,
        down_for=2.0,
        attach_timeout=WAIT,
    )


def test_connected_subscriber_reattaches_after_a_quick_restart(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: WaitUntil,
) -> None:
    restart_with_connected_subscriber(
        broker_factory,
        client_factory,
        free_port(),
        tmp_path / "quick-node",
        wait_until,
        heartbeat_timeout=5.0,
        down_for=0.0,
        attach_timeout=5.0,
    )


# -- 8. node SIGKILL (a real `zbroker start` process) ---------------------------------------------


@pytest.mark.slow
def test_confirmed_messages_survive_a_node_sigkill(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    n = 100
    port, data_dir = free_port(), tmp_path / "killed-node"
    start_args = ("start", "--port", str(port), "--data-dir", str(data_dir))
    node = procs.zbroker(*start_args)
    first = wait_ready(endpoint(port), WAIT, node)

    with Client(endpoint(port), timeout=10.0) as client:
        detach_and_sync(client, client.subscribe("SK.>", lambda m: None, durable="sk"))
    with Client(endpoint(port), timeout=10.0) as publisher:
        for p in numbers(n):
            reply = publisher.publish("SK.X", p, persistent=True, confirm=True)
            assert reply["id"][0] == first["broker_id"]
        # confirmed means committed: kill at once, no grace
        node.send_signal(signal.SIGKILL)
    assert node.wait(WAIT) == -signal.SIGKILL

    node = procs.zbroker(*start_args)
    second = wait_ready(endpoint(port), WAIT, node)
    assert second["broker_id"] == first["broker_id"]
    assert second["incarnation"] > first["incarnation"]
    client = Client(endpoint(port), timeout=10.0)
    try:
        assert durable_is(client, "sk", stored=n, attached=False, pattern="SK.>")
        got = Collector()
        client.subscribe("SK.>", got, durable="sk")
        assert client.durable_info["sk"]["stored"] == n
        client.publish("SK.X", b"barrier", persistent=True, confirm=True)
        assert got.wait_payload(b"barrier"), got.payloads()
        assert got.payloads() == [*numbers(n), b"barrier"]
        assert not any(got.redelivered())
        assert wait_until(lambda: durable_is(client, "sk", stored=0, in_flight=0), WAIT)
    finally:
        client.close()
    node.stop()
    assert "Traceback" not in node.stderr_text(), node.stderr_text()


# -- 9. network: interest stays while the subscriber is away ------------------------------------


def test_durable_interest_stays_in_the_network_while_away(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
) -> None:
    n = 100
    port_a = free_port()
    a = broker_factory(broker_id="A", port=port_a)
    b = broker_factory(
        broker_id="B", links=(LinkConfig(name="ba", uri=endpoint(port_a), **FAST_LINK),)
    )
    assert wait_until(
        lambda: (
            any(ln["state"] == "up" for ln in a.status()["links"])
            and any(ln["state"] == "up" for ln in b.status()["links"])
        ),
        WAIT,
    ), (a.status()["links"], b.status()["links"])

    sub_client = client_factory(b.endpoint)
    got = Collector()
    sub = sub_client.subscribe("NET.>", got, durable="net")

    def a_has_route() -> bool:
        rows: list[dict[str, Any]] = a.call(lambda node: node.engine.interest())
        return any(r["pattern"] == "NET.>" and r["origin"] == "B" for r in rows)

    assert wait_until(a_has_route, WAIT)
    publisher = client_factory(a.endpoint)
    publisher.publish("NET.X", b"live")
    assert got.wait_payload(b"live")

    detach_and_sync(sub_client, sub)
    sub_client.close()
    assert wait_until(lambda: durable_is(b, "net", attached=False, stored=0), WAIT)
    # the interest stays: A keeps routing NET.> to B (checked over a few heartbeats)
    assert not wait_until(lambda: not a_has_route(), 1.0)

    publish_all(publisher, "NET.X", numbers(n))
    assert wait_until(lambda: durable_is(b, "net", stored=n), WAIT), durable_of(b, "net")
    assert a_has_route()

    back = client_factory(b.endpoint)
    again = Collector()
    back.subscribe("NET.>", again, durable="net")
    assert back.durable_info["net"]["stored"] == n
    publisher.publish("NET.X", b"barrier")
    assert again.wait_payload(b"barrier"), again.payloads()
    assert again.payloads() == [*numbers(n), b"barrier"]
    assert not any(again.redelivered())
    assert wait_until(lambda: durable_is(b, "net", stored=0, in_flight=0), WAIT)
    assert got.payloads() == [b"live"]
