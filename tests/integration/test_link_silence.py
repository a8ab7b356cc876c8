"""A dead accepted link is declared down however busy the node's ROUTER is.

An accepted link lives on the node's ROUTER, shared with every client and every other
accepted link. Its silence is excused only while the ROUTER's last drain stopped on its
budget (frames left unread, maybe the link's own), and not past SILENT_GRACE heartbeat
timeouts: junk arriving all the time from another connection must not keep a peer that
went away alive, with its interest still routed to it.

Real nodes: D dials W through a :class:`~cutproxy.CutProxy`, which cuts the
link while both nodes stay up; a raw DEALER floods W's ROUTER with junk meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import zmq
from cutproxy import CutProxy

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig
from zbroker.const import SILENT_GRACE

WAIT = 20.0
#: how long after the cut the link must be down: the grace, and slack for a loaded machine
BOUND = SILENT_GRACE * FAST_LINK["heartbeat_timeout"] + 6.0

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def link_up(broker: Broker, name: str) -> bool:
    return any(ln["name"] == name and ln["state"] == "up" for ln in broker.status()["links"])


def routed(broker: Broker, topic: str) -> bool:
    """Does W route ``topic`` anywhere (here: only to D, through the link)?"""
    return bool(broker.call(lambda node: any(node.engine.route(topic, (), None))))


def dropped(broker: Broker) -> dict[str, int]:
    counted: dict[str, int] = broker.status()["counters"]["dropped"]
    return counted


@pytest.fixture
def junk() -> Iterator[Callable[[str], None]]:
    """``junk(endpoint)`` floods that ROUTER with frames that are not msgpack until the
    test ends (a thread, as fast as the socket takes them)."""
    ctx = zmq.Context[zmq.Socket[bytes]]()
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def flood(endpoint: str) -> None:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.connect(endpoint)
        try:
            while not stop.is_set():
                try:
                    sock.send(b"\xc1junk", zmq.NOBLOCK)
                except zmq.Again:
                    time.sleep(0.0005)
        finally:
            sock.close(0)

    def start(endpoint: str) -> None:
        t = threading.Thread(target=flood, args=(endpoint,), name="junk", daemon=True)
        threads.append(t)
        t.start()

    try:
        yield start
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        ctx.term()


def test_a_cut_link_goes_down_while_junk_floods_the_router(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    junk: Callable[[str], None],
) -> None:
    w = broker_factory(broker_id="w")
    proxy = CutProxy(int(w.endpoint.rsplit(":", 1)[1]))
    try:
        link = LinkConfig(name="dw", uri=f"tcp://127.0.0.1:{proxy.port}", **FAST_LINK)
        d = broker_factory(broker_id="d", links=(link,))
        assert wait_until(lambda: link_up(w, "dw"), WAIT)
        client_factory(d.endpoint).subscribe("g.>", Collector())
        assert wait_until(lambda: routed(w, "g.x"), WAIT)

        junk(w.endpoint)
        assert wait_until(lambda: dropped(w).get("bad_input.not_msgpack", 0) >= 1000, WAIT)
        proxy.cut()
        cut = time.monotonic()
        assert wait_until(lambda: not link_up(w, "dw"), BOUND)
        assert time.monotonic() - cut < BOUND
        assert not routed(w, "g.x")  # D's interest withdrawn with the link
        assert w.status()["counters"]["links_down"] == 1
        assert "internal_error" not in dropped(w)
    finally:
        proxy.close()
