"""A network of brokers under faults: a middle node restarted, failover to the other side of
a square, restarted dialers, heartbeat timeouts. In-thread nodes (:mod:`.network`, which
also says how these tests wait and count). Refused handshakes:
:mod:`.test_network_handshakes`."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.network import (
    HOST,
    WAIT,
    BrokerFactory,
    ClientFactory,
    N,
    Net,
    WaitUntil,
    assert_exact,
    counters,
    endpoint,
    entries,
    has_route,
    link_named,
    links_of,
    pump,
    route,
    routes,
    up_links,
    wait_links,
)
from tests.integration.network import net as net  # (the fixture)
from tests.node_configs import FAST_LINK
from zbroker import Broker
from zbroker.config import LinkConfig

# -- 10. middle node restart ----------------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True], ids=["stop", "crash"])
def test_middle_node_restart_rebuilds_links_and_interest(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil, crash: bool
) -> None:
    # crash: B vanishes without a goodbye, and its neighbours' heartbeat timeout is a
    # minute: they must learn of the new incarnation from the new B itself
    hb: dict[str, Any] = {"heartbeat_timeout": 60.0} if crash else {}
    a = net.start("A", net.link("A", "B", **hb))
    b = net.start("B", net.link("B", "C", **hb))
    c = net.start("C")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    got = Collector()
    client_factory(c.endpoint).subscribe("MID.>", got)
    assert wait_until(lambda: has_route(a, "MID.>", "C", hops=2), WAIT), routes(a)
    publisher = client_factory(a.endpoint)
    pump(publisher, "MID.X", N, got, end="MID.END")
    assert_exact(got, "MID.X", range(N), "MID.END")
    old_incarnation = b.incarnation

    if crash:
        b.call(lambda node: setattr(node.links, "goodbye", lambda now: None))
        b.stop()
        # nobody noticed: the neighbours still hold the links and the routes through them
        assert up_links(a) == {("ab", "B")} and up_links(c) == {("bc", "B")}
    else:
        b.stop()
        # B said goodbye: both neighbours drop the link and every route through it
        assert wait_until(lambda: up_links(a) == set() and up_links(c) == set(), WAIT)
        assert wait_until(lambda: routes(a) == [], WAIT), routes(a)
        assert [(r["pattern"], r["origin"]) for r in routes(c)] == [("MID.>", "C")]

    b = net.restart("B")
    assert b.broker_id == "B"
    assert b.incarnation > old_incarnation
    # both neighbours' links are to the new incarnation (up a second time)
    assert wait_until(
        lambda: counters(a)["links_up"] == 2 and counters(c)["links_up"] == 2, WAIT
    ), (links_of(a), links_of(c))
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A"), ("bc", "C")}, c: {("bc", "B")}})
    assert a.call(lambda node: node.links.dialers["ab"].peer_incarnation) == b.incarnation
    assert len(links_of(c)) == 1  # the old incarnation's accepted link is gone
    assert wait_until(lambda: has_route(a, "MID.>", "C", hops=2, via="ab"), WAIT), routes(a)
    # no stale routes anywhere
    assert routes(a) == [
        {"pattern": "MID.>", "origin": "C", "path": ["C", "B"], "hops": 2, "link": "ab"}
    ]
    assert routes(b) == [
        {"pattern": "MID.>", "origin": "C", "path": ["C"], "hops": 1, "link": "bc"}
    ]
    assert [(r["pattern"], r["origin"]) for r in routes(c)] == [("MID.>", "C")]

    got.clear()
    pump(publisher, "MID.X", N, got, end="MID.END", start=N)
    assert_exact(got, "MID.X", range(N, 2 * N), "MID.END")
    assert link_named(b, "ab")["msgs_in"] == N + 1
    assert link_named(b, "bc")["msgs_out"] == N + 1
    assert counters(b)["forwarded"] == N + 1
    assert counters(c)["duplicates"] == 0


# -- 11. shortest-path failover -------------------------------------------------------------------


def test_failover_to_the_other_side_of_a_square(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    # A - B - C - D - A; the subscriber on C is two hops away both ways round
    a = net.start("A", net.link("A", "B"))
    b = net.start("B", net.link("B", "C"))
    c = net.start("C", net.link("C", "D"))
    d = net.start("D", net.link("D", "A"))
    wait_links(
        wait_until,
        {
            a: {("ab", "B"), ("da", "D")},
            b: {("ab", "A"), ("bc", "C")},
            c: {("bc", "B"), ("cd", "D")},
            d: {("cd", "C"), ("da", "A")},
        },
    )
    got = Collector()
    client_factory(c.endpoint).subscribe("SQ.>", got)
    assert wait_until(
        lambda: entries(a) == 2 and has_route(a, "SQ.>", "C", hops=2, via="ab"), WAIT
    ), routes(a)
    publisher = client_factory(a.endpoint)
    pump(publisher, "SQ.X", N, got, end="SQ.END")
    assert_exact(got, "SQ.X", range(N), "SQ.END")
    assert link_named(a, "ab")["msgs_out"] == N + 1
    assert link_named(a, "da")["msgs_out"] == 0

    b.stop()
    # no operator action: A's next-best path (through D) takes over
    assert wait_until(lambda: has_route(a, "SQ.>", "C", hops=2, via="D/da"), WAIT), routes(a)
    assert route(a, "SQ.>", "C") == {
        "pattern": "SQ.>",
        "origin": "C",
        "path": ["C", "D"],
        "hops": 2,
        "link": "D/da",
    }
    got.clear()
    pump(publisher, "SQ.X", N, got, end="SQ.END", start=N)
    assert_exact(got, "SQ.X", range(N, 2 * N), "SQ.END")
    assert link_named(a, "da")["msgs_out"] == N + 1
    assert link_named(d, "cd")["msgs_out"] == N + 1
    assert counters(c)["duplicates"] == 0
    assert counters(c)["delivered"] == 2 * (N + 1)


# -- 13. restarted dialer -------------------------------------------------------------------------


def test_restarted_dialer_replaces_its_stale_link(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    # a long heartbeat timeout: B would keep the stale link for a minute on its own
    a = net.start("A", net.link("A", "B", heartbeat_interval=1.0, heartbeat_timeout=60.0))
    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    got = Collector()
    client_factory(b.endpoint).subscribe("RE.>", got)
    assert wait_until(lambda: has_route(a, "RE.>", "B"), WAIT), routes(a)
    old_incarnation = a.incarnation

    # A vanishes without a goodbye, as a crashed process would
    a.call(lambda node: setattr(node.links, "goodbye", lambda now: None))
    a.stop()
    assert up_links(b) == {("ab", "A")}  # B still believes in the old link

    a = net.restart("A")
    assert a.incarnation > old_incarnation
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    assert wait_until(lambda: counters(b)["links_down"] == 1, WAIT), counters(b)
    assert len(links_of(b)) == 1  # exactly one link from A: the new one
    assert counters(b)["links_up"] == 2
    assert wait_until(lambda: has_route(a, "RE.>", "B"), WAIT), routes(a)
    pump(client_factory(a.endpoint), "RE.X", N, got, end="RE.END")
    assert_exact(got, "RE.X", range(N), "RE.END")
    assert link_named(b, "ab")["msgs_in"] == N + 1
    assert {m.id.incarnation for m in got.messages} == {a.incarnation}


def test_a_node_restarted_on_a_fresh_data_dir_is_not_taken_for_its_previous_life(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
) -> None:
    # the embedded default (no data_dir: a temporary directory) and a container without a
    # volume both restart a named node with no stored incarnation: its new messages must
    # not be dropped as duplicates of its previous life's, which A's dedupe still holds
    a = broker_factory(broker_id="A")
    got = Collector()
    client_factory(a.endpoint).subscribe("FRESH.>", got)

    def start_b() -> Broker:
        return broker_factory(
            broker_id="B", data_dir=None, links=(LinkConfig(name="ba", uri=a.endpoint),)
        )

    b = start_b()
    assert wait_until(lambda: has_route(b, "FRESH.>", "A"), WAIT), routes(b)
    pump(client_factory(b.endpoint), "FRESH.X", N, got, end="FRESH.END")
    assert_exact(got, "FRESH.X", range(N), "FRESH.END")
    old_incarnation = b.incarnation
    b.stop()
    got.clear()

    b = start_b()
    assert b.incarnation > old_incarnation
    assert wait_until(lambda: has_route(b, "FRESH.>", "A"), WAIT), routes(b)
    pump(client_factory(b.endpoint), "FRESH.X", 100, got, end="FRESH.END", start=1000)
    assert_exact(got, "FRESH.X", range(1000, 1100), "FRESH.END")
    assert counters(a)["duplicates"] == 0


# -- 14. heartbeat timeout ------------------------------------------------------------------------


@pytest.mark.slow
def test_heartbeat_timeout_marks_a_killed_peer_down(
    net: Net,
    procs: Any,
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    port = net.port("P")
    peer = procs.zbroker(
        "start", "--port", str(port), "--data-dir", str(tmp_path / "data-P"), "--id", "P",
        "--log-level", "warning", "--no-discovery",
    )  # fmt: skip
    wait_ready(endpoint(port), WAIT, peer)
    a = net.start("A", net.link("A", "P"))
    wait_links(wait_until, {a: {("ap", "P")}})
    client = client_factory(endpoint(port))
    client.subscribe("HB.>", Collector())
    assert wait_until(lambda: has_route(a, "HB.>", "P", hops=1), WAIT), routes(a)
    client.close()  # (its sockets would only wait for the dead node)

    t0 = time.monotonic()
    peer.send_signal(signal.SIGKILL)  # no goodbye: only missing heartbeats tell
    assert wait_until(lambda: up_links(a) == set(), FAST_LINK["heartbeat_timeout"] + 5.0)
    elapsed = time.monotonic() - t0
    assert elapsed <= FAST_LINK["heartbeat_timeout"] + 1.0, elapsed
    assert routes(a) == []
    ln = link_named(a, "ap")
    assert "heartbeat" in (ln["last_error"] or ""), ln
    assert counters(a)["links_down"] == 1
    assert peer.wait(5.0) == -signal.SIGKILL


@pytest.mark.slow
def test_heartbeat_timeout_drops_the_link_of_a_killed_dialer(
    net: Net,
    procs: Any,
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """The acceptor side: the dialer's heartbeat settings travelled in its handshake."""
    a = net.start("A")
    port = net.port("P")
    config = tmp_path / "p.toml"
    config.write_text(
        f'[node]\nid = "P"\nhost = "{HOST}"\nport = {port}\n'
        f'data_dir = "{tmp_path / "data-P"}"\nlog_level = "warning"\n'
        f'[[link]]\nname = "pa"\nuri = "{a.endpoint}"\n'
        "heartbeat_interval = 0.2\nheartbeat_timeout = 1.0\n"
    )
    peer = procs.zbroker("start", "--config", str(config), "--no-discovery")
    wait_ready(endpoint(port), WAIT, peer)
    wait_links(wait_until, {a: {("pa", "P")}})
    client = client_factory(endpoint(port))
    client.subscribe("HBA.>", Collector())
    assert wait_until(lambda: has_route(a, "HBA.>", "P", hops=1), WAIT), routes(a)
    client.close()

    t0 = time.monotonic()
    peer.send_signal(signal.SIGKILL)
    assert wait_until(lambda: links_of(a) == [], FAST_LINK["heartbeat_timeout"] + 5.0), links_of(a)
    elapsed = time.monotonic() - t0
    assert elapsed <= FAST_LINK["heartbeat_timeout"] + 1.0, elapsed
    assert routes(a) == []
    assert counters(a)["links_down"] == 1
    assert peer.wait(5.0) == -signal.SIGKILL
