"""A real node takes batches of publish runs (client protocol 3) as the publishes they
hold: every good message once, in order, numbered in order; a malformed run or entry
counted by reason, the rest of its frame taken; the old forms still taken, in order with
runs. A client sends runs to such a node (its HELLO reply says ``client_protocol`` 3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import zmq

from tests.helpers import Collector
from zbroker import Broker, Client, wire
from zbroker.const import CLIENT_PROTOCOL, PUBLISH_RUNS

HOST = "127.0.0.1"
WAIT = 20.0


def test_a_batch_of_runs_is_taken_as_the_publishes_it_holds(
    broker: Broker, client_factory: Callable[..., Client], wait_until: Callable[..., bool]
) -> None:
    sub = client_factory(broker.endpoint)
    got = Collector()
    sub.subscribe("PR.>", got)
    ok = [b"ok", 0, None]
    runs: list[Any] = [
        ["PR.a", [[b"1", 0, None], [b"2", 0, {"k": "v"}]]],
        "junk",  # bad_shape
        ["PR.b", [[b"3", 0, None], [b"x"], [b"4", 7, None], [msgpack.packb(5), 1, None]]],
        ["PR..c", [ok, ok]],  # bad_topic, twice
        [5, []],  # bad_shape (a run without entries: its topic is not looked at)
        ["PR.a", [[b"6", 0, None]]],
    ]
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    try:
        push.connect(f"tcp://{HOST}:{broker.ports['publish']}")
        push.send(wire.encode_publish_runs(runs))
        push.send(wire.encode_publish("PR.a", b"7", 0, None))  # the old form, after it
        assert got.wait_for(6, WAIT)
        assert wait_until(lambda: broker.status()["counters"]["received"] >= 6, WAIT)
        assert not got.wait_for(7, 0.3)  # nothing more
    finally:
        push.close()
    msgs = got.messages
    assert [(m.topic, m.payload) for m in msgs] == [
        ("PR.a", b"1"), ("PR.a", b"2"), ("PR.b", b"3"), ("PR.b", 5), ("PR.a", b"6"),
        ("PR.a", b"7"),
    ]  # fmt: skip
    assert msgs[1].headers == {"k": "v"}
    first = msgs[0].id.seq
    assert [m.id.seq for m in msgs] == list(range(first, first + 6))  # numbered in order
    c = broker.status()["counters"]
    assert c["received"] == 6
    assert c["bad_input"] == 6
    bad = {k: v for k, v in c["dropped"].items() if k.startswith("bad_input.")}
    assert bad == {"bad_input.bad_shape": 3, "bad_input.bad_type": 1, "bad_input.bad_topic": 2}


def test_a_client_publishes_runs_to_a_node_that_reads_them(
    broker: Broker, client_factory: Callable[..., Client]
) -> None:
    """Through real clients: the node says client_protocol 3 in its HELLO reply, so a
    burst on three topics travels as batches of runs (the form is checked on a raw socket
    in tests/test_publisher_batches.py) and arrives whole, in order, headers and all."""
    assert CLIENT_PROTOCOL >= PUBLISH_RUNS
    pub = client_factory(broker.endpoint)
    assert pub.status()["broker_id"] == broker.broker_id  # connected (HELLO answered)
    sub = client_factory(broker.endpoint)
    got = Collector()
    sub.subscribe("PC.>", got)
    n = 5_000
    for i in range(n):
        pub.publish(f"PC.{i % 3}", b"%d" % i, {"i": i} if i % 100 == 0 else None)
    assert got.wait_for(n, WAIT)
    assert not got.wait_for(n + 1, 0.3)
    assert [m.payload for m in got.messages] == [b"%d" % i for i in range(n)]
    assert [m.topic for m in got.messages] == [f"PC.{i % 3}" for i in range(n)]
    assert [m.headers for m in got.messages if m.headers] == [{"i": i} for i in range(0, n, 100)]
    assert broker.status()["counters"]["bad_input"] == 0
