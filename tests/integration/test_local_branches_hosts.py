"""Local branches and hosted branches on real nodes: a node whose local branch covers a
branch another node hosts relays none of its host's adverts (so no publication is routed
to the host through a node that keeps them), and a node may not both host and keep local
an overlapping branch."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client, Message
from zbroker.config import LinkConfig, NodeConfig
from zbroker.errors import ConfigError
from zbroker.routing.hosts import host_key

WAIT = 20.0
N = 10


def _link(name: str, node: Broker) -> LinkConfig:
    return LinkConfig(name=name, uri=node.endpoint, **FAST_LINK)


def news(msgs: list[Message]) -> int:
    return sum(m.topic == "ORDERS.NEW" for m in msgs)


def _routes(client: Client) -> dict[tuple[str, str], str | None]:
    return {(r["pattern"], r["origin"]): r["link"] for r in client.routes()}


def test_a_local_branch_covering_a_hosted_branch_relays_no_host_advert(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    # the square P - B - H - Z - P: H hosts ORDERS.>, B keeps it local. Before, B relayed
    # H's host advert, P's way to H went through B (the lower neighbour ID of a tie) and B
    # dropped every publication; now P's way to H is through Z
    h = broker_factory(broker_id="H", host_branches=("ORDERS.>",))
    b = broker_factory(broker_id="B", local_branches=("ORDERS.>",), links=(_link("bh", h),))
    z = broker_factory(broker_id="Z", links=(_link("zh", h),))
    p = broker_factory(broker_id="P", links=(_link("pb", b), _link("pz", z)))
    cp, ch, cz, cb = (client_factory(n.endpoint) for n in (p, h, z, b))
    at_h, at_z, at_b = Collector(), Collector(), Collector()
    for c, inbox in ((ch, at_h), (cz, at_z), (cb, at_b)):
        c.subscribe("ORDERS.>", inbox)
    ch.subscribe("END", at_h)
    cz.subscribe("END", at_z)
    key = host_key("ORDERS.>")
    assert wait_until(lambda: _routes(cp).get((key, "H")) == "pz", WAIT), cp.routes()
    assert wait_until(lambda: {("END", "H"), ("END", "Z")} <= set(_routes(cp)), WAIT)
    assert (key, "H") in _routes(cb)  # B knows the host, and keeps it to itself

    def settled() -> bool:  # (the hosts' own adverts settle after P's route: a probe each)
        cp.publish("ORDERS.PROBE", b"")
        return at_h.wait_topic("ORDERS.PROBE", 0.2) and at_z.wait_topic("ORDERS.PROBE", 0.2)

    assert wait_until(settled, WAIT)
    dropped = {n.broker_id: n.status()["counters"]["dropped"] for n in (p, b, h, z)}
    for i in range(N):
        cp.publish("ORDERS.NEW", i)
    cp.publish("END", b"")
    # (END is no barrier: it goes P - B - H, the hosted ones P - Z - H, and may overtake)
    for inbox in (at_h, at_z):
        assert inbox.wait_until(lambda ms: news(ms) >= N, WAIT), inbox.snapshot()
    assert at_h.wait_topic("END", WAIT) and at_z.wait_topic("END", WAIT)
    assert [m.payload for m in at_h.snapshot() if m.topic == "ORDERS.NEW"] == list(range(N))
    assert [m.payload for m in at_z.snapshot() if m.topic == "ORDERS.NEW"] == list(range(N))
    assert len(at_b) == 0  # the local branch: nothing of it comes from elsewhere either
    for node in (p, b, h, z):  # (none of the numbered ones dropped anywhere)
        assert node.status()["counters"]["dropped"] == dropped[node.broker_id], node.broker_id


@pytest.mark.parametrize(
    ("host", "local"),
    [("ORDERS.>", "ORDERS.>"), ("ORDERS.>", "ORDERS.EU.>"), ("ORDERS.EU.*", ">")],
)
def test_a_node_may_not_host_and_keep_local_an_overlapping_branch(host: str, local: str) -> None:
    with pytest.raises(ConfigError) as err:
        NodeConfig(host_branches=(host,), local_branches=(local,))
    assert repr(host) in str(err.value) and repr(local) in str(err.value)


def test_a_node_may_host_a_branch_beside_a_separate_local_one() -> None:
    cfg = NodeConfig(host_branches=("ORDERS.>",), local_branches=("CACHE.>", "ORDERSX.>"))
    assert cfg.host_branches == ("ORDERS.>",)
