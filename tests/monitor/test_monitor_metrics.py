"""/metrics against what the node counts: publishes nobody wanted (not drops), refusals
under the right reason, one series
per link (two links of one name to one peer are two series), and per-link totals that
neither hold on to links gone nor mix two links up."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import wait_until
from tests.monitor.helpers import (
    FAST_LINK,
    FAST_MONITOR,
    dialling_each_other,
    get,
    monitor_url,
    sample,
    scrape,
)
from tests.ports import free_port
from zbroker import Broker, Client
from zbroker.config import LinkConfig
from zbroker.features.monitor import Monitor, snapshot

BrokerFactory = Callable[..., Broker]
WAIT = 20.0


def _failures(url: str) -> dict[str, float]:
    return {
        dict(labels)["reason"]: value
        for (name, labels), value in scrape(url).items()
        if name == "zbroker_handshake_failures_total"
    }


def test_publishes_nobody_wanted_are_unrouted_not_dropped(
    broker_factory: BrokerFactory, client_factory: Callable[..., Client]
) -> None:
    """A publish no subscriber anywhere wanted is not lost to a fault: Prometheus sees it
    under its own counter, as ``zbroker status`` shows it, and no drop reason moves."""
    b = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(b)
    pub = client_factory(b.endpoint)
    for i in range(5):
        pub.publish("NOBODY.WANTS", b"%d" % i)
    assert wait_until(lambda: sample(scrape(url), "zbroker_messages_unrouted_total") == 5, WAIT)
    assert b.status()["counters"]["unrouted"] == 5
    dropped = [k for k in scrape(url) if k[0] == "zbroker_messages_dropped_total"]
    assert dropped == [], dropped


def test_a_refused_handshake_is_not_called_a_duplicate_broker_id(
    broker_factory: BrokerFactory,
) -> None:
    """A link refused because its peer is in another group counts under ``handshake``;
    ``duplicate_broker_id`` counts only what the node refused for a duplicate ID."""
    b = broker_factory(broker_id="B", group="other")
    slow = {**FAST_LINK, "reconnect_initial_delay": 60.0, "reconnect_max_delay": 60.0}
    a = broker_factory(
        broker_id="A", monitor=FAST_MONITOR, links=(LinkConfig(name="ab", uri=b.endpoint, **slow),)
    )
    url = monitor_url(a)
    assert wait_until(lambda: _failures(url).get("handshake", 0) >= 1, WAIT), _failures(url)
    st = a.status()["counters"]
    assert (st["handshakes_refused"], st["handshakes_refused_duplicate_id"]) == (1, 0), st
    assert "duplicate_broker_id" not in st["dropped"]
    assert _failures(url) == {"duplicate_broker_id": 0, "handshake": 1, "auth": 0}


def test_a_duplicate_broker_id_is_a_refused_handshake_not_a_drop(
    broker_factory: BrokerFactory,
) -> None:
    """Two nodes "dup" dial T: the second is refused for the first's ID. T counts one
    refused handshake, under ``duplicate_broker_id`` in
    ``zbroker_handshake_failures_total`` and ``handshakes_refused_duplicate_id`` in its
    status, and drops no message for it."""
    pt = free_port()
    t = broker_factory(broker_id="T", port=pt, monitor=FAST_MONITOR)
    to_t = f"tcp://127.0.0.1:{pt}"
    url = monitor_url(t)
    first = broker_factory(broker_id="dup", links=(LinkConfig(name="up", uri=to_t, **FAST_LINK),))
    assert wait_until(lambda: [lk["state"] for lk in first.status()["links"]] == ["up"], WAIT)
    # the second redials a minute later only: one refusal while the test looks
    slow = {**FAST_LINK, "reconnect_initial_delay": 60.0, "reconnect_max_delay": 60.0}
    broker_factory(broker_id="dup", links=(LinkConfig(name="up", uri=to_t, **slow),))
    assert wait_until(lambda: _failures(url).get("duplicate_broker_id", 0) >= 1, WAIT)
    assert _failures(url) == {"duplicate_broker_id": 1, "handshake": 0, "auth": 0}
    st = t.status()["counters"]
    assert (st["handshakes_refused"], st["handshakes_refused_duplicate_id"]) == (1, 1), st
    assert st["dropped"] == {}, st["dropped"]
    dropped = [k for k in scrape(url) if k[0] == "zbroker_messages_dropped_total"]
    assert dropped == [], dropped


def _series(url: str, name: str) -> list[tuple[tuple[str, str], ...]]:
    """The label sets of metric ``name``, as many times as /metrics has each."""
    code, body = get(url + "/metrics")
    assert code == 200
    out = []
    for family in text_string_to_metric_families(body.decode()):
        out += [tuple(sorted(s.labels.items())) for s in family.samples if s.name == name]
    return out


def test_two_links_of_one_name_to_one_peer_are_two_series(broker_factory: BrokerFactory) -> None:
    """A and B dial each other, both naming the link "x": A has a link it dialled and
    one B dialled, both ("x", "B"). Each is its own series (``kind``), not one series
    twice (which Prometheus drops as duplicates) with one total for both."""
    a = dialling_each_other(broker_factory, free_port, "x", "x")
    url = monitor_url(a)
    assert wait_until(
        lambda: len([s for s in _series(url, "zbroker_link_up") if ("state", "up") in s]) == 2,
        WAIT,
    ), _series(url, "zbroker_link_up")
    ups = _series(url, "zbroker_link_up")
    assert sorted(ups) == sorted(set(ups))  # no series twice
    assert sorted(dict(s)["kind"] for s in ups) == ["accepted", "static"]
    # the per-link counters too: one series per link, each its own link's total
    sent = {dict(s)["kind"]: s for s in _series(url, "zbroker_link_bytes_sent_total")}
    assert set(sent) >= {"accepted", "static"}
    links = {ln["kind"]: ln for ln in a.status()["links"]}

    def matches() -> bool:
        # totals only grow; each series is its own link's (read once after the other)
        samples = scrape(url)
        now = {ln["kind"]: ln for ln in a.status()["links"]}
        return all(
            links[k]["bytes_out"]
            <= (sample(samples, "zbroker_link_bytes_sent_total", **dict(sent[k])) or 0)
            <= now[k]["bytes_out"]
            for k in ("accepted", "static")
        )

    assert wait_until(matches, WAIT)


def _monitor(broker: Broker) -> Monitor:
    found: Monitor = broker.call(
        lambda node: next(f for f in node.features if isinstance(f, Monitor))
    )
    return found


def _churn(a: Broker, broker_factory: BrokerFactory, peers: list[str]) -> None:
    """Each of ``peers`` dials A (an accepted link on A), then stops (the link goes)."""
    for peer in peers:
        _dial_then_stop(a, broker_factory, peer)


def _dial_then_stop(a: Broker, broker_factory: BrokerFactory, peer: str) -> None:
    """``peer`` dials A and stops once A's link has carried bytes both ways (its first
    heartbeat out may come up to an interval after the link is up: a peer stopped at once
    could leave A's bytes out at 0, which the callers do not mean to test)."""
    b = broker_factory(broker_id=peer, links=(LinkConfig(name="up", uri=a.endpoint, **FAST_LINK),))
    assert wait_until(lambda: _carried_both_ways(a, peer), WAIT)
    b.stop()
    assert wait_until(lambda: not _linked(a, peer), WAIT)


def _linked(broker: Broker, peer: str) -> bool:
    return any(ln["peer"] == peer for ln in broker.status()["links"])


def _carried_both_ways(broker: Broker, peer: str) -> bool:
    return any(
        ln["peer"] == peer and ln["bytes_in"] > 0 and ln["bytes_out"] > 0
        for ln in broker.status()["links"]
    )


def test_links_gone_are_not_held_by_a_monitor_nobody_reads(broker_factory: BrokerFactory) -> None:
    """A node whose monitor nobody reads builds no snapshot: the links that went away
    must not stay referenced until one (they did, one per accepted link that ever went)."""
    a = broker_factory(broker_id="A", monitor=FAST_MONITOR)
    monitor = _monitor(a)
    _churn(a, broker_factory, ["B1", "B2", "B3"])
    assert a.call(lambda node: len(monitor._totals._seen)) == 0
    # what they counted is kept all the same
    totals = a.call(lambda node: dict(monitor._totals.totals))
    assert sorted(totals) == [("up", f"B{i}", "accepted") for i in (1, 2, 3)]
    # bytes in: heartbeats (an accepted link counts none of its handshake in); out: both
    assert all(t[2] > 0 and t[3] > 0 for t in totals.values())


def test_series_of_a_link_gone_long_ago_are_forgotten(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-link totals outlive a link for FORGET_AFTER, then go: a hub whose peers come
    back under new broker IDs (a container without a volume) does not export a series
    for every peer it ever had. A link that is there is never forgotten."""
    monkeypatch.setattr(snapshot, "FORGET_AFTER", 4.0, raising=False)
    c = broker_factory(broker_id="C")
    a = broker_factory(
        broker_id="A",
        monitor=FAST_MONITOR,
        links=(LinkConfig(name="ac", uri=c.endpoint, **FAST_LINK),),
    )
    url = monitor_url(a)

    def peers() -> set[str]:
        return {
            dict(labels)["peer"]
            for (name, labels), _ in scrape(url).items()
            if name == "zbroker_link_bytes_sent_total"
        }

    assert wait_until(lambda: peers() == {"C"}, WAIT)  # (read: snapshots keep coming)
    _churn(a, broker_factory, ["B1"])
    assert wait_until(lambda: "B1" in peers(), WAIT)  # kept a while
    assert wait_until(lambda: "B1" not in peers(), WAIT), peers()
    assert peers() == {"C"}
    assert (
        sample(scrape(url), "zbroker_link_up", link="ac", peer="C", kind="static", state="up")
    ) == 1
