"""Topics with state on in-thread nodes: set/fetch/remove/topics, the snapshot of a
subscription joined with live updates under a concurrent writer (one node, and a late
joiner two hops from the owner), removal across the network, two owners of one topic."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client, Message
from zbroker.config import LinkConfig
from zbroker.errors import RequestError

from .durables import endpoint

WAIT = 30.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


def chain(broker_factory: BrokerFactory, free_port: Callable[[], int], tmp: Path) -> list[Broker]:
    """A - B - C (B dials A, C dials B)."""
    ports = [free_port() for _ in range(3)]
    a = broker_factory(broker_id="A", port=ports[0], data_dir=tmp / "A")
    b = broker_factory(
        broker_id="B",
        port=ports[1],
        data_dir=tmp / "B",
        links=(LinkConfig(name="ba", uri=endpoint(ports[0]), **FAST_LINK),),
    )
    c = broker_factory(
        broker_id="C",
        port=ports[2],
        data_dir=tmp / "C",
        links=(LinkConfig(name="cb", uri=endpoint(ports[1]), **FAST_LINK),),
    )
    for node, n in ((a, 1), (b, 2), (c, 1)):
        deadline = time.monotonic() + WAIT
        while sum(ln["state"] == "up" for ln in node.status()["links"]) != n:
            assert time.monotonic() < deadline, node.status()["links"]
            time.sleep(0.05)
    return [a, b, c]


def test_set_fetch_remove_and_topics_on_one_node(
    broker: Broker, client_factory: ClientFactory
) -> None:
    c = client_factory(broker.endpoint)
    v1 = c.set("PRICE.A", {"bid": 1}, headers={"src": "x"})
    v2 = c.set("PRICE.A", {"bid": 2})
    assert v2 > v1
    c.set("PRICE.B", b"raw")
    got = c.fetch("PRICE.>")
    assert [(m.topic, m.payload, m.initial) for m in got] == [
        ("PRICE.A", {"bid": 2}, True),
        ("PRICE.B", b"raw", True),
    ]
    assert got[0].version == v2 and got[0].origin == broker.broker_id
    rows = c.topics()
    assert [(r["topic"], r["size"], r["owner"], r["replica_of"]) for r in rows] == [
        ("PRICE.A", 6, broker.broker_id, None),  # msgpack {"bid": 2}
        ("PRICE.B", 3, broker.broker_id, None),
    ]
    sub = Collector()
    c.subscribe("PRICE.>", sub, initial=False)
    assert c.remove("PRICE.A") == 1
    assert c.remove("PRICE.A") == 0  # removed already
    assert sub.wait_for(1)
    (msg,) = sub.snapshot()
    assert msg.topic == "PRICE.A" and msg.removed and msg.version is not None
    assert msg.version > v2 and not msg.initial
    assert [m.topic for m in c.fetch(">")] == ["PRICE.B"]
    st = broker.status()["state"]
    assert (st["owned"], st["tombstones"], st["sets"], st["removals"]) == (1, 1, 3, 1)


def test_bad_sets_are_refused_and_counted(broker: Broker, client_factory: ClientFactory) -> None:
    c = client_factory(broker.endpoint)
    with pytest.raises(RequestError, match="node's"):
        c.set("PRICE.A", 1, headers={"zb.version": 5})
    with pytest.raises(RequestError):
        c.request(50, {"topic": "BAD..TOPIC", "payload": b"", "fmt": 0})
    with pytest.raises(RequestError):
        c.request(52, {"pattern": 7})
    assert c.fetch(">") == []
    dropped = broker.status()["counters"]["dropped"]
    assert sum(n for k, n in dropped.items() if k.startswith("bad_input")) >= 2


def test_values_survive_a_restart(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    b = broker_factory(data_dir=tmp_path / "n")
    with Client(b.endpoint) as c:
        version = c.set("CFG.mode", "fast")
        c.set("CFG.gone", 1)
        c.remove("CFG.gone")
    b.stop()
    b = broker_factory(data_dir=tmp_path / "n")
    with Client(b.endpoint) as c:
        (msg,) = c.fetch("CFG.>")
        assert (msg.topic, msg.payload, msg.version) == ("CFG.mode", "fast", version)
        assert c.set("CFG.mode", "slow") > version


class Writer(threading.Thread):
    """Sets TOPIC.0..TOPIC.{k-1} round robin with a rising number, recording each write."""

    def __init__(self, ep: str, prefix: str, k: int = 5) -> None:
        super().__init__(daemon=True)
        self.client = Client(ep, timeout=10.0)
        self.prefix, self.k = prefix, k
        self.writes: list[tuple[str, int, int]] = []  # topic, value, version
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            topic = f"{self.prefix}.{i % self.k}"
            self.writes.append((topic, i, self.client.set(topic, i)))
            i += 1

    def finish(self) -> None:
        self.stop.set()
        self.join(WAIT)
        self.client.close()


def check_exact(got: list[Message], writes: list[tuple[str, int, int]]) -> None:
    """Per topic: the snapshot's value, then every later write of that topic, once."""
    initial = [m for m in got if m.initial]
    assert got[: len(initial)] == initial  # every initial value before any live one
    topics = {w[0] for w in writes}
    assert {m.topic for m in initial} <= topics
    for topic in topics:
        mine = [w for w in writes if w[0] == topic]
        seen = [(m.payload, m.version) for m in got if m.topic == topic]
        first = [m for m in initial if m.topic == topic]
        if first:
            start = next(i for i, w in enumerate(mine) if w[2] == first[0].version)
            want = mine[start:]
        else:
            want = mine[next(i for i, w in enumerate(mine) if w[1] == seen[0][0]) :]
            assert want == mine  # nothing set before the subscription: every write seen
        assert seen == [(w[1], w[2]) for w in want], topic


def run_late_joiner(writer_ep: str, sub_client: Client, prefix: str) -> None:
    writer = Writer(writer_ep, prefix)
    writer.start()
    try:
        deadline = time.monotonic() + WAIT
        while len(writer.writes) < 50:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        inbox = Collector()
        sub = sub_client.subscribe(f"{prefix}.>", inbox)
        assert sub.snapshot.is_set()
        n = len(writer.writes)
        while len(writer.writes) < n + 100:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        writer.finish()
    last = {w[0]: w[1] for w in writer.writes}
    assert inbox.wait_until(
        lambda ms: all(any(m.topic == t and m.payload == v for m in ms) for t, v in last.items()),
        WAIT,
    )
    time.sleep(0.3)  # (a duplicate would come now)
    check_exact(inbox.snapshot(), writer.writes)
    assert sum(m.initial for m in inbox.snapshot()) == 5


def test_snapshot_then_live_under_a_concurrent_writer(
    broker: Broker, client_factory: ClientFactory
) -> None:
    run_late_joiner(broker.endpoint, client_factory(broker.endpoint), "LIVE")


def test_late_joiner_two_hops_away_gets_the_snapshot_then_live(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    a, _, c = chain(broker_factory, free_port, tmp_path)
    run_late_joiner(a.endpoint, client_factory(c.endpoint), "FAR")
    assert c.status()["state"]["owned"] == 0  # the values live on A, their owner


def test_removal_and_conflicts_across_the_network(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    a, b, c = chain(broker_factory, free_port, tmp_path)
    ca, cb, cc = (client_factory(n.endpoint) for n in (a, b, c))
    ca.set("X.one", "from A")
    ca.set("X.two", "from A")
    later = cc.set("X.two", "from C")  # a second owner, later: it wins
    (one, two) = cb.fetch("X.>")
    assert (one.payload, one.origin) == ("from A", "A")
    assert (two.payload, two.origin, two.version) == ("from C", "C", later)
    watch = Collector()
    cb.subscribe("X.>", watch)
    assert [(m.topic, m.payload) for m in watch.snapshot()] == [
        ("X.one", "from A"),
        ("X.two", "from C"),
    ]
    assert cc.remove("X.>") == 3  # A's two and C's one
    assert watch.wait_for(4)
    time.sleep(0.3)
    removed = [m for m in watch.snapshot() if m.removed]
    # X.one once; X.two from whichever owner removed it last (the other's is older)
    assert sorted(m.topic for m in removed) == ["X.one", "X.two"]
    assert ca.fetch(">") == [] and cc.fetch(">") == []


def test_a_snapshot_waits_for_the_route_of_its_subscription(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    a, _, c = chain(broker_factory, free_port, tmp_path)
    client_factory(a.endpoint).set("R.x", 1)
    got = Collector()
    client_factory(c.endpoint).subscribe("R.>", got)
    assert [(m.topic, m.payload, m.initial) for m in got.snapshot()] == [("R.x", 1, True)]
    st: dict[str, Any] = a.status()["state"]
    assert st["route_timeouts"] == 0 and st["queries_pending"] == 0


def test_a_selected_subscription_gets_only_the_values_its_selector_accepts(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """A snapshot is filtered by the subscription's selector, as its live messages are."""
    c = client_factory(broker.endpoint)
    c.set("P.EU.A", 1, headers={"region": "EU"})
    c.set("P.US.B", 2, headers={"region": "US"})
    c.set("P.X.C", 3)  # no header: UNKNOWN, not selected
    got = Collector()
    sub = c.subscribe("P.>", got, selector="region = 'EU'")
    assert sub.snapshot.is_set()
    c.set("P.US.B", 4, headers={"region": "US"})
    c.set("P.EU.A", 5, headers={"region": "EU"})
    assert got.wait_for(2)
    time.sleep(0.3)
    msgs = got.snapshot()
    assert [(m.topic, m.payload, m.initial) for m in msgs] == [
        ("P.EU.A", 1, True),
        ("P.EU.A", 5, False),
    ]


def test_fetch_drops_a_value_older_than_a_removal(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    """B's value (the winner) is removed on A while B is down; B comes back with it: the
    removal is newer, so neither fetch nor a snapshot, on either node, returns it."""
    a = broker_factory(broker_id="A")
    link = LinkConfig(name="ba", uri=a.endpoint, **FAST_LINK)

    def linked() -> bool:
        return any(ln["state"] == "up" for ln in a.status()["links"])

    b = broker_factory(broker_id="B", data_dir=tmp_path / "B", links=(link,))
    ca, cb = client_factory(a.endpoint), client_factory(b.endpoint)
    deadline = time.monotonic() + WAIT
    while not linked():
        assert time.monotonic() < deadline, a.status()["links"]
        time.sleep(0.05)
    ca.set("T.X", "from-A")
    later = cb.set("T.X", "from-B")
    assert [(m.payload, m.version) for m in ca.fetch("T.>")] == [("from-B", later)]
    cb.close()
    b.stop()
    while linked():
        assert time.monotonic() < deadline, a.status()["links"]
        time.sleep(0.05)
    assert ca.remove("T.X") == 1  # A's own (older) value: its tombstone is the newest
    b = broker_factory(broker_id="B", data_dir=tmp_path / "B", links=(link,))
    while not linked():
        assert time.monotonic() < deadline, a.status()["links"]
        time.sleep(0.05)
    assert b.status()["state"]["owned"] == 1  # (B still holds its older value)
    cb = client_factory(b.endpoint)
    assert ca.fetch("T.>") == [] and cb.fetch("T.>") == []
    for client in (ca, cb):
        got = Collector()
        client.subscribe("T.>", got)
        assert got.snapshot() == []


def _removed_count_is(n: int, messages: list[Message]) -> bool:
    return sum(m.removed for m in messages) == n


def test_a_selected_subscription_is_told_of_a_removal_of_what_it_took(
    broker_factory: BrokerFactory, client_factory: ClientFactory, free_port: Callable[[], int],
    tmp_path: Path,
) -> None:  # fmt: skip
    """A removal carries the headers of the value it removes: a subscriber whose selector
    took the value takes its removal too, on the owner's node and two hops away; one
    whose selector did not take the value is not told of its removal either."""
    a, _, c = chain(broker_factory, free_port, tmp_path)
    owner = client_factory(a.endpoint)
    owner.set("P.EU.A", 1, headers={"region": "EU"})
    owner.set("P.US.B", 2, headers={"region": "US"})
    here, far, plain = Collector(), Collector(), Collector()
    owner.subscribe("P.>", here, selector="region = 'EU'")
    remote = client_factory(c.endpoint)
    remote.subscribe("P.>", far, selector="region = 'EU'")
    remote.subscribe("P.>", plain)
    owner.remove("P.>")
    for got, n in ((here, 2), (far, 2), (plain, 4)):
        assert got.wait_until(partial(_removed_count_is, n // 2), WAIT)
    time.sleep(0.3)  # (nothing more may come)
    for got in (here, far):
        assert [(m.topic, m.initial, m.removed) for m in got.snapshot()] == [
            ("P.EU.A", True, False),
            ("P.EU.A", False, True),
        ]
        assert got.snapshot()[1].headers["region"] == "EU"
    assert sorted((m.topic, m.removed) for m in plain.snapshot()) == [
        ("P.EU.A", False), ("P.EU.A", True), ("P.US.B", False), ("P.US.B", True),
    ]  # fmt: skip
