"""A client says its protocol in HELLO (``client_protocol``): a node delivers relayed
messages as runs, which an older client library cannot read, so a node says (once per
client, in its log) when a client does not claim to read them; the reply carries the
node's own number. A real client draws no warning."""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgpack
import pytest
import zmq

from zbroker import Broker, Client, wire
from zbroker.const import CLIENT_PROTOCOL, CLIENT_READS_RUNS, PUBLISH_RUNS

HOST = "127.0.0.1"

WARNING = "cannot read the runs"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]


def test_a_client_too_old_for_delivery_runs_is_named_once(
    broker: Broker, client_factory: Callable[..., Client], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    client = client_factory(broker.endpoint)
    assert client.status()["broker_id"] == broker.broker_id  # (its session said HELLO)
    assert _warnings(caplog) == []
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    old = ctx.socket(zmq.DEALER)
    old.setsockopt(zmq.LINGER, 0)
    old.setsockopt(zmq.ROUTING_ID, b"old-client")
    try:
        old.connect(f"tcp://{HOST}:{broker.ports['control']}")
        for req_id in (1, 2):  # a HELLO as a library of the last release sent it: twice
            old.send(wire.encode_control(wire.HELLO, req_id, {}))
            assert old.poll(10_000), "no HELLO reply"
            op, got_id, body = msgpack.unpackb(old.recv())
            assert (op, got_id, body["client_protocol"]) == (wire.HELLO, req_id, CLIENT_PROTOCOL)
    finally:
        old.close()
    said = _warnings(caplog)
    assert len(said) == 1, said  # once per client
    assert "client_protocol None" in said[0] and "b'old-client'" in said[0], said[0]


def test_a_client_of_protocol_2_reads_everything_and_draws_no_warning(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """Protocol 3 only adds what a client may send (batches of publish runs); a client
    that says 2 reads every delivery frame, so the node has nothing to warn about, and
    its reply tells the client it may send runs."""
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    two = ctx.socket(zmq.DEALER)
    two.setsockopt(zmq.LINGER, 0)
    try:
        two.connect(f"tcp://{HOST}:{broker.ports['control']}")
        two.send(wire.encode_control(wire.HELLO, 1, {"client_protocol": CLIENT_READS_RUNS}))
        assert two.poll(10_000), "no HELLO reply"
        op, _, body = msgpack.unpackb(two.recv())
        assert (op, body["client_protocol"]) == (wire.HELLO, CLIENT_PROTOCOL)
        assert CLIENT_PROTOCOL >= PUBLISH_RUNS > CLIENT_READS_RUNS == 2
    finally:
        two.close()
    assert _warnings(caplog) == []
