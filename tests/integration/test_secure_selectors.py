"""Subscriptions with selectors on a secure node: permitted by their pattern (the
selector does not change what a key may see), refused like any subscription when the
pattern is not permitted, and filtered like on a plain node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
import zmq

from tests.helpers import Collector
from tests.integration.test_secure_subscriptions import Keys, RawSub
from zbroker import Broker, Client, wire
from zbroker.errors import PermissionDenied

WAIT = 20.0


def test_selectors_on_a_secure_node(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client], tmp_path: Path
) -> None:
    keys = Keys(tmp_path / "keys")
    node = broker_factory(
        broker_id="b", security=True, key_dir=keys.root / "b", clients=keys.clients
    )
    alice = client_factory(node.endpoint, keys=keys.client("alice"), server_key=keys.public())
    bob = client_factory(node.endpoint, keys=keys.client("bob"), server_key=keys.public())
    got = Collector()
    alice.subscribe("X.>", got, selector="qty > 2")
    with pytest.raises(PermissionDenied):
        bob.subscribe("X.>", Collector(), selector="qty > 2")
    for i in range(6):
        alice.publish("X.a", i, {"qty": i})
    alice.publish("X.a", b"end", {"qty": 99})
    assert got.wait_payload(b"end", WAIT)
    assert [m.payload for m in got.snapshot()] == [3, 4, 5, b"end"]
    # a client that skips its library's check: refused by the node, answered at the sync
    zctx = zmq.Context()
    try:
        raw = RawSub(zctx, node, keys, "bob")
        raw.sock.subscribe(b"X.>" + wire.SELECTOR_SEP.encode() + b"(qty > 2)\0")
        answer = msgpack.unpackb(raw.sync().partition(b"\0")[2])
        assert answer["refused"] == ["X.>\x01(qty > 2)"]
        assert "may not subscribe to 'X.>'" in answer["error"]
        raw.close()
    finally:
        zctx.destroy(linger=0)
