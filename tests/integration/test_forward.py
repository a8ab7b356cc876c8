"""Store-and-forward of persistent messages across links, with in-thread nodes.

Chain A - B - C (B dials A, C dials B), a durable subscription on C, persistent messages
published on A. Each test asserts exact counts: every message in C's durable queue once,
in publish order, and the link queues empty at the end.

* the steady state: messages cross both links under link sequences and are acknowledged;
* a node in the middle stopped and started again (same data directory and port): A keeps
  routing toward it (sticky route, kept while the link is down) and queues; B, restarted,
  routes toward C from its stored sticky routes before C's link is back;
* the last node stopped and started again: B queues for it, then resumes;
* non-persistent messages are not queued (at-most-once, as before);
* deleting the durable withdraws the sticky interest;
* sticky routes over a link down longer than ``sticky_ttl`` expire, and the messages queued
  for it are dropped, counted.

The chain is :mod:`.forward_chain`. Full link queues (``overflow = "reject-new"``) are
in :mod:`.test_forward_limits`; the fault tests with real ``zbroker start`` processes and
SIGKILL in :mod:`.test_forward_faults`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from zbroker import Broker
from zbroker.features.forward.feature import ROUTE_SETTLE

from .durables import WAIT, durable_of, numbers
from .forward_chain import (
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    c_away,
    chain,
    durable_payloads,
    held,
    links_up,
    publish,
    routes_to,
    setup_durable,
    start,
)

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.status_text import format_status
else:
    from zbroker.cli.status_text import format_status


def test_persistent_messages_cross_the_chain_and_queues_drain(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    nodes = chain(broker_factory, free_port, tmp_path)
    setup_durable(nodes, client_factory, wait_until)
    pub = client_factory(nodes["A"].endpoint)
    n = 300
    publish(pub, numbers(n))
    c = nodes["C"]
    assert wait_until(lambda: len(durable_payloads(c, "saf")) >= n, WAIT)
    assert durable_payloads(c, "saf") == numbers(n)
    assert wait_until(lambda: held(nodes["A"]) == 0 and held(nodes["B"]) == 0, WAIT)
    fa = nodes["A"].status()["forward"]
    fb = nodes["B"].status()["forward"]
    assert fa["queued"] == n and fb["queued"] == n
    assert fb["duplicates"] == 0 and c.status()["forward"]["duplicates"] == 0
    # non-persistent messages keep the in-memory path: nothing queued for them
    for p in numbers(10, 1000):
        pub.publish("SAF.X", p)
    assert wait_until(lambda: len(durable_payloads(c, "saf")) == n + 10, WAIT)
    assert nodes["A"].status()["forward"]["queued"] == n


def test_middle_node_restart_resumes_from_the_stored_queues(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    nodes = chain(broker_factory, free_port, tmp_path)
    a, b, c, ports = nodes["A"], nodes["B"], nodes["C"], nodes["ports"]
    setup_durable(nodes, client_factory, wait_until)
    pub = client_factory(a.endpoint)
    publish(pub, numbers(50))
    assert wait_until(lambda: held(a) == 0, WAIT)  # so that the count below is exact
    b.stop()
    assert wait_until(lambda: links_up(a, 0), WAIT)
    # the sticky route stays (on a ghost of the down link): A queues for it
    route = routes_to(a, "SAF.>", "C")
    assert route and route[0].get("link_down") is True, route
    publish(pub, numbers(100, 50))
    assert held(a) == 100
    b2 = start(broker_factory, "B", ports, tmp_path)
    assert wait_until(lambda: len(durable_payloads(c, "saf")) >= 150, WAIT)
    assert durable_payloads(c, "saf") == numbers(150)
    assert wait_until(lambda: held(a) == 0 and held(b2) == 0, WAIT)
    publish(pub, numbers(10, 150))
    assert wait_until(lambda: len(durable_payloads(c, "saf")) >= 160, WAIT)
    assert durable_payloads(c, "saf") == numbers(160)


def test_middle_node_restart_with_the_last_node_away(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """B restarts while C is away: B's routes toward C come from its store (no advert
    from C can arrive), so what A resends is queued at B for C, not lost."""
    nodes = chain(broker_factory, free_port, tmp_path)
    a, b, c, ports = nodes["A"], nodes["B"], nodes["C"], nodes["ports"]
    setup_durable(nodes, client_factory, wait_until)
    pub = client_factory(a.endpoint)
    publish(pub, numbers(20))
    assert wait_until(lambda: len(durable_payloads(c, "saf")) == 20, WAIT)
    c.stop()
    b.stop()
    publish(pub, numbers(30, 20))
    b2 = start(broker_factory, "B", ports, tmp_path)
    assert wait_until(lambda: held(a) == 0 and held(b2) == 30, WAIT), (
        a.status()["forward"],
        b2.status()["forward"],
    )
    c2 = start(broker_factory, "C", ports, tmp_path)
    assert wait_until(lambda: len(durable_payloads(c2, "saf")) >= 50, WAIT)
    assert durable_payloads(c2, "saf") == numbers(50)
    assert wait_until(lambda: held(b2) == 0, WAIT)


def test_last_node_restart_is_queued_for_and_resumed(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    nodes = chain(broker_factory, free_port, tmp_path)
    a, b, c, ports = nodes["A"], nodes["B"], nodes["C"], nodes["ports"]
    setup_durable(nodes, client_factory, wait_until)
    pub = client_factory(a.endpoint)
    publish(pub, numbers(40))
    assert wait_until(lambda: len(durable_payloads(c, "saf")) == 40, WAIT)
    c.stop()
    assert wait_until(lambda: links_up(b, 1), WAIT)
    assert routes_to(a, "SAF.>", "C"), "A lost the sticky route"
    publish(pub, numbers(60, 40))
    assert wait_until(lambda: held(b) == 60, WAIT), b.status()["forward"]
    c2 = start(broker_factory, "C", ports, tmp_path)
    assert wait_until(lambda: len(durable_payloads(c2, "saf")) >= 100, WAIT)
    assert durable_payloads(c2, "saf") == numbers(100)
    assert wait_until(lambda: held(b) == 0, WAIT)
    assert durable_of(c2, "saf") is not None


def test_a_persistent_message_with_no_route_left_is_counted_not_silent(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """A queues for B while B is down; B comes back without the route toward C (its
    stored sticky routes erased: as if the durable had been deleted meanwhile) and C stays
    away. What A resends waits while B's routes settle (``ROUTE_SETTLE`` after a link came
    up: A resends it), then is taken with nowhere to go: acknowledged (A's queue drains,
    nothing is stuck) and each one counted as ``persistent_unrouted``, logged."""
    a, b2, _ = _b_back_without_its_route(
        broker_factory, client_factory, free_port, wait_until, tmp_path, c_away=True
    )
    assert wait_until(lambda: held(a) == 0, WAIT + ROUTE_SETTLE), a.status()["forward"]
    assert b2.status()["counters"]["dropped"].get("persistent_unrouted") == 6
    assert b2.status()["forward"]["route_waits"] >= 1
    assert held(b2) == 0


def test_a_resend_waits_for_the_routes_of_a_link_just_up(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """B comes back without its stored route toward C while C is up: A resends as soon
    as B's link to it is up, before C's link and advert are back at B. B leaves those
    entries to A's resend until the route is there: all 6 reach C's durable, none is
    dropped. (A host met this after a restart: the subscriber's node advertises toward
    hosts only, and its first table to the host came before it knew it was one.)"""
    a, b2, c = _b_back_without_its_route(
        broker_factory, client_factory, free_port, wait_until, tmp_path, c_away=False
    )
    assert wait_until(lambda: len(durable_payloads(c, "saf")) >= 6, WAIT + ROUTE_SETTLE)
    assert durable_payloads(c, "saf") == numbers(6)
    assert wait_until(lambda: held(a) == 0 and held(b2) == 0, WAIT)
    assert "persistent_unrouted" not in b2.status()["counters"]["dropped"]


def _b_back_without_its_route(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
    *,
    c_away: bool,
) -> tuple[Broker, Broker, Broker]:
    """The chain with C's durable; B stopped (and C, if ``c_away``) while A queues 6
    persistent messages for it; B started again with its stored routes toward C erased.
    Returns (A, the new B, C)."""
    nodes = chain(broker_factory, free_port, tmp_path)
    a, b, c, ports = nodes["A"], nodes["B"], nodes["C"], nodes["ports"]
    setup_durable(nodes, client_factory, wait_until)
    if c_away:
        c.stop()
    b.stop()
    publish(client_factory(a.endpoint), numbers(6))
    assert held(a) == 6
    with sqlite3.connect(tmp_path / "B" / "store.sqlite3") as db:
        assert db.execute("UPDATE fwd_queues SET meta=NULL WHERE peer='C'").rowcount == 1
    db.close()
    return a, start(broker_factory, "B", ports, tmp_path), c


def test_deleting_the_durable_withdraws_the_sticky_route(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    nodes = chain(broker_factory, free_port, tmp_path)
    a = nodes["A"]
    sub = setup_durable(nodes, client_factory, wait_until)
    sub.delete_durable("saf")
    assert wait_until(lambda: not routes_to(a, "SAF.>", "C"), WAIT)


def test_sticky_routes_expire_and_their_queue_is_dropped_counted(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    nodes = c_away(broker_factory, client_factory, free_port, wait_until, tmp_path, sticky_ttl=2.0)
    a, b = nodes["A"], nodes["B"]
    pub = client_factory(a.endpoint)
    publish(pub, numbers(5))
    assert wait_until(lambda: held(b) == 5, WAIT)
    text = format_status(b.status())
    assert "link queue" in text and "C/cb" in text
    # after sticky_ttl the route is withdrawn everywhere and the 5 queued are dropped
    assert wait_until(lambda: not routes_to(a, "SAF.>", "C"), WAIT)
    dropped = b.status()["counters"]["dropped"]
    assert dropped["sticky_route_expired"] == 1
    assert dropped["forward_expired"] == 5
    assert held(b) == 0 and b.status()["forward"]["sticky_ghost_links"] == []


def test_non_persistent_messages_toward_a_down_link_are_counted_not_silent(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """C is away: B keeps the durable's sticky route on the down link. A persistent
    message waits in B's queue; a non-persistent one has nowhere to wait and is lost at B,
    counted as ``link_down`` (one per message), not dropped without a word."""
    nodes = chain(broker_factory, free_port, tmp_path)
    a, b, c = nodes["A"], nodes["B"], nodes["C"]
    setup_durable(nodes, client_factory, wait_until)
    c.stop()
    assert wait_until(lambda: links_up(b, 1), WAIT)
    assert routes_to(b, "SAF.>", "C"), "B lost the sticky route"
    before = b.status()["counters"]["dropped"].get("link_down", 0)
    pub = client_factory(a.endpoint)
    for p in numbers(7):
        pub.publish("SAF.X", p)
    publish(pub, [b"persistent"])  # after the 7 on the same path: they reached B before it
    assert wait_until(lambda: held(b) == 1, WAIT), b.status()["forward"]
    assert b.status()["counters"]["dropped"].get("link_down", 0) - before == 7
