"""Tombstone expiry on in-thread nodes (``[state] tombstone_ttl``): tombstones older than
the ttl leave memory, the SQLite file, snapshots and fetches, younger ones stay, both
during a run and after a restart (a tombstone keeps the time it was written), a backlog
expires in batches; and while its tombstones live, a removed topic whose older value a
node that missed the removal still holds comes back neither in a fetch nor in a replica's
sync (once they expired it does: the ttl is the longest absence a node may have)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig
from zbroker.config import node as config_node
from zbroker.wire import frames

from .durables import endpoint
from .test_replication_sync import wait_for

WAIT = 30.0
DAY = 86_400.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


def state(node: Broker) -> dict[str, Any]:
    st: dict[str, Any] = node.status()["state"]
    return st


def counts(node: Broker) -> tuple[int, int, int, int]:
    """(owned, replicas, tombstones, tombstones expired)."""
    st = state(node)
    return st["owned"], st["replicas"], st["tombstones"], st["tombstones_expired"]


def churn(client: Client, prefix: str, n: int) -> None:
    """``n`` topics named ``prefix{i}``, each set once and removed (session IDs...)."""
    for i in range(n):
        client.set(f"{prefix}{i}", i)
        assert client.remove(f"{prefix}{i}") == 1


def snapshot(client: Client, pattern: str) -> tuple[list[str], list[str]]:
    """A snapshot's answer: (topics of its values, topics of its removals), sorted."""
    ans = client.request(frames.STATE_FETCH, {"pattern": pattern, "snapshot": True})
    return sorted(v[0] for v in ans["values"]), sorted(g[0] for g in ans["gone"])


def stored(data_dir: Path) -> tuple[int, int]:
    """(values, tombstones) in the node's SQLite file."""
    with sqlite3.connect(data_dir / "store.sqlite3") as db:
        (values,), (tombstones,) = (
            db.execute("SELECT count(*) FROM state_topics WHERE removed = ?", (r,)).fetchone()
            for r in (0, 1)
        )
    return values, tombstones


def age(data_dir: Path, like: str, seconds: float) -> int:
    """Make the tombstones of topics ``LIKE like`` older by ``seconds`` (node stopped)."""
    with sqlite3.connect(data_dir / "store.sqlite3") as db:
        cur = db.execute(
            "UPDATE state_topics SET updated = updated - ? WHERE removed = 1 AND topic LIKE ?",
            (seconds, like),
        )
    return cur.rowcount


def test_tombstones_past_the_ttl_go_and_younger_ones_stay(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config_node, "TOMBSTONE_TTL_MIN", 0.5)  # (seconds, not minutes)
    ttl, data = 5.0, tmp_path / "A"
    a = broker_factory(broker_id="A", data_dir=data, tombstone_ttl=ttl)
    c = client_factory(a.endpoint)
    for i in range(10):
        c.set(f"SESSION.live{i}", i)
    churn(c, "SESSION.old", 50)
    time.sleep(4.0)  # (the old ones expire 4 s before the young ones)
    young = time.time()
    churn(c, "SESSION.young", 30)
    assert counts(a) == (10, 0, 80, 0)
    wait_for(lambda: counts(a)[2] < 80, lambda: counts(a))
    seen = counts(a), stored(data), snapshot(c, "SESSION.>"), c.fetch("SESSION.>")
    assert time.time() < young + ttl, "too slow to see the young tombstones alone"
    live_topics = sorted(f"SESSION.live{i}" for i in range(10))
    young_topics = sorted(f"SESSION.young{i}" for i in range(30))
    assert seen[:3] == ((10, 0, 30, 50), (10, 30), (live_topics, young_topics))
    assert sorted(m.topic for m in seen[3]) == live_topics
    wait_for(lambda: counts(a)[2] == 0, lambda: counts(a))  # the young ones' turn
    assert counts(a) == (10, 0, 0, 80)
    assert stored(data) == (10, 0)
    assert snapshot(c, "SESSION.>") == (live_topics, [])
    c.set("SESSION.old3", "again")  # a name used before is a new topic, as any
    assert [(m.topic, m.payload) for m in c.fetch("SESSION.old3")] == [("SESSION.old3", "again")]


def test_a_restart_keeps_each_tombstones_time_and_a_backlog_expires(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    """The default ttl (a day): tombstones written "a day and a minute ago" (their time in
    the file moved back while the node was stopped) expire at the next start, 2300 of
    them in batches; those written now stay, also over one more restart."""
    data = tmp_path / "A"
    a = broker_factory(broker_id="A", data_dir=data)
    c = client_factory(a.endpoint)
    for i in range(5):
        c.set(f"SESSION.live{i}", i)
    churn(c, "SESSION.old", 2300)
    churn(c, "SESSION.young", 200)
    assert counts(a) == (5, 0, 2500, 0)
    c.close()
    a.stop()
    assert stored(data) == (5, 2500)
    assert age(data, "SESSION.old%", DAY + 60) == 2300
    assert age(data, "SESSION.young%", DAY - 60) == 200  # (a minute to go)
    a = broker_factory(broker_id="A", data_dir=data)
    wait_for(lambda: counts(a)[2] == 200, lambda: counts(a))
    assert counts(a) == (5, 0, 200, 2300)
    assert stored(data) == (5, 200)
    c = client_factory(a.endpoint)
    live = sorted(f"SESSION.live{i}" for i in range(5))
    assert snapshot(c, "SESSION.>") == (live, sorted(f"SESSION.young{i}" for i in range(200)))
    assert sorted(m.topic for m in c.fetch("SESSION.>")) == live
    c.close()
    a.stop()
    a = broker_factory(broker_id="A", data_dir=data)
    time.sleep(1.5)  # (a tick or two: an idle node without links ticks every second)
    assert counts(a) == (5, 0, 200, 0) and stored(data) == (5, 200)


def fan(port: int) -> LinkConfig:
    return LinkConfig(name="fan", uri=endpoint(port), replicate=("SESSION.>",), **FAST_LINK)


def replica_state(node: Broker) -> str:
    rep: dict[str, Any] = node.status()["replication"]["fan"]
    return str(rep["state"])


def fetched(node: Broker, client_factory: ClientFactory) -> list[tuple[str, Any, str]]:
    client = client_factory(node.endpoint)
    try:
        return [(m.topic, m.payload, m.origin) for m in client.fetch("SESSION.>")]
    finally:
        client.close()


def test_a_removed_value_stays_removed_while_its_tombstones_live(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    """X holds an older value of SESSION.t and is away while P sets and removes it (S
    replicates P): back, X's value is hidden by the tombstones of P and S from every
    fetch and from S's sync; once they expired, it is the topic's value again."""
    port = free_port()
    x = broker_factory(broker_id="X", data_dir=tmp_path / "X")
    client_factory(x.endpoint).set("SESSION.t", "x-old")
    x.stop()
    p = broker_factory(broker_id="P", port=port, data_dir=tmp_path / "P")
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(port),))
    wait_for(lambda: replica_state(s) == "in sync", lambda: replica_state(s))
    cp = client_factory(p.endpoint)
    cp.set("SESSION.t", "p-new")
    wait_for(lambda: counts(s)[1] == 1, lambda: counts(s))
    assert cp.remove("SESSION.t") == 1  # (X is away: its copy stays)
    wait_for(lambda: counts(s)[2] == 1, lambda: counts(s))
    to_p = LinkConfig(name="xp", uri=endpoint(port), **FAST_LINK)
    x = broker_factory(broker_id="X", data_dir=tmp_path / "X", links=(to_p,))
    wait_for(lambda: len(p.status()["links"]) == 2, lambda: p.status()["links"])
    wait_for(lambda: all(ln["state"] == "up" for ln in p.status()["links"]), lambda: p.status())
    for node in (x, p, s):
        assert fetched(node, client_factory) == [], node.broker_id
    s.stop()  # a new session: the sync answer has X's value and P's removal
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(port),))
    wait_for(lambda: replica_state(s) == "in sync", lambda: replica_state(s))
    assert counts(s) == (0, 0, 1, 0) and counts(p) == (0, 0, 1, 0) and counts(x)[:3] == (1, 0, 0)
    assert fetched(s, client_factory) == [] and fetched(x, client_factory) == []
    # a day later: the tombstones expire, and X's value, not removed there, is back
    for node in (s, p):
        node.stop()
    assert age(tmp_path / "P", "%", DAY + 60) == 1 and age(tmp_path / "S", "%", DAY + 60) == 1
    p = broker_factory(broker_id="P", port=port, data_dir=tmp_path / "P")
    wait_for(lambda: len(p.status()["links"]) == 1, lambda: p.status()["links"])  # (X's)
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(port),))
    wait_for(lambda: replica_state(s) == "in sync", lambda: replica_state(s))
    assert counts(p) == (0, 0, 0, 1) and counts(s) == (0, 1, 0, 1)
    for node in (x, p, s):
        assert fetched(node, client_factory) == [("SESSION.t", "x-old", "X")], node.broker_id
