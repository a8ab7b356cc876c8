"""Security (CurveZMQ): allowlisted links, IDs bound to keys, failed handshakes counted
once, client permissions on subscribe and publish, unknown keys, bad configurations. The
wire and the command line: :mod:`.test_security_cli`; permissions on batches, staged
writes, removals and the node's own view: :mod:`.test_security_permissions`; the shared
keys and nodes: :mod:`.secure_nodes`."""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import zmq

from tests.integration.secure_nodes import (
    Keys,
    _link_state,
    _relay_exactly,
    _secure_pair,
    _wait_link_up,
)
from tests.integration.secure_nodes import keys as keys  # (the fixture)
from zbroker import Broker, BrokerUnreachable, Client
from zbroker.config import LinkConfig
from zbroker.errors import ConfigError, PermissionDenied
from zbroker.security import load_key_pair

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.status_text import format_status
else:
    from zbroker.cli.status_text import format_status


def test_allowlisted_nodes_link_and_clients_get_every_message(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    a, b = _secure_pair(broker_factory, keys)
    _wait_link_up(a, "to-b", wait_until)
    got = _relay_exactly(a, b, keys, client_factory, wait_until, 50)
    assert got == [b"m%d" % i for i in range(50)]
    st = b.status()
    assert st["security"]["enabled"] is True
    assert st["security"]["auth_failures"] == 0
    assert st["security"]["refused"] == {}
    assert st["counters"]["handshakes_refused"] == 0


def test_node_without_allowlisted_key_cannot_link_and_existing_link_is_unaffected(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = _secure_pair(broker_factory, keys)
    _wait_link_up(a, "to-b", wait_until)
    # c knows b's key (b is in the allowlist c uses) but b does not know c's
    caplog.set_level(logging.WARNING, logger="zbroker.security")
    c = broker_factory(
        broker_id="c",
        **keys.options("c", links=(LinkConfig(name="c-to-b", uri=b.endpoint, peer="b"),)),
    )
    assert wait_until(lambda: b.status()["security"]["auth_failures"] >= 2, 10)
    assert _link_state(c, "c-to-b")["state"] != "up"
    assert [lk["peer"] for lk in b.status()["links"]] == ["a"]
    assert any(
        "authentication failed from 127.0.0.1" in r.getMessage() and "unknown key" in r.getMessage()
        for r in caplog.records
    )
    # the existing link never noticed: still its first life, and it carries every message
    got = _relay_exactly(a, b, keys, client_factory, wait_until, 30)
    assert got == [b"m%d" % i for i in range(30)]
    link = _link_state(a, "to-b")
    assert link["state"] == "up"
    assert a.status()["counters"]["links_down"] == 0
    assert b.status()["counters"]["links_down"] == 0
    assert b.status()["counters"]["links_up"] == 1


def _attempt(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, **curve: bytes
) -> zmq.Socket[bytes]:
    """One connection attempt to ``endpoint`` (CURVE options by name, if any) that sends a
    HELLO request, which must never reach the node."""
    s: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RECONNECT_IVL, 60_000)  # one attempt within the test
    for name, value in curve.items():
        s.setsockopt(getattr(zmq, name), value)
    s.connect(endpoint)
    s.send(b"\x93\x01\x01\x80")  # a HELLO request: must never reach the node
    return s


def _settle(b: Broker, cond: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The node's status once ``cond`` holds of it (5 s at most) and a moment more."""
    deadline = time.monotonic() + 5
    while not cond(b.status()) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # a second count would show now
    return b.status()


def test_each_failed_handshake_is_counted_once(
    broker_factory: Callable[..., Broker], keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """One connection attempt each (reconnects pushed past the test): an unknown key is one
    auth failure (logged with the address); a plain socket and a CURVE socket using the
    wrong server key fail the handshake before authentication and are counted apart."""
    caplog.set_level(logging.WARNING, logger="zbroker.security")
    b = broker_factory(broker_id="b", **keys.options("b"))
    c_pub, c_sec = load_key_pair(keys.root / "c")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    attempt = partial(_attempt, ctx, b.endpoint)
    settle = partial(_settle, b)
    socks = []
    try:
        server = keys.node_public("b").encode()
        socks.append(attempt(CURVE_SERVERKEY=server, CURVE_PUBLICKEY=c_pub, CURVE_SECRETKEY=c_sec))
        st = settle(lambda st: st["security"]["auth_failures"] >= 1)
        assert st["security"]["auth_failures"] == 1
        assert st["counters"]["auth_failures"] == 1
        assert st["security"]["handshake_failures"] == {}
        assert [
            r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()
        ] == [
            f"authentication failed from 127.0.0.1 (domain zbroker): unknown key {c_pub.decode()}"
        ]
        socks.append(attempt())  # plain
        socks.append(attempt(CURVE_SERVERKEY=c_pub, CURVE_PUBLICKEY=c_pub, CURVE_SECRETKEY=c_sec))
        st = settle(lambda st: sum(st["security"]["handshake_failures"].values()) >= 2)
        failures = st["security"]["handshake_failures"]
        assert sum(failures.values()) == 2, failures
        assert failures["CURVE handshake failed (wrong server key?)"] == 1
        # the plain socket: a mechanism mismatch, or (timing) a broken-off handshake
        assert set(failures) - {"CURVE handshake failed (wrong server key?)"} <= {
            "not CURVE (a plain client or node?)",
            "handshake broke off (not CURVE, or the peer left)",
        }
        assert st["security"]["auth_failures"] == 1
        assert st["counters"]["bad_input"] == 0
        assert st["counters"]["received"] == 0
        assert not any(s.poll(50) for s in socks)  # nobody got an answer
        # `zbroker status` shows them too, one line per reason, with the exact counts
        text = format_status(st)
        assert re.search(r"^auth failures\s+1$", text, re.M), text
        shown = re.findall(r"^handshake failed: (.+?)\s+(\d+)$", text, re.M)
        assert {reason: int(n) for reason, n in shown} == failures, text
    finally:
        for s in socks:
            s.close()
        ctx.term()


def test_peer_claiming_another_nodes_id_is_refused(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    # c's key is allowlisted (as c); c then presents itself as a, with its own key
    shutil.copy(keys.root / "c" / "node.key", keys.allowlist / "c.key")
    a, b = _secure_pair(broker_factory, keys)
    _wait_link_up(a, "to-b", wait_until)
    a.stop()
    assert wait_until(lambda: b.status()["links"] == [], 10)
    impostor = broker_factory(
        broker_id="a",
        **keys.options("c", links=(LinkConfig(name="to-b", uri=b.endpoint, peer="b"),)),
    )
    assert wait_until(lambda: _link_state(impostor, "to-b")["state"] == "refused", 10), _link_state(
        impostor, "to-b"
    )
    assert "authenticated as node:c, not as node:a" in _link_state(impostor, "to-b")["last_error"]
    st = b.status()
    assert st["security"]["refused"] == {"link": 1}
    assert st["counters"]["handshakes_refused"] == 1
    assert st["security"]["auth_failures"] == 0  # c's key itself is known: not an auth failure
    assert not any(lk["peer"] == "a" and lk["state"] == "up" for lk in st["links"])


def test_client_without_permission_cannot_subscribe_or_publish(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = keys.node_public("b")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    bob = client_factory(b.endpoint, keys=keys.client("bob"), server_key=server_key)
    perms = {"publish": ["Y.>"], "subscribe": ["Y.*"], "monitor": False}
    assert bob.hello["permissions"] == perms
    alice_got: list[bytes] = []
    bob_got: list[bytes] = []
    alice.subscribe("X.>", lambda m: alice_got.append(m.payload))

    # the client library refuses with the node's reason
    with pytest.raises(PermissionDenied, match=r"client:bob may not subscribe to 'X\.>'"):
        bob.subscribe("X.>", lambda m: bob_got.append(m.payload))
    with pytest.raises(PermissionDenied, match=r"client:bob may not subscribe to 'Y\.>'"):
        bob.subscribe("Y.>", lambda m: bob_got.append(m.payload))  # wider than Y.*
    with pytest.raises(PermissionDenied, match=r"client:bob may not publish to 'X\.T'"):
        bob.publish("X.T", b"forged")

    # a client that skips the check is refused by the node itself
    bob._credentials.check = lambda hello, kind, what: None  # type: ignore[method-assign]
    with pytest.raises(PermissionDenied, match=r"client:bob may not subscribe to 'X\.>'"):
        bob.subscribe("X.>", lambda m: bob_got.append(m.payload))  # the node answers
    for i in range(5):
        bob.publish("X.T", b"forged%d" % i)
    with pytest.raises(PermissionDenied, match=r"permission denied: client:bob may not publish"):
        bob.publish("X.T", b"forged-persistent", confirm=True)
    with pytest.raises(PermissionDenied, match=r"may not subscribe to 'X\.>'"):
        bob.subscribe("X.>", lambda m: None, durable="steal")
    with pytest.raises(PermissionDenied, match=r"may not subscribe to '>'"):
        bob.read(">")
    for i in range(10):
        alice.publish("X.T", b"ok%d" % i)
    assert wait_until(lambda: len(alice_got) >= 10, 10)
    time.sleep(0.3)
    assert alice_got == [b"ok%d" % i for i in range(10)]
    assert bob_got == []
    sec = b.status()["security"]
    # 5 PUSH publishes + 1 persistent; 1 XPUB subscribe + 1 durable open + 1 read
    assert sec["refused"] == {"publish": 6, "subscribe": 3}
    assert b.status()["counters"]["received"] == 10

    # what bob may do works
    bob.subscribe("Y.Z", lambda m: bob_got.append(m.payload))
    bob.publish("Y.Z", b"fine")
    assert wait_until(lambda: bob_got == [b"fine"], 10)


def test_unknown_client_key_is_refused(
    broker_factory: Callable[..., Broker], keys: Keys, wait_until: Callable[..., bool]
) -> None:
    b = broker_factory(broker_id="b", **keys.options("b"))
    with pytest.raises(BrokerUnreachable, match="check keys and server_key"):
        Client(b.endpoint, keys=keys.client("mallory"), server_key=keys.node_public("b"), timeout=1)
    assert b.status()["security"]["auth_failures"] >= 1
    # a plain client cannot talk to a secure node either, and is told what may be missing
    with pytest.raises(BrokerUnreachable, match="security on needs keys and server_key"):
        Client(b.endpoint, timeout=1)


def test_bad_security_config_fails_at_start(tmp_path: Path, keys: Keys) -> None:
    with pytest.raises(ConfigError, match="zbroker keygen"):
        Broker(port=0, data_dir=tmp_path / "nokeys", security=True).start()
    with pytest.raises(ConfigError, match=r"allowlist .*cannot read"):
        Broker(
            port=0,
            data_dir=tmp_path / "d1",
            security=True,
            key_dir=keys.root / "a",
            allowlist=tmp_path / "missing.txt",
        ).start()
    with pytest.raises(ConfigError, match="set peer"):
        Broker(
            port=0,
            data_dir=tmp_path / "d2",
            security=True,
            key_dir=keys.root / "a",
            links=(LinkConfig(name="x", uri="tcp://127.0.0.1:1"),),
        )
