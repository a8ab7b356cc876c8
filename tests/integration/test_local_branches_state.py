"""Local branches and stateful topics on real nodes: a query from another node (a fetch, a
remove, a replica's sync) neither sees nor removes a topic of the answering node's local
branch, a client's query of its node's local branch stays on that node, and missing-topic
asks of a local branch never cross a link."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.client.state import MissingTopic
from zbroker.config import LinkConfig

WAIT = 20.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


def _values(client: Client, pattern: str) -> list[tuple[str, Any]]:
    return sorted((m.topic, m.payload) for m in client.fetch(pattern))


def test_another_nodes_fetch_and_remove_skip_a_local_branch(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: Callable[..., bool],
) -> None:
    b = broker_factory(broker_id="B")
    link = LinkConfig(name="ab", uri=b.endpoint, **FAST_LINK)
    a = broker_factory(broker_id="A", local_branches=("CACHE.>",), links=(link,))
    ca, cb = client_factory(a.endpoint), client_factory(b.endpoint)
    assert wait_until(lambda: a.status()["links"][0]["state"] == "up", WAIT)
    ca.set("CACHE.token", "secret")
    ca.set("CACHE.other", "secret too")
    ca.set("PUB.a", "public")
    cb.set("CACHE.b", "B's own")
    # from B: none of A's local values, whatever the pattern
    assert _values(cb, "CACHE.>") == [("CACHE.b", "B's own")]
    assert _values(cb, ">") == [("CACHE.b", "B's own"), ("PUB.a", "public")]
    # A's own client sees them; its query of the branch stays home (B's CACHE.b is not
    # asked for, as B's messages of the branch never come here for that interest)
    assert _values(ca, "CACHE.>") == [("CACHE.other", "secret too"), ("CACHE.token", "secret")]
    # a wider query from A still reaches B, whose values may come in
    assert [t for t, _ in _values(ca, ">")] == ["CACHE.b", "CACHE.other", "CACHE.token", "PUB.a"]
    # removes from B remove none of A's local topics
    assert cb.remove("CACHE.token") == 0
    assert cb.remove("CACHE.>") == 1  # (B's own CACHE.b)
    assert cb.remove(">") == 1  # (A's PUB.a)
    assert _values(ca, ">") == [("CACHE.other", "secret too"), ("CACHE.token", "secret")]
    assert a.status()["state"]["owned"] == 2
    # A's own remove of the branch removes them (and only here)
    assert ca.remove("CACHE.>") == 2
    assert _values(ca, ">") == []


def test_a_replica_sync_takes_no_value_of_the_primarys_local_branch(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: Callable[..., bool],
) -> None:
    p = broker_factory(broker_id="P", local_branches=("PRICE.SECRET.>",))
    cp = client_factory(p.endpoint)
    cp.set("PRICE.SECRET.x", 1)
    cp.set("PRICE.EUR", 2)
    link = LinkConfig(name="fan", uri=p.endpoint, replicate=("PRICE.>",), **FAST_LINK)
    s = broker_factory(broker_id="S", links=(link,))

    def in_sync() -> bool:
        return bool(s.status()["replication"]["fan"]["state"] == "in sync")

    assert wait_until(in_sync, WAIT), s.status()["replication"]
    cp.set("PRICE.SECRET.y", 3)  # (after the sync: as a message, which stays on P)
    cp.set("PRICE.USD", 4)
    assert wait_until(lambda: s.status()["state"]["replicas"] == 2, WAIT), s.status()["state"]
    time.sleep(0.3)
    assert s.status()["state"]["replicas"] == 2
    assert _values(client_factory(s.endpoint), "PRICE.>") == [("PRICE.EUR", 2), ("PRICE.USD", 4)]


class _Handler:
    def __init__(self) -> None:
        self.notices: list[MissingTopic] = []

    def __call__(self, notice: MissingTopic) -> str:
        self.notices.append(notice)
        return "proceed"


def test_missing_topic_asks_of_a_local_branch_stay_home(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: Callable[..., bool],
) -> None:
    # S replicates PRICE.> from P and keeps PRICE.LOCAL.> local; P keeps PRICE.MINE.> local
    p = broker_factory(broker_id="P", local_branches=("PRICE.MINE.>",))
    link = LinkConfig(name="fan", uri=p.endpoint, replicate=("PRICE.>",), **FAST_LINK)
    s = broker_factory(broker_id="S", links=(link,), local_branches=("PRICE.LOCAL.>",))
    at_p = _Handler()
    cp = client_factory(p.endpoint)
    cp.on_missing_topic("PRICE.>", at_p)
    cp.set("PRICE.MINE.x", 1)  # (a topic P's ask answer must not give away)

    def in_sync() -> bool:
        return bool(s.status()["replication"]["fan"]["state"] == "in sync")

    assert wait_until(in_sync, WAIT), s.status()["replication"]
    cs = client_factory(s.endpoint)
    assert cs.fetch("PRICE.LOCAL.x") == []  # S's own branch: P's handler is not asked
    assert cs.fetch("PRICE.MINE.>") == []  # P's local branch: P answers "none"
    assert at_p.notices == []
    assert s.status()["state"]["missing"]["unhandled"] == 2
    assert cs.fetch("PRICE.NEW") == []  # any other topic: P's handler is asked
    assert [(n.pattern, n.node) for n in at_p.notices] == [("PRICE.NEW", "S")]
