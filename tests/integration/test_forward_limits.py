"""Store-and-forward with bounded link queues (``[forward] overflow = "reject-new"``, 5
messages per queue) on the chain A - B - C of :mod:`.forward_chain`: a full queue pushes
back to the publisher and loses nothing, also when a sender's store was wiped and its
queue starts a new epoch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from zbroker import Broker

from .durables import WAIT, numbers
from .forward_chain import (
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    b_links,
    c_away,
    durable_payloads,
    held,
    links_up,
    publish,
    routes_to,
    setup_durable,
    start,
)


def test_reject_new_link_queues_push_back_to_the_publisher_and_lose_nothing(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """``[forward] overflow = "reject-new"``, 5 messages per link queue, C away: B's queue
    toward C fills, B stops taking from A (no acknowledgement: A keeps them), A's queue
    fills, and A refuses the next persistent publish with a clear error. When C is back
    everything confirmed arrives, once, in order; nothing was dropped anywhere."""

    from zbroker import RequestError

    ports = {n: free_port() for n in "ABC"}
    bounded = {"forward_max_msgs": 5, "forward_overflow": "reject-new"}
    a = broker_factory(broker_id="A", port=ports["A"], data_dir=tmp_path / "A", **bounded)
    b = broker_factory(
        broker_id="B", port=ports["B"], data_dir=tmp_path / "B", links=b_links(ports), **bounded
    )
    c = start(broker_factory, "C", ports, tmp_path)
    nodes = {"A": a, "B": b, "C": c, "ports": ports}
    setup_durable(nodes, client_factory, wait_until)
    c.stop()
    assert wait_until(lambda: links_up(b, 1), WAIT)
    pub = client_factory(a.endpoint)
    publish(pub, numbers(10))  # 5 wait at B (toward C), 5 at A (toward B)
    assert wait_until(lambda: held(b) == 5 and held(a) == 5, WAIT), (
        a.status()["forward"],
        b.status()["forward"],
    )
    with pytest.raises(RequestError, match=r"store-and-forward queue of link .* is full"):
        pub.publish("SAF.X", b"refused", persistent=True, confirm=True)
    assert a.status()["counters"]["dropped"]["rejected_persistent"] == 1
    assert b.status()["counters"]["dropped"].get("forward_backpressure", 0) >= 1
    c2 = start(broker_factory, "C", ports, tmp_path)
    assert wait_until(lambda: len(durable_payloads(c2, "saf")) >= 10, WAIT)
    assert wait_until(lambda: held(a) == 0 and held(b) == 0, WAIT)
    publish(pub, [b"after"])  # room again
    assert wait_until(lambda: len(durable_payloads(c2, "saf")) == 11, WAIT)
    assert durable_payloads(c2, "saf") == [*numbers(10), b"after"]
    for node in (a, b):
        assert node.status()["forward"]["dropped_full"] == 0


def test_reject_new_holds_back_the_entries_of_a_sender_whose_store_was_wiped(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """As above, B's queue toward C full (C away); then A loses its store and starts again:
    its queue toward B has a new epoch, numbered from 1 again, while B's position for A
    is in the old epoch. B must hold A's new entries back too (its queue toward C is
    full), not take them and push its oldest confirmed entries out of that queue."""
    from zbroker import RequestError

    ports = {n: free_port() for n in "ABC"}
    bounded = {"forward_max_msgs": 5, "forward_overflow": "reject-new"}

    def start_a() -> Broker:
        return broker_factory(broker_id="A", port=ports["A"], data_dir=tmp_path / "A", **bounded)

    a = start_a()
    b = broker_factory(
        broker_id="B", port=ports["B"], data_dir=tmp_path / "B", links=b_links(ports), **bounded
    )
    c = start(broker_factory, "C", ports, tmp_path)
    setup_durable({"A": a, "B": b, "C": c, "ports": ports}, client_factory, wait_until)
    c.stop()
    assert wait_until(lambda: links_up(b, 1), WAIT)
    pub = client_factory(a.endpoint)
    publish(pub, numbers(5))  # they wait at B, toward C: its queue is full
    assert wait_until(lambda: held(b) == 5 and held(a) == 0, WAIT)
    pub.close()
    a.stop()
    for f in (tmp_path / "A").glob("store.sqlite3*"):
        f.unlink()  # A's store is lost (what it held: nothing)
    a = start_a()
    assert wait_until(lambda: links_up(a, 1) and links_up(b, 1), WAIT)
    assert wait_until(lambda: bool(routes_to(a, "SAF.>", "C")), WAIT)
    pub = client_factory(a.endpoint)
    confirmed = []
    for p in numbers(6, start=5):
        try:
            pub.publish("SAF.X", p, persistent=True, confirm=True)
        except RequestError:
            break
        confirmed.append(p)
    assert confirmed == numbers(5, start=5)  # A's own queue (5) took them, then refused
    assert wait_until(
        lambda: b.status()["counters"]["dropped"].get("forward_backpressure", 0) >= 1, WAIT
    )
    assert b.status()["forward"]["dropped_full"] == 0
    assert held(b) == 5 and held(a) == 5
    c2 = start(broker_factory, "C", ports, tmp_path)
    assert wait_until(lambda: len(durable_payloads(c2, "saf")) >= 10, WAIT)
    assert wait_until(lambda: held(a) == 0 and held(b) == 0, WAIT)
    assert durable_payloads(c2, "saf") == numbers(10)
    for node in (a, b):
        assert node.status()["forward"]["dropped_full"] == 0


def test_drop_oldest_counts_what_it_drops_as_a_drop(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """``[forward] overflow = "drop-oldest"`` (the default), 3 messages per link queue, C
    away: B keeps the newest 3 for C and drops 7. The drops are the node's own
    (``dropped.forward_overflow``, so the metric and DROPS advisories), not only the
    queue's; C, back, has the newest 3 and counts the 7 lost."""

    nodes = c_away(
        broker_factory, client_factory, free_port, wait_until, tmp_path, forward_max_msgs=3
    )
    a, b, ports = nodes["A"], nodes["B"], nodes["ports"]
    publish(client_factory(a.endpoint), numbers(10))
    assert wait_until(lambda: held(b) == 3 and held(a) == 0, WAIT), b.status()["forward"]
    assert b.status()["forward"]["dropped_full"] == 7
    assert b.status()["counters"]["dropped"].get("forward_overflow") == 7
    assert "forward_overflow" not in a.status()["counters"]["dropped"]
    c2 = start(broker_factory, "C", ports, tmp_path)
    assert wait_until(lambda: len(durable_payloads(c2, "saf")) >= 3, WAIT)
    assert wait_until(lambda: held(b) == 0, WAIT)
    assert durable_payloads(c2, "saf") == numbers(10)[7:]
    assert c2.status()["forward"]["lost"] == 7
