"""Advisories under their limits and switches: the rate limit (with exact counts of what it
suppressed), the off switch, STATS every ``sys_interval`` (and nothing when nobody
listens), msgpack payloads, authentication refused with security on, peers found and
lost, a real slow client, and a catch-all subscription that gets none
(:mod:`.advisory_pair`)."""

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

from tests.helpers import Collector
from tests.integration.advisory_pair import (
    GRACE,
    WAIT,
    BrokerFactory,
    ClientFactory,
    Pair,
    WaitUntil,
    deliver,
    heard,
    kinds,
    link_up,
    of_kind,
    report_gaps,
)
from tests.integration.advisory_pair import pair as pair  # (the fixture)
from tests.node_configs import FAST_LINK
from zbroker import wire
from zbroker.config import AdvisoryConfig, LinkConfig, RetainRule
from zbroker.errors import RequestError
from zbroker.node.events import InterestAdded, InterestRemoved, PeerFound, PeerLost
from zbroker.security import generate_keys, load_key_pair

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
    deliver(pub, ["SLOW.>"], "SLOW.X", 4)  # (what a report may count)
    report_gaps(a.endpoint, {"SLOW.>": 4})

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


def _security(root: Path) -> Callable[..., dict[str, Any]]:
    """Keys under ``root`` for the nodes a, b and c and the client ``watch`` (who may
    subscribe to $ZB.>), an allowlist of a and b; returns the options of a secure node."""
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

    return secure


def test_auth_refused_with_security(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    root = tmp_path / "keys"
    secure = _security(root)
    b = broker_factory(broker_id="b", **secure("b"))
    link = LinkConfig(name="ab", uri=b.endpoint, peer="b", **FAST_LINK)
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
