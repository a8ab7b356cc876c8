"""A durable's sticky route held on a ghost does not keep other nodes off a live path.

Square P-A, P-B, A-W, B-W of in-thread nodes; A's link to W goes through a
:class:`~cutproxy.CutProxy`. W holds a durable subscription and a live one on
``d.>``. When A-W is cut, A keeps the durable's entry on a ghost of the link (routing
rule 6) and advertises it *held*; P then ranks it below B's equally short live entry and
routes through B. Before that flag, P kept its tie-break choice A: the live subscriber
got none of the non-persistent messages (A dropped them, ``link_down``) and the
persistent ones waited in A's queue until the link came back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cutproxy import CutProxy

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig

from .durables import WAIT, endpoint
from .forward_chain import routes_to

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


@pytest.fixture
def proxies() -> Iterator[list[CutProxy]]:
    made: list[CutProxy] = []
    try:
        yield made
    finally:
        for p in made:
            p.close()


def _link(name: str, port: int) -> LinkConfig:
    return LinkConfig(name=name, uri=endpoint(port), **FAST_LINK)


def _via(broker: Broker, link: str) -> bool:
    rows = routes_to(broker, "d.>", "W")
    return len(rows) == 1 and rows[0]["link"] == link


def test_a_cut_link_beside_a_live_path_fails_over_with_nothing_lost(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
    proxies: list[CutProxy],
) -> None:
    ports = {n: free_port() for n in "PABW"}
    proxy = CutProxy(ports["W"])
    proxies.append(proxy)
    w = broker_factory(broker_id="W", port=ports["W"], data_dir=tmp_path / "W")
    a = broker_factory(
        broker_id="A", port=ports["A"], data_dir=tmp_path / "A", links=(_link("aw", proxy.port),)
    )
    broker_factory(
        broker_id="B", port=ports["B"], data_dir=tmp_path / "B", links=(_link("bw", ports["W"]),)
    )
    p = broker_factory(
        broker_id="P",
        port=ports["P"],
        data_dir=tmp_path / "P",
        links=(_link("pa", ports["A"]), _link("pb", ports["B"])),
    )
    durable, live = Collector(), Collector()
    sub = client_factory(w.endpoint)
    sub.subscribe("d.>", durable, durable="dur")
    sub.subscribe("d.>", live)
    # equal paths: the tie-break (neighbour ID) picks A
    assert wait_until(lambda: _via(p, "pa"), WAIT)
    pub = client_factory(p.endpoint)
    pub.publish("d.x", b"warm", persistent=True, confirm=True)
    assert durable.wait_for(1, WAIT) and live.wait_for(1, WAIT)

    proxy.cut()
    assert wait_until(lambda: a.call(lambda n: n.engine.ghosts()) == ["aw"], WAIT)
    assert wait_until(lambda: _via(p, "pb"), WAIT), routes_to(p, "d.>", "W")
    sent = [b"live%d" % i for i in range(20)] + [b"pers%d" % i for i in range(20)]
    for payload in sent[:20]:
        pub.publish("d.x", payload)
    for payload in sent[20:]:
        pub.publish("d.x", payload, persistent=True, confirm=True)
    pub.publish("d.x", b"end", persistent=True, confirm=True)
    assert live.wait_until(lambda ms: ms[-1].payload == b"end", WAIT)
    assert durable.wait_until(lambda ms: ms[-1].payload == b"end", WAIT)
    got: list[Any] = [m.payload for m in live.messages]
    assert got == [b"warm", *sent, b"end"]  # each once, in order
    assert [m.payload for m in durable.messages] == [b"warm", *sent, b"end"]
    dropped = a.status()["counters"]["dropped"]
    assert dropped.get("link_down", 0) == 0

    proxy.mend()
    assert wait_until(lambda: a.call(lambda n: n.engine.ghosts()) == [], WAIT)
    assert wait_until(lambda: _via(p, "pa"), WAIT)
    rows = routes_to(p, "d.>", "W")
    assert "held" not in rows[0]
