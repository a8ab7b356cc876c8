"""Client permissions beyond one publish or subscribe: staged writes, publish batches
checked element by element (and batches of runs run by run), removing stateful topics
(a publish permission covering the whole pattern), and the node's status, routes and
peers, for a key with ``monitor = true`` only (:mod:`.secure_nodes`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import zmq

from tests.integration.secure_nodes import (
    Keys,
)
from tests.integration.secure_nodes import keys as keys  # (the fixture)
from zbroker import Broker, Client, wire
from zbroker.errors import PermissionDenied
from zbroker.security import load_key_pair


def test_staged_writes_are_checked_against_publish_permissions(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    from zbroker.writer import StagedWriter, commit_staged

    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = keys.node_public("b")
    bob = client_factory(b.endpoint, keys=keys.client("bob"), server_key=server_key)
    got: list[bytes] = []
    bob.subscribe("Y.*", lambda m: got.append(m.payload))
    w = StagedWriter(bob)
    w.add("Y.OK", b"fine")
    w.add("X.T", b"forged")  # not bob's to publish: the whole chunk is refused
    with pytest.raises(PermissionDenied, match=r"client:bob may not publish to 'X\.T'"):
        w.finish()
    allowed = StagedWriter(bob)
    allowed.add("Y.OK", b"fine")
    assert commit_staged(bob, [allowed.finish()]) == {"applied": 1, "duplicate": False}
    assert wait_until(lambda: got == [b"fine"], 10)
    st = b.status()
    assert st["security"]["refused"] == {"publish": 1}
    assert st["staging"]["tokens"] == 0 and st["counters"]["received"] == 1


def test_publish_batches_are_checked_element_by_element(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    """A publish batch frame ([publish frame, ...]) from a client that skips its library's
    check: the node drops exactly the elements whose topic the key may not publish to."""
    import msgpack

    from zbroker import wire

    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = keys.node_public("b")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    got: list[bytes] = []
    alice.subscribe("X.>", lambda m: got.append(m.payload))
    bob_public, bob_secret = load_key_pair(keys.client("bob"))
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        push.curve_publickey = bob_public
        push.curve_secretkey = bob_secret
        push.curve_serverkey = server_key.encode()
        push.connect(f"tcp://127.0.0.1:{b.ports['publish']}")
        frames = [
            wire.encode_publish("Y.Z", b"bob-ok-1", 0, None),
            wire.encode_publish("X.T", b"forged-1", 0, None),
            wire.encode_publish("Y.Z", b"bob-ok-2", 0, None),
            wire.encode_publish("X.T", b"forged-2", 0, None),
        ]
        push.send(msgpack.packb(frames))
        push.send(msgpack.packb(frames[1::2]))  # only forbidden ones: nothing passes
        assert wait_until(lambda: b.status()["counters"]["received"] == 2, 10)
        time.sleep(0.3)
        st = b.status()
        assert st["counters"]["received"] == 2  # the two Y.Z messages
        assert st["security"]["refused"] == {"publish": 4}
        assert got == []
    finally:
        push.close(linger=0)
        ctx.term()


def test_a_batch_of_runs_loses_only_the_runs_its_sender_may_not_publish(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    """A client that skips its own check sends bursts mixing a topic it may publish to and
    one it may not: they leave batched, as runs of one topic (client protocol 3). The node
    cuts out the refused runs, counting each of their messages, and takes the rest in
    order; whatever the batching, the counts are exact."""
    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = keys.node_public("b")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    bob = client_factory(b.endpoint, keys=keys.client("bob"), server_key=server_key)
    got: list[tuple[str, bytes]] = []
    alice.subscribe("X.>", lambda m: got.append((m.topic, m.payload)))  # (all alice may)
    bob.subscribe("Y.*", lambda m: got.append((m.topic, m.payload)))
    bob._credentials.check = lambda hello, kind, what: None  # type: ignore[method-assign]
    n = 600
    for i in range(n):  # runs of 3 on a topic, alternating: X.T refused, Y.Z allowed
        bob.publish("X.T" if i // 3 % 2 == 0 else "Y.Z", b"%d" % i)
    bob.publish("Y.Z", b"end")
    assert wait_until(lambda: ("Y.Z", b"end") in got, 10)
    time.sleep(0.3)
    assert got == [("Y.Z", b"%d" % i) for i in range(n) if i // 3 % 2 == 1] + [("Y.Z", b"end")]
    assert b.status()["security"]["refused"] == {"publish": n // 2}
    assert b.status()["counters"]["received"] == n // 2 + 1


def test_a_publish_batch_with_a_stray_element_is_still_checked(
    broker_factory: Callable[..., Broker], keys: Keys, wait_until: Callable[..., bool]
) -> None:
    """A publish batch whose elements are not all bins: the node takes its bin elements
    (the others count as bad_shape), so the permission filter checks every one of them.
    (Before, such a batch passed the filter unchecked: bob published where he may not.)"""
    b = broker_factory(broker_id="b", **keys.options("b"))
    public, secret = load_key_pair(keys.client("bob"))
    push: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.curve_publickey, push.curve_secretkey = public, secret
    push.curve_serverkey = keys.node_public("b").encode()
    try:
        push.connect(f"tcp://127.0.0.1:{b.ports['publish']}")
        secret_one = wire.encode_publish("X.secret", b"x", 0, None)
        allowed_one = wire.encode_publish("Y.ok", b"y", 0, None)
        push.send(msgpack.packb([secret_one, 0, allowed_one]))
        assert wait_until(lambda: b.status()["counters"]["received"] >= 1, 10)
        time.sleep(0.2)
        st = b.status()
        assert st["counters"]["received"] == 1  # Y.ok only
        assert st["security"]["refused"] == {"publish": 1}
        assert st["counters"]["dropped"]["bad_input.bad_shape"] == 1
    finally:
        push.close()


def test_removing_stateful_topics_needs_publish_permission_for_the_whole_pattern(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client], keys: Keys
) -> None:
    """A removal changes every stateful topic its pattern matches: a publish permission
    that covers the pattern is needed. (Before, the pattern was matched as if it were a
    topic, so ``S.*`` let bob remove ``S.>``, which takes ``S.X.Y`` he may not publish.)"""
    rules = {
        "alice": {"key_file": str(keys.root / "clients" / "alice.key"), "publish": [">"]},
        "bob": {"key_file": str(keys.root / "clients" / "bob.key"), "publish": ["S.*"]},
    }
    for rule in rules.values():
        rule["subscribe"] = [">"]
    b = broker_factory(broker_id="b", **keys.options("b", clients=rules))
    server_key = keys.node_public("b")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    bob = client_factory(b.endpoint, keys=keys.client("bob"), server_key=server_key)
    alice.set("S.X.Y", b"deep")
    alice.set("S.X", b"shallow")
    with pytest.raises(PermissionDenied, match=r"client:bob may not publish to 'S\.>'"):
        bob.remove("S.>")
    assert sorted(m.topic for m in alice.fetch("S.>")) == ["S.X", "S.X.Y"]
    assert b.status()["security"]["refused"] == {"publish": 1}
    assert bob.remove("S.*") == 1  # within S.*: allowed
    assert [m.topic for m in alice.fetch("S.>")] == ["S.X.Y"]


def test_only_a_client_with_monitor_may_read_the_nodes_status_routes_and_peers(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    procs: Any,
) -> None:
    """STATUS, ROUTES and PEERS name every subscription's pattern, link and route: far more
    than bob (Y.> and Y.* only) may see. Refused to him, counted, and said in his CLI; the
    node keeps serving him what he may do; alice (``monitor = true``) reads them."""
    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = keys.node_public("b")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    bob = client_factory(b.endpoint, keys=keys.client("bob"), server_key=server_key)
    alice.subscribe("X.secret", lambda m: None)
    for ask, what in ((bob.status, "status"), (bob.routes, "routes"), (bob.peers, "peers")):
        with pytest.raises(PermissionDenied, match=f"client:bob may not read '{what}'"):
            ask()
    assert b.status()["security"]["refused"] == {"read": 3}
    assert "X.secret" in alice.status()["subscriptions"]["patterns"]
    assert any(r["pattern"] == "X.secret" for r in alice.routes())
    assert alice.peers() == []
    got: list[bytes] = []
    bob.subscribe("Y.A", lambda m: got.append(m.payload))
    bob.publish("Y.A", b"still served")
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    assert got == [b"still served"]
    creds = ("--keys", str(keys.client("bob")), "--server-key", str(keys.root / "b" / "node.key"))
    rc, _, err = procs.run("status", "--broker", b.endpoint, *creds)
    assert rc == 1
    assert "permission denied: client:bob may not read 'status'" in err
    assert b.status()["security"]["refused"] == {"read": 4}
    rc, _, err = procs.run("queues", "--broker", b.endpoint, *creds)  # (it reads the status)
    assert rc == 1
    assert "may not read 'status' (zbroker queues reads the node's status)" in err, err
