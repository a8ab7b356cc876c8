"""Advisories: each kind is published exactly when its event happens, and is received on
another node through a link (a client of node B subscribes to node A's
``$ZB.ADVISORY.a.>``): links down and up, interest added and removed, no subscriber, slow
subscribers and drops, queue and durable lifecycles, refused handshakes. The rate limit,
the off switch, STATS, security, discovery and a real slow client:
:mod:`.test_advisories_limits`; the pair of nodes and the barrier: :mod:`.advisory_pair`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import Collector
from tests.integration.advisory_pair import (
    GRACE,
    WAIT,
    BrokerFactory,
    ClientFactory,
    Pair,
    WaitUntil,
    _common,
    deliver,
    heard,
    kinds,
    link_up,
    of_kind,
    of_pattern,
    report_gaps,
)
from tests.integration.advisory_pair import pair as pair  # (the fixture)
from tests.node_configs import FAST_LINK
from zbroker import Gap
from zbroker.config import LinkConfig

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
    b = broker_factory(broker_id="b", links=(LinkConfig(name="bc", uri=c.endpoint, **FAST_LINK),))
    a = broker_factory(broker_id="a", links=(LinkConfig(name="ab", uri=b.endpoint, **FAST_LINK),))
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


def test_slow_subscriber_and_drops_summary(
    pair: Callable[..., Pair], wait_until: WaitUntil
) -> None:
    p = pair(advisories={"summary_interval": 0.2})
    deliver(p.ca, ["SLOW.>", "SLOW.B"], "SLOW.B", 7)  # (what a report may count)
    report_gaps(p.a.endpoint, {"SLOW.>": 7, "SLOW.B": 3})
    assert p.seen.wait_until(lambda ms: "SLOW_SUBSCRIBER" in [m.payload["kind"] for m in ms], WAIT)
    assert p.seen.wait_until(lambda ms: "DROPS" in [m.payload["kind"] for m in ms], WAIT)
    p.barrier()
    (slow,) = of_kind(p.seen, "SLOW_SUBSCRIBER")
    _common(slow, "SLOW_SUBSCRIBER")
    assert slow["missed"] == 10 and slow["patterns"] == ["SLOW.>", "SLOW.B"]
    drops = of_kind(p.seen, "DROPS")
    assert len(drops) == 1
    assert drops[0]["reasons"] == {"slow_subscriber": 10} and drops[0]["messages"] == 10


def test_a_gaps_report_counts_no_more_than_was_sent(
    pair: Callable[..., Pair], wait_until: WaitUntil
) -> None:
    """A report is bounded by what the node sent on each pattern it names: a pattern it
    never delivered on counts nothing, a claim beyond what was sent counts what was."""
    p = pair(advisories={"summary_interval": 0.2})
    deliver(p.ca, ["SLOW.>"], "SLOW.B", 5)
    report_gaps(p.a.endpoint, {"NEVER.>": 9, "SLOW.>": 10**6, "SLOW.B": 2})
    report_gaps(p.a.endpoint, {"NEVER.>": 9})  # (alone: counts nothing, says nothing)
    assert p.seen.wait_until(lambda ms: "SLOW_SUBSCRIBER" in [m.payload["kind"] for m in ms], WAIT)
    p.barrier()
    (slow,) = of_kind(p.seen, "SLOW_SUBSCRIBER")
    assert slow["missed"] == 5 and slow["patterns"] == ["SLOW.>"]
    assert p.a.status()["counters"]["dropped"]["slow_subscriber"] == 5


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
        broker_id="x", group="other", links=(LinkConfig(name="xa", uri=p.a.endpoint, **FAST_LINK),)
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
