"""Subscriptions on a secure node follow exactly the subscriptions that exist: one
connection's refused subscribe, or its close, never cancels another connection's
subscription; a pattern subscribed twice on one connection is held once and goes with
the connection; a refused subscribe is answered with an error.

"Raw" subscribers are plain CURVE SUB sockets with a client key: what a client that
skips its library (or a hostile one) can send. Nodes are in-thread Brokers on 127.0.0.1.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.errors import PermissionDenied
from zbroker.security import generate_keys, load_key_pair

GRACE = 0.5  # seconds for a close to reach the node (libzmq tells it within milliseconds)


class Keys:
    """Node b's key pair; alice may subscribe X.>, bob only B.>."""

    def __init__(self, root: Path) -> None:
        self.root = root
        generate_keys(root / "b")
        for name in ("alice", "bob"):
            generate_keys(root / "clients", name)
        self.clients = root / "clients.toml"
        self.clients.write_text(
            '[alice]\nkey_file = "clients/alice.key"\npublish = ["X.>", "B.>"]\n'
            'subscribe = ["X.>"]\n\n'
            '[bob]\nkey_file = "clients/bob.key"\npublish = ["B.>"]\nsubscribe = ["B.>"]\n'
        )

    def client(self, name: str) -> Path:
        return self.root / "clients" / f"{name}.key_secret"

    def public(self) -> str:
        return load_key_pair(self.root / "b")[0].decode()


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path / "keys")


@pytest.fixture
def node(broker_factory: Callable[..., Broker], keys: Keys) -> Broker:
    return broker_factory(
        broker_id="b", security=True, key_dir=keys.root / "b", clients=keys.clients
    )


@pytest.fixture
def zctx() -> Any:
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


_tokens = itertools.count(1)


class RawSub:
    """A CURVE SUB of client ``name`` on ``node``'s delivery socket, no client library."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], node: Broker, keys: Keys, name: str):
        pub, sec = load_key_pair(keys.client(name))
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.CURVE_SERVERKEY, keys.public().encode())
        self.sock.setsockopt(zmq.CURVE_PUBLICKEY, pub)
        self.sock.setsockopt(zmq.CURVE_SECRETKEY, sec)
        self.sock.connect(f"tcp://127.0.0.1:{node.ports['deliver']}")

    def subscribe(self, pattern: str) -> None:
        self.sock.subscribe(pattern.encode() + b"\0")

    def unsubscribe(self, pattern: str) -> None:
        self.sock.unsubscribe(pattern.encode() + b"\0")

    def sync(self) -> bytes:
        """Wait until the node has handled what this socket sent; the node's answer."""
        key = b"\x02" + uuid.uuid4().hex[:12].encode() + b".%d" % next(_tokens)
        self.sock.subscribe(key)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.sock.poll(100):
                frame = self.sock.recv()
                if frame.startswith(key):
                    self.sock.unsubscribe(key)
                    return frame
        raise AssertionError("the node did not answer the sync key")

    def close(self) -> None:
        self.sock.close(linger=0)


def _patterns(node: Broker) -> list[str]:
    return list(node.status()["subscriptions"]["patterns"])


def _refused(node: Broker) -> dict[str, int]:
    return dict(node.status()["security"]["refused"])


def _publish_and_collect(
    pub: Client, got: Collector, n: int, tag: bytes, wait_until: Callable[..., bool]
) -> list[bytes]:
    """Publish n X.T messages, then wait for them (and a little more for extras)."""
    start = len(got)
    for i in range(n):
        pub.publish("X.T", tag + b"%d" % i)
    wait_until(lambda: len(got) - start >= n, 10)
    time.sleep(0.2)
    return got.payloads()[start:]


def test_a_refused_subscribe_then_close_does_not_cancel_another_clients_subscription(
    node: Broker,
    keys: Keys,
    zctx: Any,
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    """Issue 18, item 1: bob's refused X.> and his close leave alice's X.> alone."""
    alice = client_factory(node.endpoint, keys=keys.client("alice"), server_key=keys.public())
    got = Collector()
    sub = alice.subscribe("X.>", got)
    bob = RawSub(zctx, node, keys, "bob")
    bob.subscribe("X.>")
    bob.sync()
    assert _refused(node) == {"subscribe": 1}
    bob.close()
    time.sleep(GRACE)
    assert _patterns(node) == ["X.>"]
    assert _publish_and_collect(alice, got, 20, b"a", wait_until) == [b"a%d" % i for i in range(20)]
    # alice's own unsubscribe is the one that ends the interest
    sub.unsubscribe()
    assert wait_until(lambda: _patterns(node) == [], 5), _patterns(node)


def test_a_refused_subscribe_never_holds_interest(
    node: Broker,
    keys: Keys,
    zctx: Any,
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    """Issue 18, item 2: once alice unsubscribes, bob's refused X.> (still open) holds
    nothing; bob closing after that changes nothing either."""
    bob = RawSub(zctx, node, keys, "bob")
    bob.subscribe("X.>")
    bob.sync()
    alice = client_factory(node.endpoint, keys=keys.client("alice"), server_key=keys.public())
    sub = alice.subscribe("X.>", Collector())
    assert _patterns(node) == ["X.>"]
    sub.unsubscribe()
    assert wait_until(lambda: _patterns(node) == [], 5), _patterns(node)
    bob.close()
    time.sleep(GRACE)
    assert _patterns(node) == []
    # and a new subscription of alice's works as the first one did
    got = Collector()
    alice.subscribe("X.>", got)
    assert _publish_and_collect(alice, got, 10, b"n", wait_until) == [b"n%d" % i for i in range(10)]


def test_a_pattern_subscribed_twice_on_one_connection_goes_with_the_connection(
    node: Broker, keys: Keys, zctx: Any, wait_until: Callable[..., bool]
) -> None:
    """Issue 18, item 2: subscribed twice, the connection holds it once; its close (or one
    unsubscribe: that is how libzmq filters too) ends it."""
    raw = RawSub(zctx, node, keys, "alice")
    raw.subscribe("X.>")
    raw.subscribe("X.>")
    raw.sync()
    assert _patterns(node) == ["X.>"]
    raw.close()
    assert wait_until(lambda: _patterns(node) == [], 5), _patterns(node)

    raw = RawSub(zctx, node, keys, "alice")
    raw.subscribe("X.A")
    raw.subscribe("X.A")
    raw.sync()
    # libzmq's SUB sends an unsubscribe once its own count is 0: unsubscribe twice
    raw.unsubscribe("X.A")
    raw.unsubscribe("X.A")
    raw.sync()
    assert _patterns(node) == []
    raw.close()


def test_interest_counts_connections_of_the_same_client(
    node: Broker,
    keys: Keys,
    zctx: Any,
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    """Two connections of alice hold X.>: either one leaving leaves the other's."""
    first = RawSub(zctx, node, keys, "alice")
    first.subscribe("X.>")
    first.sync()
    alice = client_factory(node.endpoint, keys=keys.client("alice"), server_key=keys.public())
    got = Collector()
    sub = alice.subscribe("X.>", got)
    first.close()
    time.sleep(GRACE)
    assert _patterns(node) == ["X.>"]
    assert _publish_and_collect(alice, got, 10, b"c", wait_until) == [b"c%d" % i for i in range(10)]
    second = RawSub(zctx, node, keys, "alice")
    second.subscribe("X.>")
    second.sync()
    sub.unsubscribe()
    time.sleep(GRACE)
    assert _patterns(node) == ["X.>"]
    second.close()
    assert wait_until(lambda: _patterns(node) == [], 5), _patterns(node)


def test_connections_that_come_and_go_leave_exactly_the_live_subscriptions(
    node: Broker, keys: Keys, zctx: Any, wait_until: Callable[..., bool]
) -> None:
    """Churn: many short connections (file descriptors are reused), some refused, some
    subscribing twice; what stays is what the live connections hold."""
    keep = RawSub(zctx, node, keys, "alice")
    keep.subscribe("X.keep")
    keep.sync()
    for i in range(40):
        hasty = RawSub(zctx, node, keys, "alice")  # gone before the node may have read it
        hasty.subscribe(f"X.hasty{i % 2}")
        hasty.close()
        raws = [RawSub(zctx, node, keys, "alice"), RawSub(zctx, node, keys, "bob")]
        raws[0].subscribe(f"X.{i % 3}")
        raws[0].subscribe(f"X.{i % 3}")
        raws[0].subscribe("X.keep")
        raws[1].subscribe("X.keep")  # refused
        raws[1].subscribe(f"B.{i % 2}")
        for r in raws:
            r.sync()
        for r in raws:
            r.close()
    assert wait_until(lambda: _patterns(node) == ["X.keep"], 5), _patterns(node)
    assert _refused(node) == {"subscribe": 40}
    keep.close()
    assert wait_until(lambda: _patterns(node) == [], 5), _patterns(node)


def test_a_refused_subscribe_is_answered_with_an_error(
    node: Broker,
    keys: Keys,
    zctx: Any,
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    """Carried over: a client whose library check is skipped is told by the node (at
    once, not after its timeout), and can go on subscribing what it may."""
    bob = client_factory(
        node.endpoint, keys=keys.client("bob"), server_key=keys.public(), timeout=5.0
    )
    bob._credentials.check = lambda hello, kind, what: None  # type: ignore[method-assign]
    for _ in range(2):  # the refusal is undone in the client: a second try is refused too
        started = time.monotonic()
        with pytest.raises(PermissionDenied, match=r"client:bob may not subscribe to 'X\.>'"):
            bob.subscribe("X.>", lambda m: None)
        assert time.monotonic() - started < 2.0
    got = Collector()
    bob.subscribe("B.1", got)
    bob.publish("B.1", b"fine")
    assert wait_until(lambda: got.payloads() == [b"fine"], 5)
    assert _refused(node) == {"subscribe": 2}
    assert _patterns(node) == ["B.1"]
    # a raw subscriber sees the refusal in the answer to its sync key
    raw = RawSub(zctx, node, keys, "bob")
    raw.subscribe("X.>")
    answer = raw.sync()
    assert b"client:bob may not subscribe to 'X.>'" in answer
    raw.subscribe("B.2")
    assert b"\0" not in raw.sync()  # accepted: the plain echo
    raw.close()
