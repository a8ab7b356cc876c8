"""Selectors at the limits of their size, on a real node with real clients: a chain of 600
ORs works end to end, and one nested too deep is a bad selector like any other (the
client refuses it before sending; the node counts a raw one as bad input and goes on)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import zmq

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.errors import SelectorError
from zbroker.selectors import MAX_DEPTH

WAIT = 20.0
TOO_DEEP = "(" * (MAX_DEPTH + 1) + "qty > 1" + ")" * (MAX_DEPTH + 1)

ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def dropped(broker: Broker) -> dict[str, Any]:
    counted: dict[str, Any] = broker.status()["counters"]["dropped"]
    return counted


def test_a_chain_of_600_ors_selects_end_to_end(
    broker: Broker, client_factory: ClientFactory
) -> None:
    wanted = {7, 300, 599}
    text = "f OR " * 598 + "q IN (7, 300, 599)"  # f: a header no message has, UNKNOWN
    sub = client_factory(broker.endpoint)
    got = Collector()
    sub.subscribe("L.>", got, selector=text + " OR kind = 'end'")
    pub = client_factory(broker.endpoint)
    for i in range(600):
        pub.publish("L.x", i, {"q": i})
    pub.publish("L.x", "end", {"kind": "end"})
    assert got.wait_until(lambda ms: any(m.payload == "end" for m in ms), WAIT)
    assert [m.payload for m in got.snapshot()] == [*sorted(wanted), "end"]


def test_a_too_deep_selector_is_refused_at_subscribe(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(SelectorError, match=f"at most {MAX_DEPTH} levels of nesting"):
        client.subscribe("A.>", Collector(), selector=TOO_DEEP)


def test_a_raw_too_deep_selector_is_counted_as_a_bad_selector(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    ctx = zmq.Context[zmq.Socket[bytes]]()
    sock = ctx.socket(zmq.SUB)
    try:
        sock.connect(f"tcp://127.0.0.1:{broker.ports['deliver']}")
        sock.subscribe(b"A.>\x01" + ("a=1 OR " * 10 + TOO_DEEP).encode() + b"\0")
        assert wait_until(lambda: dropped(broker).get("bad_input.bad_selector", 0) == 1, WAIT)
    finally:
        sock.close(0)
        ctx.term()
    assert "internal_error" not in dropped(broker)
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("A.>", got, selector="qty > 1")
    client.publish("A.b", 1, {"qty": 2})
    assert got.wait_for(1, WAIT)
    assert [m.payload for m in got.snapshot()] == [1]
