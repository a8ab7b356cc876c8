"""Fan-out replication on in-thread nodes: a secondary keeps replicas of a primary's
branch (created, updated, removed with the primary's), serves its subscribers and fetches
from them, says when it is in sync; overlapping branches are refused at start."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.cli_runs import invoke
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig, NodeConfig, load_config
from zbroker.errors import ConfigError

WAIT = 30.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


def wait_for(cond: Callable[[], bool], what: Callable[[], Any]) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def replication(node: Broker) -> dict[str, Any]:
    rep: dict[str, Any] = node.status()["replication"]["fan"]
    return rep


def test_overlapping_branches_are_refused_naming_both() -> None:
    a = LinkConfig(name="east", uri="tcp://127.0.0.1:1", replicate=("PRICE.>",))
    b = LinkConfig(name="west", uri="tcp://127.0.0.1:2", replicate=("NEWS.>", "PRICE.*.EUR"))
    with pytest.raises(
        ConfigError, match=r"'west' replicates 'PRICE\.\*\.EUR'.*'PRICE\.>'.*'east'"
    ):
        NodeConfig(links=(a, b))
    c = LinkConfig(name="one", uri="tcp://127.0.0.1:1", replicate=("A.>", "A.B"))
    with pytest.raises(ConfigError, match="by it already"):
        NodeConfig(links=(c,))
    NodeConfig(links=(a, LinkConfig(name="w", uri="tcp://127.0.0.1:2", replicate=("NEWS.>",))))


def test_replicas_follow_the_primary_and_serve_the_secondary(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    p = broker_factory(broker_id="P")
    cp = client_factory(p.endpoint)
    for i in range(20):
        cp.set(f"PRICE.{i}", i)
    cp.set("OTHER.x", "not replicated")
    link = LinkConfig(name="fan", uri=p.endpoint, replicate=("PRICE.>",), **FAST_LINK)
    s = broker_factory(broker_id="S", links=(link,))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    rep = replication(s)
    assert (rep["primary"], rep["topics"], rep["syncs"], rep["sessions_lost"]) == ("P", 20, 1, 0)
    cs = client_factory(s.endpoint)
    listed = cs.topics("PRICE.>")
    assert len(listed) == 20 and {r["replica_of"] for r in listed} == {"P"}
    asked = p.status()["state"]["queries_answered"]
    inbox = Collector()
    cs.subscribe("PRICE.>", inbox)  # served from the replicas: the primary is not asked
    assert [m.payload for m in inbox.snapshot()] == sorted(range(20), key=lambda i: f"PRICE.{i}")
    assert p.status()["state"]["queries_answered"] == asked
    cp.set("PRICE.new", "fresh")  # created on the primary: created on the secondary
    cp.set("PRICE.3", 33)
    assert cp.remove("PRICE.4") == 1
    assert inbox.wait_for(23)
    live = inbox.snapshot()[20:]
    assert [(m.topic, m.payload, m.removed) for m in live] == [
        ("PRICE.new", "fresh", False),
        ("PRICE.3", 33, False),
        ("PRICE.4", b"", True),
    ]
    wait_for(lambda: replication(s)["topics"] == 20, lambda: replication(s))
    got = {m.topic: m.payload for m in cs.fetch("PRICE.>")}
    assert got == {m.topic: m.payload for m in cp.fetch("PRICE.>")}
    assert "PRICE.4" not in got and got["PRICE.3"] == 33
    assert s.status()["state"]["replicas"] == 20 and s.status()["state"]["owned"] == 0
    assert replication(s)["applied"] == 3 and replication(s)["lag"] is not None
    # `zbroker status` says it too: the replica's row, and the topics held by kind
    out = invoke("status", "--broker", s.endpoint).stdout
    row = r"^fan\s+P\s+PRICE\.>\s+in sync\s+20\s+\d+\.\d ms\s+1\s+0\s+-\s+0$"
    assert re.search(row, out, re.M), out
    assert re.search(r"^stateful topics\s+0 owned, 20 replicas, 1 removed", out, re.M), out
    assert re.search(r"^snapshot queries\s+0 pending", out, re.M), out


def test_the_toml_keys_of_topics_with_state(tmp_path: Path) -> None:
    cfg = tmp_path / "n.toml"
    cfg.write_text(
        '[state]\nmissing_topic_timeout = 0.5\n[[link]]\nname = "fan"\n'
        'uri = "tcp://127.0.0.1:7100"\nreplicate = ["PRICE.>"]\n'
    )
    node = load_config(cfg)
    assert node.missing_topic_timeout == 0.5 and node.links[0].replicate == ("PRICE.>",)
    cfg.write_text("[state]\nmissing_topic_timeout = -1\n")
    with pytest.raises(ConfigError, match=r"state\.missing_topic_timeout"):
        load_config(cfg)


def test_an_update_that_came_round_the_primary_is_applied_to_the_replica(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """Was (an audit): S replicating PRICE.> from P, and linked to X (PRICE.Z's owner)
    too, got X's updates over that shorter link and ignored them (only updates whose
    last hop was the primary counted): its replica kept the old value while `in sync`,
    and served it once X was gone."""
    p = broker_factory(broker_id="P")
    x = broker_factory(broker_id="X", links=(LinkConfig(name="xp", uri=p.endpoint, **FAST_LINK),))
    wait_for(lambda: x.status()["links"][0]["state"] == "up", lambda: x.status()["links"])
    cx = client_factory(x.endpoint)
    cx.set("PRICE.Z", "v1")
    fan = LinkConfig(name="fan", uri=p.endpoint, replicate=("PRICE.>",), **FAST_LINK)
    s = broker_factory(broker_id="S", links=(fan, LinkConfig(name="sx", uri=x.endpoint)))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))

    def direct() -> bool:  # X's way to S's replica interest is the sx link, not P
        return any(r["origin"] == "S" and r["hops"] == 1 for r in cx.routes("PRICE.>"))

    wait_for(direct, lambda: cx.routes())
    cx.set("PRICE.Z", "v2")
    wait_for(lambda: replication(s)["applied"] == 1, lambda: replication(s))
    x.stop()
    values = [(m.topic, m.payload) for m in client_factory(s.endpoint).fetch("PRICE.>")]
    assert values == [("PRICE.Z", "v2")]


def test_a_topic_the_primary_does_not_see_is_not_taken_as_its_replica(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """O reaches S only over its own link (O - S - P): O's updates reach S's replica
    interest, but P never sees O's topics, so they are no replicas of P (its next sync
    would forget them and tell S's subscribers they were lost). S still serves them, by
    asking O."""
    p = broker_factory(broker_id="P")
    client_factory(p.endpoint).set("PRICE.P", "from P")
    fan = LinkConfig(name="fan", uri=p.endpoint, replicate=("PRICE.>",), **FAST_LINK)
    s = broker_factory(broker_id="S", links=(fan,))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    o = broker_factory(broker_id="O", links=(LinkConfig(name="os", uri=s.endpoint, **FAST_LINK),))
    co = client_factory(o.endpoint)
    wait_for(lambda: any(r["origin"] == "S" for r in co.routes("PRICE.>")), co.routes)
    co.set("PRICE.O", "from O")
    inbox = Collector()
    client_factory(s.endpoint).subscribe("PRICE.O", inbox, initial=False)
    co.set("PRICE.O", "again")
    assert inbox.wait_for(1)
    rep = replication(s)
    assert (rep["topics"], rep["applied"]) == (1, 0)
    got = [(m.topic, m.payload) for m in client_factory(s.endpoint).fetch("PRICE.>")]
    assert got == [("PRICE.O", "again"), ("PRICE.P", "from P")]
