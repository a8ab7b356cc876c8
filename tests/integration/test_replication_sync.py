"""A replica's sync on in-thread nodes, by version: what changed while its answer was on
the way (a removal, a new topic), a value the secondary owns itself, a node behind the
primary whose part waits for a route it never gets (answered in time all the same), and
an answer cut at the secondary's own deadline that must not be taken as complete."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig
from zbroker.features.state import feature as state_feature
from zbroker.features.state.queries import Query
from zbroker.node import Node

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


def counts(node: Broker) -> tuple[int, int, int]:
    st = node.status()["state"]
    return st["owned"], st["replicas"], st["tombstones"]


def fan(primary: Broker) -> LinkConfig:
    return LinkConfig(name="fan", uri=primary.endpoint, replicate=("PRICE.>",), **FAST_LINK)


def values(client: Client, pattern: str = "PRICE.>") -> list[tuple[str, Any, str]]:
    return [(m.topic, m.payload, m.origin) for m in client.fetch(pattern)]


def answered(node: Broker) -> bool:
    """Has the secondary applied a sync answer (complete or cut)?"""
    rep = replication(node)
    return bool(rep["syncs"] or rep.get("retries"))


class HeldAnswer:
    """Holds the primary's answer to the secondary's first sync query (its part read) until
    released: what happens meanwhile reaches the secondary before the answer."""

    def __init__(self, primary: Broker, secondary_id: str) -> None:
        self.primary = primary
        self.held: Query | None = None
        self.holding = True
        primary.call(lambda node: self._install(node, secondary_id))

    def _install(self, node: Node, secondary_id: str) -> None:
        feat: Any = next(f for f in node.features if f.name == "state")
        self._done = feat._maybe_done

        def maybe_done(q: Query) -> None:
            ours = q.origin == secondary_id and q.reply_to is not None and q.kind == "snapshot"
            if self.holding and ours and q.done and self.held in (None, q):
                self.held = q
                return
            self._done(q)

        feat._maybe_done = maybe_done

    def release(self) -> None:
        def go(node: Node) -> None:
            self.holding = False
            assert self.held is not None
            self._done(self.held)

        self.primary.call(go)


def test_what_changed_while_the_sync_answer_was_held_is_not_undone(
    broker_factory: BrokerFactory, client_factory: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_feature, "QUERY_TIMEOUT", 20.0)  # (the answer is held)
    p = broker_factory(broker_id="P")
    cp = client_factory(p.endpoint)
    cp.set("PRICE.A", "a-value")
    hold = HeldAnswer(p, "S")
    s = broker_factory(broker_id="S", links=(fan(p),))
    wait_for(lambda: hold.held is not None, lambda: p.status()["state"])
    assert replication(s)["state"] == "syncing"
    # after the primary read its part: a removal, and a new topic, reach S live first
    assert cp.remove("PRICE.A") == 1
    cp.set("PRICE.B", "b-value")
    wait_for(lambda: counts(s) == (0, 1, 1), lambda: counts(s))
    hold.release()  # the answer still holds PRICE.A, and lacks PRICE.B
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    cs = client_factory(s.endpoint)
    assert values(cs) == [("PRICE.B", "b-value", "P")]  # (in sync: from the replicas)
    assert values(cp) == [("PRICE.B", "b-value", "P")]  # (P asks S too)
    got = Collector()
    cs.subscribe("PRICE.>", got)
    assert [(m.topic, m.payload) for m in got.snapshot()] == [("PRICE.B", "b-value")]
    assert counts(s) == (0, 1, 1)
    rep = replication(s)
    assert (rep["syncs"], rep["retries"], rep["topics"]) == (1, 0, 1)


def test_a_sync_keeps_the_secondarys_own_newer_value(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    p = broker_factory(broker_id="P")
    cp = client_factory(p.endpoint)
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S")  # first without the link
    cs = client_factory(s.endpoint)
    cs.set("PRICE.OLD", "secondary-old")  # older than the primary's
    cp.set("PRICE.NEW", "primary-old")
    cp.set("PRICE.OLD", "primary-new")
    cs.set("PRICE.NEW", "secondary-new")  # newer than the primary's
    cs.close()
    s.stop()
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    assert counts(s) == (1, 1, 0) and replication(s)["topics"] == 1
    expected = [("PRICE.NEW", "secondary-new", "S"), ("PRICE.OLD", "primary-new", "P")]
    cs = client_factory(s.endpoint)
    assert values(cs) == expected and values(cp) == expected
    s.stop()  # on disk too: S alone still has its own value
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S")
    assert values(client_factory(s.endpoint)) == expected
    assert counts(s) == (1, 1, 0)


def test_a_sync_through_a_node_that_never_routes_back_completes(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """X (ttl=1) never routes toward S, so its part of S's sync waits for that route
    until its deadline: a deadline shorter than P's (the query carries what is left of
    S's), so its answer comes in time and S's sync is complete at its first answer.
    PRICE.A is removed while that answer is on its way (P read it before)."""
    p = broker_factory(broker_id="P")
    x_link = LinkConfig(name="xp", uri=p.endpoint, ttl=1, **FAST_LINK)
    x = broker_factory(broker_id="X", links=(x_link,))
    wait_for(lambda: x.status()["links"][0]["state"] == "up", lambda: x.status()["links"])
    cp = client_factory(p.endpoint)
    cp.set("PRICE.A", "a-value")
    client_factory(x.endpoint).set("PRICE.Z", "z-value")
    s = broker_factory(broker_id="S", links=(fan(p),))
    wait_for(lambda: p.status()["state"]["queries_pending"] == 1, lambda: p.status()["state"])
    assert p.status()["state"]["route_waits"] == 0  # (P's part was read at once)
    assert cp.remove("PRICE.A") == 1
    wait_for(lambda: answered(s), lambda: replication(s))
    rep = replication(s)
    assert (rep["state"], rep["syncs"], rep["retries"], rep["topics"]) == ("in sync", 1, 0, 1)
    assert counts(s) == (0, 1, 1)  # PRICE.Z's replica; PRICE.A stays removed
    assert x.status()["state"]["route_timeouts"] == 1  # (X read its part without the route)
    assert p.status()["state"]["queries_expired"] == 0  # (P had every answer in time)
    cs = client_factory(s.endpoint)
    assert values(cs) == [("PRICE.Z", "z-value", "X")]  # (in sync: from the replicas)
    assert values(cp) == [("PRICE.Z", "z-value", "X")]


def silence(node: Broker) -> Callable[[], None]:
    """``node`` takes the state queries its links bring and never answers them (a node
    that hangs, its links alive). Returns what makes it answer again."""
    feat: Any = None
    opened: Any = None

    def install(n: Node) -> None:
        nonlocal feat, opened
        feat = next(f for f in n.features if f.name == "state")
        opened = feat._open

        def swallow(q: Query, came_by: Any, *args: Any, **kw: Any) -> None:
            if came_by is None:  # (its own queries go on as ever)
                opened(q, came_by, *args, **kw)

        feat._open = swallow

    def restore(n: Node) -> None:
        feat._open = opened

    node.call(install)
    return lambda: node.call(restore)


def test_a_sync_cut_at_the_secondarys_deadline_removes_nothing(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    tmp_path: Path,
) -> None:
    """S, restarted, syncs again while P does not answer at all: S's own deadline cuts the
    sync with nothing in it, which must not remove S's replica (nor call it partial: the
    primary's part is missing too)."""
    p = broker_factory(broker_id="P")
    client_factory(p.endpoint).set("PRICE.A", "a-value")
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    assert counts(s) == (0, 1, 0)
    s.stop()
    silence(p)
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: answered(s), lambda: replication(s))
    assert counts(s) == (0, 1, 0)  # the replica of PRICE.A stays, not removed
    rep = replication(s)
    assert (rep["state"], rep["syncs"], rep["retries"], rep["topics"]) == ("syncing", 0, 1, 1)
