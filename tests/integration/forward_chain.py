"""The chain A - B - C of in-thread nodes that the store-and-forward tests run on (B
dials A, C dials B, short link timers), with the durable subscription ``saf`` on C that
makes A's routes toward it sticky, and what the tests read of the nodes: links up, routes,
messages held in link queues, the durable's stored messages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig

from .durables import WAIT, endpoint

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def chain(
    broker_factory: BrokerFactory, free_port: Callable[[], int], tmp_path: Path
) -> dict[str, Any]:
    ports = {n: free_port() for n in "ABC"}
    a = broker_factory(broker_id="A", port=ports["A"], data_dir=tmp_path / "A")
    b = start(broker_factory, "B", ports, tmp_path)
    c = start(broker_factory, "C", ports, tmp_path)
    return {"A": a, "B": b, "C": c, "ports": ports}


def start(broker_factory: BrokerFactory, name: str, ports: dict[str, int], tmp: Path) -> Broker:
    """Start (or start again: same ID, port and data directory) node B or C."""
    links = b_links(ports) if name == "B" else c_links(ports)
    return broker_factory(broker_id=name, port=ports[name], data_dir=tmp / name, links=links)


def b_links(ports: dict[str, int]) -> tuple[LinkConfig, ...]:
    return (LinkConfig(name="ba", uri=endpoint(ports["A"]), **FAST_LINK),)


def c_links(ports: dict[str, int]) -> tuple[LinkConfig, ...]:
    return (LinkConfig(name="cb", uri=endpoint(ports["B"]), **FAST_LINK),)


def links_up(broker: Broker, n: int) -> bool:
    up: int = sum(ln["state"] == "up" for ln in broker.status()["links"])
    return up == n


def routes_to(broker: Broker, pattern: str, origin: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = broker.call(lambda node: node.engine.interest())
    return [r for r in rows if r["pattern"] == pattern and r["origin"] == origin]


def held(broker: Broker) -> int:
    return int(broker.status()["forward"]["held"])


def durable_payloads(broker: Broker, name: str) -> list[bytes]:
    """Every message stored in a durable queue, in queue order (read from the store)."""

    def read(node: Any) -> list[bytes]:
        node.store.commit()
        rows = node.store.pending_durable(name, 0, 1_000_000)
        return [r[2] for r in rows]

    result: list[bytes] = broker.call(read)
    return result


def setup_durable(
    nodes: dict[str, Any], client_factory: ClientFactory, wait_until: WaitUntil
) -> Client:
    a, b, c = nodes["A"], nodes["B"], nodes["C"]
    assert wait_until(lambda: links_up(a, 1) and links_up(b, 2) and links_up(c, 1), WAIT)
    sub = client_factory(c.endpoint)
    s = sub.subscribe("SAF.>", Collector(), durable="saf")
    s.unsubscribe()  # detached: everything stays in C's queue, where the test reads it
    assert wait_until(lambda: bool(routes_to(a, "SAF.>", "C")), WAIT)
    assert routes_to(a, "SAF.>", "C")[0].get("sticky") is True
    return sub


def c_away(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
    **b_options: Any,
) -> dict[str, Any]:
    """The chain with B's ``b_options`` and C's durable ``saf`` set up, then C stopped
    (B's link to A still up): what A publishes waits in B's queue toward C."""
    ports = {n: free_port() for n in "ABC"}
    a = broker_factory(broker_id="A", port=ports["A"], data_dir=tmp_path / "A")
    b = broker_factory(
        broker_id="B", port=ports["B"], data_dir=tmp_path / "B", links=b_links(ports), **b_options
    )
    c = start(broker_factory, "C", ports, tmp_path)
    nodes: dict[str, Any] = {"A": a, "B": b, "C": c, "ports": ports}
    setup_durable(nodes, client_factory, wait_until)
    c.stop()
    assert wait_until(lambda: links_up(b, 1), WAIT)
    return nodes


def publish(client: Client, payloads: list[bytes]) -> None:
    for p in payloads:
        client.publish("SAF.X", p, persistent=True, confirm=True)
