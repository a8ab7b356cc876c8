"""Advisories: each kind is published exactly when its event happens, and is received on
another node through a link (a client of node B subscribes to node A's
``$ZB.ADVISORY.a.>``); the rate limit holds with exact counts; the off switch; STATS.

Counts are exact. Advisories of one node travel one path in order, so a *barrier* (a
subscription to a fresh pattern on A, whose INTEREST_ADDED comes after everything A
advised before it) tells the test that every earlier advisory has arrived.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from tests.helpers import Collector
from zbroker import Broker, Client, Gap, wire
from zbroker.config import AdvisoryConfig, LinkConfig, RetainRule
from zbroker.errors import RequestError
from zbroker.node.events import InterestAdded, InterestRemoved, PeerFound, PeerLost
from zbroker.security import generate_keys, load_key_pair

HOST = "127.0.0.1"
WAIT = 20.0
GRACE = 0.3

FAST: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "reconnect_initial_delay": 0.1,
    "reconnect_max_delay": 0.5,
}

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]

_barriers = itertools.count(1)


def heard(broker: Broker, topic: str) -> bool:
    """Does anyone (here or through a link) subscribe to ``topic`` at ``broker``?"""
    return bool(broker.call(lambda node: any(node.engine.route(topic, (), None))))


def link_up(broker: Broker, name: str) -> bool:
    return any(ln["name"] == name and ln["state"] == "up" for ln in broker.status()["links"])


def kinds(c: Collector) -> list[str]:
    return [m.payload["kind"] for m in c.snapshot()]


def of_kind(c: Collector, kind: str) -> list[dict[str, Any]]:
    return [m.payload for m in c.snapshot() if m.payload["kind"] == kind]


def of_pattern(c: Collector, pattern: str) -> list[dict[str, Any]]:
    """Interest advisories of ``pattern``."""
    return [
        m.payload
        for m in c.snapshot()
        if m.payload["kind"].startswith("INTEREST_") and m.payload["pattern"] == pattern
    ]


class Pair:
    """Node A (watched) linked to node B (the watcher's node); ``watch`` follows A's
    advisories from a client of B."""

    def __init__(
        self,
        factory: BrokerFactory,
        clients: ClientFactory,
        wait_until: WaitUntil,
        **a_options: Any,
    ) -> None:
        self.b = factory(broker_id="b")
        link = LinkConfig(name="ab", uri=self.b.endpoint, **FAST)
        self.a = factory(broker_id="a", links=(link,), **a_options)
        self.wait_until = wait_until
        assert wait_until(lambda: link_up(self.a, "ab"), WAIT)
        self.ca = clients(self.a.endpoint)
        self.cb = clients(self.b.endpoint)
        self.seen = Collector()
        self.cb.subscribe("$ZB.ADVISORY.a.>", self.seen)
        assert wait_until(lambda: heard(self.a, "$ZB.ADVISORY.a.LINK_UP"), WAIT)

    def barrier(self) -> None:
        """Every advisory A published before now has reached the watcher."""
        pattern = f"BARRIER.{next(_barriers)}"
        self.ca.subscribe(pattern, lambda m: None)
        assert self.seen.wait_until(
            lambda ms: any(m.payload.get("pattern") == pattern for m in ms), WAIT
        ), kinds(self.seen)


@pytest.fixture
def pair(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> Callable[..., Pair]:
    def make(**a_options: Any) -> Pair:
        return Pair(broker_factory, client_factory, wait_until, **a_options)

    return make


def _common(p: dict[str, Any], kind: str) -> None:
    assert p["kind"] == kind and p["broker"] == "a"
    assert type(p["seq"]) is int and p["seq"] >= 1
    assert isinstance(p["time"], float) and abs(p["time"] - time.time()) < 60
    assert p["suppressed"] == 0


# -- links ----------------------------------------------------------------------------------------


def test_link_down_and_up_reach_another_node(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    # chain a - b - c: a client of a follows b's link advisories; the link b-c is cut (c
    # stops) and comes back (c starts again on the same port)
    c_opts: dict[str, Any] = {"broker_id": "c", "port": free_port(), "data_dir": tmp_path / "c"}
    c = broker_factory(**c_opts)
    b = broker_factory(broker_id="b", links=(LinkConfig(name="bc", uri=c.endpoint, **FAST),))
    a = broker_factory(broker_id="a", links=(LinkConfig(name="ab", uri=b.endpoint, **FAST),))
    assert wait_until(lambda: link_up(a, "ab") and link_up(b, "bc"), WAIT)
    seen = Collector()
    watcher = client_factory(a.endpoint)
    watcher.subscribe("$ZB.ADVISORY.b.LINK_DOWN", seen)
    watcher.subscribe("$ZB.ADVISORY.b.LINK_UP", seen)
    assert wait_until(lambda: heard(b, "$ZB.ADVISORY.b.LINK_UP"), WAIT)
    gaps: list[Gap] = []  # a clean stop (c says goodbye) loses nothing: no gap notice
    on_b = client_factory(b.endpoint).subscribe("G.>", lambda m: None)
    on_b.on_gap = gaps.append
    c.stop()
    assert seen.wait_until(lambda ms: "LINK_DOWN" in [m.payload["kind"] for m in ms], WAIT)
    c2 = broker_factory(**c_opts)
    assert seen.wait_until(lambda ms: "LINK_UP" in [m.payload["kind"] for m in ms], WAIT)
    assert wait_until(lambda: link_up(b, "bc"), WAIT)
    assert c2.broker_id == "c"
    time.sleep(GRACE)
    assert kinds(seen) == ["LINK_DOWN", "LINK_UP"]
    down, up = seen.snapshot()
    assert down.topic == "$ZB.ADVISORY.b.LINK_DOWN" and down.id.origin == "b"
    assert down.payload["link"] == "bc" and down.payload["peer"] == "c"
    assert down.payload["reason"].startswith("peer said goodbye")
    assert down.payload["clean"] is True and gaps == []
    assert up.payload["link"] == "bc" and up.payload["peer"] == "c"
    assert up.payload["seq"] == down.payload["seq"] + 1
    st = b.status()["advisories"]
    assert st["emitted"] == 2 and st["suppressed"] == {}


# -- interest -------------------------------------------------------------------------------------


def test_interest_added_for_the_first_subscriber_removed_after_the_last(
    pair: Callable[..., Pair], client_factory: ClientFactory
) -> None:
    p = pair()
    other = client_factory(p.a.endpoint)
    s1 = p.ca.subscribe("APP.>", lambda m: None)
    s2 = other.subscribe("APP.>", lambda m: None)
    p.barrier()
    added = [x for x in of_kind(p.seen, "INTEREST_ADDED") if x["pattern"] == "APP.>"]
    assert len(added) == 1
    _common(added[0], "INTEREST_ADDED")
    assert added[0]["source"] == "clients"
    s1.unsubscribe()
    p.barrier()
    assert of_kind(p.seen, "INTEREST_REMOVED") == []  # another subscriber holds it
    s2.unsubscribe()
    assert p.seen.wait_until(
        lambda ms: any(m.payload["kind"] == "INTEREST_REMOVED" for m in ms), WAIT
    )
    p.barrier()
    removed = of_kind(p.seen, "INTEREST_REMOVED")
    assert [(x["pattern"], x["source"]) for x in removed] == [("APP.>", "clients")]
    # watching the node is not application interest: the watcher's own $ZB.ADVISORY.a.>
    # subscription never showed up
    assert not any(x["pattern"].startswith("$ZB") for x in of_kind(p.seen, "INTEREST_ADDED"))


# -- no subscriber --------------------------------------------------------------------------------


def test_no_subscriber_summarized_with_topic_and_count(
    pair: Callable[..., Pair], client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    p = pair(advisories={"summary_interval": 0.2})
    # a subscriber on b makes REMOTE.X routed: it is not "no subscriber"
    remote = Collector()
    p.cb.subscribe("REMOTE.X", remote)
    local = Collector()
    p.ca.subscribe("LOCAL.X", local)
    assert wait_until(lambda: heard(p.a, "REMOTE.X"), WAIT)
    for i in range(5):
        p.ca.publish("NOBODY.T", i)
        p.ca.publish("REMOTE.X", i)
        p.ca.publish("LOCAL.X", i)
    assert remote.wait_for(5) and local.wait_for(5)
    assert wait_until(lambda: p.a.status()["counters"]["unrouted"] == 5, WAIT)
    assert p.seen.wait_until(
        lambda ms: (
            sum(m.payload.get("messages", 0) for m in ms if m.payload["kind"] == "NO_SUBSCRIBER")
            == 5
        ),
        WAIT,
    )
    p.barrier()
    nosub = of_kind(p.seen, "NO_SUBSCRIBER")
    assert {x["topic"] for x in nosub} == {"NOBODY.T"}
    assert sum(x["messages"] for x in nosub) == 5
    # nothing more comes while nothing more goes unrouted
    time.sleep(0.6)
    p.barrier()
    assert len(of_kind(p.seen, "NO_SUBSCRIBER")) == len(nosub)


# -- slow subscriber and drops --------------------------------------------------------------------


def _report_gaps(endpoint: str, gaps: dict[str, int]) -> None:
    """A subscriber's GAPS report, as the client library sends it when it sees missed
    deliveries in a pattern's sequence (sent from a raw DEALER: the count is exact)."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    try:
        sock.connect(endpoint)
        sock.send(wire.encode_control(wire.GAPS, 0, gaps))
    finally:
        sock.close()


def test_slow_subscriber_and_drops_summary(
    pair: Callable[..., Pair], wait_until: WaitUntil
) -> None:
    p = pair(advisories={"summary_interval": 0.2})
    _report_gaps(p.a.endpoint, {"SLOW.>": 7, "SLOW.B": 3})
    assert p.seen.wait_until(lambda ms: "SLOW_SUBSCRIBER" in [m.payload["kind"] for m in ms], WAIT)
    assert p.seen.wait_until(lambda ms: "DROPS" in [m.payload["kind"] for m in ms], WAIT)
    p.barrier()
    (slow,) = of_kind(p.seen, "SLOW_SUBSCRIBER")
    _common(slow, "SLOW_SUBSCRIBER")
    assert slow["missed"] == 10 and slow["patterns"] == ["SLOW.>", "SLOW.B"]
    drops = of_kind(p.seen, "DROPS")
    assert len(drops) == 1
    assert drops[0]["reasons"] == {"slow_subscriber": 10} and drops[0]["messages"] == 10


# -- durables -------------------------------------------------------------------------------------


def test_queue_lifecycle(pair: Callable[..., Pair], wait_until: WaitUntil) -> None:
    """QUEUE_JOINED per member that joins a group on A, QUEUE_LEFT per member that leaves,
    with the members left on A."""
    p = pair()
    first = p.ca.subscribe("J.>", lambda m: None, queue="workers")
    second = p.ca.subscribe("J.>", lambda m: None, queue="workers")
    first.unsubscribe()
    second.unsubscribe()
    assert p.seen.wait_until(
        lambda ms: [m.payload["kind"] for m in ms].count("QUEUE_LEFT") == 2, WAIT
    ), kinds(p.seen)
    life = [
        (x["kind"], x["group"], x["pattern"], x["members"])
        for x in (m.payload for m in p.seen.snapshot())
        if x["kind"].startswith("QUEUE_")
    ]
    assert life == [
        ("QUEUE_JOINED", "workers", "J.>", 1),
        ("QUEUE_JOINED", "workers", "J.>", 2),
        ("QUEUE_LEFT", "workers", "J.>", 1),
        ("QUEUE_LEFT", "workers", "J.>", 0),
    ]


def test_durable_lifecycle(pair: Callable[..., Pair], wait_until: WaitUntil) -> None:
    p = pair()
    got = Collector()
    p.ca.subscribe("D.>", got, durable="d1", max_msgs=2)
    p.barrier()
    p.ca.detach_durable("d1")
    assert p.seen.wait_until(lambda ms: "DURABLE_DETACHED" in [m.payload["kind"] for m in ms], WAIT)
    for i in range(5):  # stored while away; the bound keeps the newest 2
        p.ca.publish("D.X", i)
    assert p.seen.wait_until(
        lambda ms: (
            sum(m.payload["messages"] for m in ms if m.payload["kind"] == "DURABLE_OVERFLOW") == 3
        ),
        WAIT,
    )
    p.ca.subscribe("D.>", got, durable="d1", max_msgs=2)
    assert got.wait_for(2)
    p.ca.detach_durable("d1")
    assert p.seen.wait_until(
        lambda ms: [m.payload["kind"] for m in ms].count("DURABLE_DETACHED") == 2, WAIT
    )
    deleted = p.ca.delete_durable("d1")
    p.barrier()
    life = [k for k in kinds(p.seen) if k.startswith("DURABLE_")]
    overflows = life.count("DURABLE_OVERFLOW")
    assert life == [
        "DURABLE_OPENED",
        "DURABLE_ATTACHED",
        "DURABLE_DETACHED",
        *["DURABLE_OVERFLOW"] * overflows,
        "DURABLE_ATTACHED",
        "DURABLE_DETACHED",
        "DURABLE_DELETED",
    ]
    opened = of_kind(p.seen, "DURABLE_OPENED")[0]
    assert opened["name"] == "d1" and opened["pattern"] == "D.>"
    assert {x["reason"] for x in of_kind(p.seen, "DURABLE_DETACHED")} == {"closed"}
    over = of_kind(p.seen, "DURABLE_OVERFLOW")
    assert {(x["name"], x["policy"]) for x in over} == {("d1", "drop-oldest")}
    assert sum(x["messages"] for x in over) == 3
    (gone,) = of_kind(p.seen, "DURABLE_DELETED")
    assert gone["name"] == "d1" and gone["messages"] == deleted
    # the durable's interest came and went with it
    interest = [(x["kind"], x["source"]) for x in of_pattern(p.seen, "D.>")]
    assert interest == [("INTEREST_ADDED", "durable:d1"), ("INTEREST_REMOVED", "durable:d1")]


def test_durable_reject_new_overflow(pair: Callable[..., Pair]) -> None:
    p = pair()
    p.ca.subscribe("R.>", lambda m: None, durable="r1", max_msgs=2, overflow="reject-new")
    p.ca.detach_durable("r1")
    for i in range(5):
        p.ca.publish("R.X", i)
    assert p.seen.wait_until(
        lambda ms: (
            sum(m.payload["messages"] for m in ms if m.payload["kind"] == "DURABLE_OVERFLOW") == 3
        ),
        WAIT,
    )
    p.barrier()
    over = of_kind(p.seen, "DURABLE_OVERFLOW")
    assert {(x["name"], x["policy"]) for x in over} == {("r1", "reject-new")}
    assert sum(x["messages"] for x in over) == 3


# -- refusals -------------------------------------------------------------------------------------


def test_handshake_refused(
    pair: Callable[..., Pair], broker_factory: BrokerFactory, wait_until: WaitUntil
) -> None:
    p = pair()
    # a node of another network group dials a: a refuses every handshake it tries
    stranger = broker_factory(
        broker_id="x", group="other", links=(LinkConfig(name="xa", uri=p.a.endpoint, **FAST),)
    )
    assert p.seen.wait_until(
        lambda ms: "HANDSHAKE_REFUSED" in [m.payload["kind"] for m in ms], WAIT
    )
    stranger.stop()
    time.sleep(GRACE)  # a handshake it sent last may still be on its way
    p.barrier()
    refused = of_kind(p.seen, "HANDSHAKE_REFUSED")
    assert len(refused) == p.a.status()["counters"]["handshakes_refused"] >= 1
    assert refused[0]["link"].startswith("x/") and "group" in refused[0]["reason"]
    assert not link_up(p.a, "xa")


# -- the rate limit -------------------------------------------------------------------------------


def test_rate_limit_counts_what_it_suppresses(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(
        broker_id="a", advisories={"rate_limit": 3, "rate_window": 600.0, "summary_interval": 600.0}
    )
    watcher = client_factory(a.endpoint)
    seen = Collector()
    watcher.subscribe("$ZB.ADVISORY.>", seen)
    c = client_factory(a.endpoint)
    for i in range(10):
        c.subscribe(f"T{i}", lambda m: None)
    assert seen.wait_for(3)
    assert wait_until(
        lambda: a.status()["advisories"]["suppressed"] == {"INTEREST_ADDED": 7}, WAIT
    ), a.status()["advisories"]
    time.sleep(GRACE)
    assert [m.payload["pattern"] for m in seen.snapshot()] == ["T0", "T1", "T2"]
    st = a.status()["advisories"]
    assert st["emitted"] == 3 and st["suppressed"] == {"INTEREST_ADDED": 7}


def test_rate_window_reopens_and_reports_what_was_suppressed(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="a", advisories={"rate_limit": 2, "rate_window": 1.0})
    seen = Collector()
    client_factory(a.endpoint).subscribe("$ZB.ADVISORY.>", seen)

    def burst(node: Any, n: int = 5) -> None:  # five events in one pass: one window
        for i in range(n):
            node.emit(InterestAdded(pattern=f"T{i}", source="clients"))

    a.call(burst)
    assert wait_until(lambda: a.status()["advisories"]["suppressed"] == {"INTEREST_ADDED": 3})
    time.sleep(1.5)  # past the window (the limit is per window; no timing is asserted)
    a.call(lambda node: node.emit(InterestRemoved(pattern="T0", source="clients")))
    assert seen.wait_for(3)
    time.sleep(GRACE)
    first, second, third = seen.snapshot()
    assert [first.payload["pattern"], second.payload["pattern"]] == ["T0", "T1"]
    assert [first.payload["suppressed"], second.payload["suppressed"]] == [0, 0]
    assert third.payload["kind"] == "INTEREST_REMOVED" and third.payload["suppressed"] == 3
    assert [m.payload["seq"] for m in seen.snapshot()] == [1, 2, 3]


def test_a_suppressed_summary_keeps_its_count_for_the_next(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """NO_SUBSCRIBER and DROPS the rate limit suppressed are not lost: the next one
    published counts everything since the previous one published."""
    a = broker_factory(
        broker_id="a",
        advisories={"rate_limit": 2, "rate_window": 600.0, "summary_interval": 0.1},
    )
    seen = Collector()
    client_factory(a.endpoint).subscribe("$ZB.ADVISORY.a.>", seen)
    assert wait_until(lambda: heard(a, "$ZB.ADVISORY.a.DROPS"), WAIT)

    def spend(node: Any) -> None:  # the window's budget, on two other advisories
        for i in range(2):
            node.emit(InterestAdded(pattern=f"T{i}", source="clients"))

    a.call(spend)
    assert seen.wait_for(2)
    pub = client_factory(a.endpoint)
    for i in range(5):
        pub.publish("NOBODY.T", i)
    _report_gaps(a.endpoint, {"SLOW.>": 4})

    def suppressed() -> dict[str, int]:
        got: dict[str, int] = a.status()["advisories"]["suppressed"]
        return got

    assert wait_until(lambda: {"NO_SUBSCRIBER", "DROPS"} <= set(suppressed()), WAIT)
    for i in range(2):
        pub.publish("NOBODY.T", i)
    assert wait_until(lambda: a.status()["counters"]["unrouted"] == 7, WAIT)
    before = suppressed()["NO_SUBSCRIBER"]
    assert wait_until(lambda: suppressed()["NO_SUBSCRIBER"] > before, WAIT)  # summarized

    def reopen(node: Any) -> None:  # the window ends (as 600 s later)
        adv = next(f for f in node.features if type(f).__name__ == "Advisories")
        adv._limit._start = float("-inf")

    a.call(reopen)
    assert seen.wait_until(
        lambda ms: {"NO_SUBSCRIBER", "DROPS"} <= {m.payload["kind"] for m in ms}, WAIT
    ), kinds(seen)
    time.sleep(GRACE)  # (a second summary, if any were sent, would come now)
    (nosub,) = of_kind(seen, "NO_SUBSCRIBER")
    assert nosub["messages"] == 7 and nosub["topic"] == "NOBODY.T"
    (drops,) = of_kind(seen, "DROPS")
    assert drops["reasons"] == {"slow_subscriber": 4} and drops["messages"] == 4


# -- the off switch -------------------------------------------------------------------------------


def test_disabled_publishes_nothing(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    a = broker_factory(
        broker_id="a",
        advisories=AdvisoryConfig(enabled=False, sys_interval=0.1, summary_interval=0.1),
    )
    assert "advisories" not in a.status()
    assert not any(type(f).__name__ == "Advisories" for f in a.call(lambda n: n.features))
    seen = Collector()
    c = client_factory(a.endpoint)
    c.subscribe("$ZB.>", seen)
    done = Collector()
    c.subscribe("DONE", done)
    sub = c.subscribe("APP.X", lambda m: None)
    sub.unsubscribe()
    c.publish("NOBODY.T", 1)
    time.sleep(0.5)  # several sys and summary intervals
    c.publish("DONE", 1)
    assert done.wait_for(1)
    time.sleep(GRACE)
    assert len(seen) == 0


# -- STATS ----------------------------------------------------------------------------------------


def test_stats_every_sys_interval_on_another_node(
    pair: Callable[..., Pair], wait_until: WaitUntil
) -> None:
    p = pair(advisories={"sys_interval": 0.3})
    stats = Collector()
    p.cb.subscribe("$ZB.SYS.*.STATS", stats)
    assert wait_until(lambda: heard(p.a, "$ZB.SYS.a.STATS"), WAIT)
    for i in range(10):
        p.ca.publish("NOBODY.T", i)
    assert stats.wait_until(
        lambda ms: (
            sum(1 for m in ms if m.topic == "$ZB.SYS.a.STATS") >= 4
            and any(m.payload["counters"]["received"] >= 10 for m in ms if m.id.origin == "a")
        ),
        WAIT,
    )
    mine = [m.payload for m in stats.snapshot() if m.topic == "$ZB.SYS.a.STATS"]
    for s in mine:
        assert s["broker"] == "a" and s["links"] == {"up": 1, "total": 1}
        assert set(s["counters"]) >= {"received", "delivered", "forwarded", "dropped", "unrouted"}
        assert set(s["rates"]) == {"received", "delivered", "forwarded", "dropped", "unrouted"}
        assert s["interval"] >= 0.3 - 0.001
    for prev, nxt in itertools.pairwise(mine):
        # the cadence: never sooner than sys_interval (the node's own clock)
        assert nxt["uptime"] - prev["uptime"] >= 0.3 - 0.002
        for k in ("received", "delivered", "dropped", "unrouted"):
            assert nxt["counters"][k] >= prev["counters"][k]
    last = mine[-1]
    assert last["counters"]["received"] == 10 and last["counters"]["unrouted"] == 10
    assert p.a.status()["advisories"]["stats_sent"] >= len(mine)
    assert all(m.id.origin == "a" for m in stats.snapshot() if m.topic == "$ZB.SYS.a.STATS")


def test_stats_and_advisories_are_not_published_when_nobody_listens(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    a = broker_factory(broker_id="a", advisories={"sys_interval": 0.1})
    c = client_factory(a.endpoint)
    c.subscribe("APP.X", lambda m: None)
    time.sleep(0.5)
    st = a.status()
    assert st["advisories"]["emitted"] == 0 and st["advisories"]["stats_sent"] == 0
    assert st["advisories"]["unheard"] >= 1
    assert st["counters"]["received"] == 0


def test_advisory_payload_is_msgpack(pair: Callable[..., Pair]) -> None:
    p = pair()
    raw = Collector()
    p.cb.subscribe("$ZB.ADVISORY.a.INTEREST_ADDED", raw)
    p.barrier()
    assert raw.wait_for(1)
    msg = raw.snapshot()[-1]
    assert msg.payload_type == "msgpack" and msgpack.unpackb(msg.raw) == msg.payload
    assert msg.payload["kind"] == "INTEREST_ADDED"


# -- authentication refused (security on) ---------------------------------------------------------


def test_auth_refused_with_security(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    root = tmp_path / "keys"
    for node in ("a", "b", "c"):
        generate_keys(root / node)
    generate_keys(root / "clients", "watch")
    allowlist = root / "allowlist"
    allowlist.mkdir()
    for node in ("a", "b"):  # c is not allowlisted: b's ZAP handler refuses its key
        shutil.copy(root / node / "node.key", allowlist / f"{node}.key")
    clients = root / "clients.toml"
    clients.write_text('[watch]\nkey_file = "clients/watch.key"\nsubscribe = ["$ZB.>"]\n')

    def secure(node: str, **extra: Any) -> dict[str, Any]:
        return {"security": True, "key_dir": root / node, "allowlist": allowlist} | {
            "clients": clients,
            **extra,
        }

    b = broker_factory(broker_id="b", **secure("b"))
    link = LinkConfig(name="ab", uri=b.endpoint, peer="b", **FAST)
    a = broker_factory(broker_id="a", **secure("a", links=(link,)))
    assert wait_until(lambda: link_up(a, "ab"), WAIT)
    seen = Collector()
    watcher = client_factory(
        a.endpoint,
        keys=root / "clients" / "watch.key_secret",
        server_key=load_key_pair(root / "a")[0].decode(),
    )
    watcher.subscribe("$ZB.ADVISORY.b.AUTH_REFUSED", seen)
    assert wait_until(lambda: heard(b, "$ZB.ADVISORY.b.AUTH_REFUSED"), WAIT)
    c = broker_factory(
        broker_id="c", **secure("c", links=(LinkConfig(name="cb", uri=b.endpoint, peer="b"),))
    )
    assert seen.wait_for(1)
    c.stop()
    time.sleep(GRACE)
    failures = b.status()["security"]["auth_failures"]
    assert wait_until(lambda: len(seen) == failures, WAIT), (len(seen), failures)
    first = seen.snapshot()[0].payload
    assert first["kind"] == "AUTH_REFUSED" and first["broker"] == "b"
    assert first["address"].startswith("127.0.0.1") and "unknown key" in first["reason"]

    # a known key asking for what its permissions do not allow (here: a READ of APP.>,
    # checked by the node whatever the client library does)
    denied = Collector()
    watcher.subscribe("$ZB.ADVISORY.a.PERMISSION_REFUSED", denied)
    with pytest.raises(RequestError, match="permission denied"):
        watcher.request(wire.READ, {"pattern": "APP.>"})
    assert denied.wait_for(1)
    time.sleep(GRACE)
    assert [m.payload for m in denied.snapshot()] == [
        {
            **denied.snapshot()[0].payload,
            "kind": "PERMISSION_REFUSED",
            "user": "client:watch",
            "operation": "subscribe to",
            "subject": "APP.>",
        }
    ]
    assert a.status()["security"]["refused"] == {"subscribe": 1}


# -- discovery ------------------------------------------------------------------------------------


def test_peer_found_and_lost(pair: Callable[..., Pair]) -> None:
    # the discovery feature emits these from mDNS (tested in netns tests); here the same
    # events are emitted on the node's loop, to check what the advisories make of them
    p = pair()
    p.a.call(lambda node: node.emit(PeerFound(peer="z", endpoint="tcp://10.0.0.9:7100")))
    p.a.call(lambda node: node.emit(PeerLost(peer="z")))
    p.barrier()
    found, lost = of_kind(p.seen, "PEER_FOUND"), of_kind(p.seen, "PEER_LOST")
    assert [(x["peer"], x["endpoint"]) for x in found] == [("z", "tcp://10.0.0.9:7100")]
    assert [x["peer"] for x in lost] == ["z"]


# -- a real slow subscriber -----------------------------------------------------------------------


def test_slow_subscriber_real_client(
    pair: Callable[..., Pair], client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """A subscriber whose callback stalls loses what its full queues cannot hold; it sees
    the gaps and reports them; the node advises the exact number it reported."""
    p = pair(hwm=50)
    release = threading.Event()
    calls = [0]

    def stalled(msg: Any) -> None:
        calls[0] += 1
        release.wait(30)

    slow = client_factory(p.a.endpoint, hwm=10)
    slow.subscribe("SLOW.>", stalled)
    try:
        payload = b"p" * 65536  # (what it takes to fill the sockets' queues; see test_node)
        n = 600
        for i in range(n):
            p.ca.publish("SLOW.X", payload)
            if i % 20 == 19:
                assert wait_until(lambda k=i + 1: p.a.status()["counters"]["received"] >= k, WAIT)
        release.set()
        before = -1
        while calls[0] != before:  # let it drain what its queues hold
            before = calls[0]
            time.sleep(0.3)
        p.ca.publish("SLOW.X", b"barrier")  # reveals drops at the very end too
        assert wait_until(lambda: calls[0] + slow.missed == n + 1, WAIT)
        assert slow.missed > 0
        assert p.seen.wait_until(
            lambda ms: (
                sum(m.payload["missed"] for m in ms if m.payload["kind"] == "SLOW_SUBSCRIBER")
                == slow.missed
            ),
            WAIT,
        )
    finally:
        release.set()
    assert {p for x in of_kind(p.seen, "SLOW_SUBSCRIBER") for p in x["patterns"]} == {"SLOW.>"}


def test_catch_all_interest_gets_no_advisories(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """A leading wildcard does not match $ZB topics: a '>' subscriber, a '>' retain rule and
    a '>' durable take none of the node's advisories or STATS; '$ZB.ADVISORY.>' does."""
    a = broker_factory(broker_id="a", retain=(RetainRule(">"),), advisories={"sys_interval": 0.1})
    c = client_factory(a.endpoint)
    everything = Collector()
    c.subscribe(">", everything)
    durable = Collector()
    c.subscribe("*.>", durable, durable="all")
    assert a.status()["advisories"]["emitted"] == 0  # nobody asked by name yet
    named = Collector()
    c.subscribe("$ZB.ADVISORY.>", named)
    c.subscribe("APP.X", lambda m: None)  # INTEREST_ADDED: a named subscriber wants it
    assert named.wait_for(1)
    time.sleep(0.3)  # STATS intervals pass: nobody asked for them by name
    c.publish("APP.X", b"1", persistent=True, confirm=True)
    assert everything.wait_payload(b"1") and durable.wait_payload(b"1")
    time.sleep(GRACE)
    assert [m.topic for m in everything.snapshot()] == ["APP.X"]
    assert [m.topic for m in durable.snapshot()] == ["APP.X"]
    assert c.log_range() == (1, 1)  # the retention log holds the one publish only
    st = a.status()["advisories"]
    assert st["emitted"] == len(named) >= 1 and st["stats_sent"] == 0
