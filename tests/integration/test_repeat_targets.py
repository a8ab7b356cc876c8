"""A repeat of a persistent message goes on for the targets no earlier copy took from a
node. Under faults the routes change under copies in flight, and two copies of one
message can meet at a node with different targets: X gets P's message from M1 for T1 and
then from M2 for T2. Dropping the second copy as a repeat lost it for T2 (the fault mesh
of benchmarks/fault_mesh.py lost confirmed messages so); X must send it on to T2 alone,
with no second delivery to X's own durable and nothing more to T1.

M1 and M2 are raw link peers (tests/integration/test_seen_restart.py), so the copies are
exact: the same ``(origin, incarnation, pseq)``, only the targets differ."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.node_configs import FAST_LINK
from zbroker import Broker, Client, wire
from zbroker.config import LinkConfig

from .durables import WAIT, endpoint
from .test_seen_restart import Middle

BrokerFactory = Callable[..., Broker]


def _copy(
    m: Middle, pseq: int, targets: list[str], producer: list[int] | None = None, origin: str = "P"
) -> None:
    """``origin``'s persistent message ``pseq`` for ``targets``, by ``m``; waits for X's
    PACK."""
    m.lseq += 1
    entry: list[Any] = [m.lseq, "T.x", str(pseq).encode(), 0, None, origin, 1, pseq, 1.0]
    entry += [[origin, m.peer], targets, pseq]
    if producer is not None:
        entry.append(producer)
    m.sock.send(wire.encode_link(wire.PMSGS, 1, 1, [entry]))
    assert m.expect(wire.PACK, m.lseq) is not None, "X did not acknowledge"


def _stored(b: Broker) -> int:
    (q,) = [q for q in b.status()["durables"] if q["name"] == f"d-{b.broker_id}"]
    return int(q["stored"])


def _forward(b: Broker) -> dict[str, Any]:
    out: dict[str, Any] = b.status()["forward"]
    return out


def _network(
    broker_factory: BrokerFactory, free_port: Callable[[], int], tmp_path: Path
) -> dict[str, Broker]:
    """X with a detached durable ``d-X`` on T.>, and T1 and T2 linked to it with one each;
    returns once X routes T.> to both."""
    port = free_port()
    nodes = {"X": broker_factory(broker_id="X", port=port, data_dir=tmp_path / "X")}
    for name in ("T1", "T2"):
        link = LinkConfig(name=name.lower(), uri=endpoint(port), **FAST_LINK)
        nodes[name] = broker_factory(broker_id=name, data_dir=tmp_path / name, links=(link,))
    for name, b in nodes.items():  # (a durable's name is one in the network)
        with Client(b.endpoint, timeout=10.0) as c:
            c.subscribe("T.>", lambda m: None, durable=f"d-{name}").unsubscribe()  # detached

    def routed() -> bool:
        rows = nodes["X"].call(lambda node: node.engine.interest())
        return {r["origin"] for r in rows if r["pattern"] == "T.>"} >= {"T1", "T2"}

    deadline = time.monotonic() + WAIT
    while not routed():
        assert time.monotonic() < deadline, "T1's and T2's interest did not reach X"
        time.sleep(0.05)
    return nodes


Net = tuple[dict[str, Broker], Middle, Middle]


@pytest.fixture
def net(
    broker_factory: BrokerFactory, free_port: Callable[[], int], tmp_path: Path
) -> Iterator[Net]:
    """The nodes of :func:`_network` and the raw middles M1 and M2 linked to X."""
    nodes = _network(broker_factory, free_port, tmp_path)
    m1, m2 = Middle(nodes["X"], "M1"), Middle(nodes["X"], "M2")
    try:
        yield nodes, m1, m2
    finally:
        m1.close()
        m2.close()


def _settle(nodes: dict[str, Broker], want: dict[str, int]) -> dict[str, int]:
    deadline = time.monotonic() + WAIT
    while True:
        got = {name: _stored(b) for name, b in nodes.items()}
        if got == want or time.monotonic() > deadline:
            time.sleep(0.5)  # (a copy too many would come now)
            return {name: _stored(b) for name, b in nodes.items()}
        time.sleep(0.05)


def test_a_repeat_goes_on_for_the_targets_its_first_copy_did_not_have(net: Net) -> None:
    nodes, m1, m2 = net
    _copy(m1, 1, ["X", "T1"])
    _copy(m2, 1, ["X", "T1", "T2"])  # the same message: T2 is new here
    _copy(m1, 1, ["T2"])  # and again: nothing new
    _copy(m2, 2, ["T2"])
    _copy(m1, 2, ["T1"])  # a later message, the other way round
    assert _settle(nodes, {"X": 2, "T1": 2, "T2": 2}) == {"X": 2, "T1": 2, "T2": 2}
    fwd = _forward(nodes["X"])
    assert (fwd["repeats_routed"], fwd["persistent_duplicates"]) == (2, 3)
    assert sum(_forward(nodes[t])["persistent_duplicates"] for t in ("T1", "T2")) == 0


def test_a_publish_sent_again_through_another_node_goes_on_for_its_new_targets(
    net: Net,
) -> None:
    # the client's retry has another origin (Q, the second node it used) but the same
    # producer key: X took the first for T1, the retry names T2 as well
    nodes, m1, m2 = net
    _copy(m1, 1, ["T1"], producer=[77, 1])
    _copy(m2, 1, ["T1", "T2"], producer=[77, 1], origin="Q")
    assert _settle(nodes, {"X": 1, "T1": 1, "T2": 1}) == {"X": 1, "T1": 1, "T2": 1}
    assert _forward(nodes["X"])["repeats_routed"] == 1
