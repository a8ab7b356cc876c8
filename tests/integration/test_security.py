"""Security (CurveZMQ): allowlisted links, IDs bound to keys, client permissions, no
plaintext on the wire. Nodes run in threads of the test process (each with its own ZAP
handler), everything on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
from zbroker.cli.format import format_status

from zbroker import Broker, BrokerUnreachable, Client, wire
from zbroker.config import LinkConfig
from zbroker.errors import ConfigError, PermissionDenied
from zbroker.security import generate_keys, load_key_pair

HOST = "127.0.0.1"


class Keys:
    """Key pairs of nodes a, b, c and clients alice, bob, mallory under one directory;
    the allowlist lists a and b only; the permissions know alice (who may also read the
    nodes' status, routes and peers) and bob only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for node in ("a", "b", "c"):
            generate_keys(root / node)
        for name in ("alice", "bob", "mallory"):
            generate_keys(root / "clients", name)
        self.allowlist = root / "allowlist"
        self.allowlist.mkdir()
        for node in ("a", "b"):
            shutil.copy(root / node / "node.key", self.allowlist / f"{node}.key")
        self.clients = root / "clients.toml"
        self.clients.write_text(
            '[alice]\nkey_file = "clients/alice.key"\npublish = ["X.>"]\n'
            'subscribe = ["X.>"]\nmonitor = true\n\n'
            '[bob]\nkey_file = "clients/bob.key"\npublish = ["Y.>"]\nsubscribe = ["Y.*"]\n'
        )

    def client(self, name: str) -> Path:
        return self.root / "clients" / f"{name}.key_secret"

    def node_public(self, node: str) -> str:
        return load_key_pair(self.root / node)[0].decode()

    def options(self, node: str, **extra: Any) -> dict[str, Any]:
        """Broker options of a secure node using ``node``'s key pair."""
        opts: dict[str, Any] = {
            "security": True,
            "key_dir": self.root / node,
            "allowlist": self.allowlist,
            "clients": self.clients,
        }
        opts.update(extra)
        return opts


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path / "keys")


def _link_state(broker: Broker, name: str) -> dict[str, Any]:
    return next(lk for lk in broker.status()["links"] if lk["name"] == name)


def _secure_pair(broker_factory: Callable[..., Broker], keys: Keys) -> tuple[Broker, Broker]:
    b = broker_factory(broker_id="b", **keys.options("b"))
    a = broker_factory(
        broker_id="a",
        **keys.options("a", links=(LinkConfig(name="to-b", uri=b.endpoint, peer="b"),)),
    )
    return a, b


def _wait_link_up(broker: Broker, name: str, wait_until: Callable[..., bool]) -> None:
    assert wait_until(lambda: _link_state(broker, name)["state"] == "up", 10), broker.status()[
        "links"
    ]


def _relay_exactly(
    a: Broker,
    b: Broker,
    keys: Keys,
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
    n: int,
) -> list[bytes]:
    """alice subscribes on b, publishes n messages on a; returns what arrived."""
    got: list[bytes] = []
    lock = threading.Lock()

    def on_msg(msg: Any) -> None:
        with lock:
            got.append(msg.payload)

    sub = client_factory(b.endpoint, keys=keys.client("alice"), server_key=keys.node_public("b"))
    pub = client_factory(a.endpoint, keys=keys.client("alice"), server_key=keys.node_public("a"))
    sub.subscribe("X.>", on_msg)
    # the subscription reaches a over the link before publishing starts
    assert wait_until(lambda: any(r["pattern"] == "X.>" for r in pub.routes()), 10)
    for i in range(n):
        pub.publish("X.T", b"m%d" % i)
    assert wait_until(lambda: len(got) >= n, 10)
    time.sleep(0.2)  # anything extra (a duplicate) would arrive now
    sub.close()
    pub.close()
    return got


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


def test_each_failed_handshake_is_counted_once(
    broker_factory: Callable[..., Broker], keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """One connection attempt each (reconnects pushed past the test): an unknown key is one
    auth failure (logged with the address); a plain socket and a CURVE socket using the
    wrong server key fail the handshake before authentication and are counted apart."""
    caplog.set_level(logging.WARNING, logger="zbroker.security")
    b = broker_factory(broker_id="b", **keys.options("b"))
    c_pub, c_sec = load_key_pair(keys.root / "c")
    ctx = zmq.Context()

    def attempt(**curve: bytes) -> zmq.Socket[bytes]:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RECONNECT_IVL, 60_000)  # one attempt within the test
        for name, value in curve.items():
            s.setsockopt(getattr(zmq, name), value)
        s.connect(b.endpoint)
        s.send(b"\x93\x01\x01\x80")  # a HELLO request: must never reach the node
        return s

    def settle(cond: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + 5
        while not cond(b.status()) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # a second count would show now
        return b.status()

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
    assert bob.hello["permissions"] == {"publish": ["Y.>"], "subscribe": ["Y.*"]}
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


# -- traffic on the loopback ------------------------------------------------------------------

MARKER = b"ZB-PLAINTEXT-MARKER-7f3a9c"


def _capture(ports: list[int], out: Path) -> subprocess.Popen[bytes]:
    expr = " or ".join(f"tcp port {p}" for p in ports)
    proc = subprocess.Popen(
        [
            "tcpdump",
            "-i",
            "lo",
            "--immediate-mode",
            "-U",
            "-s",
            "0",
            "-Z",
            "root",
            "-w",
            str(out),
            expr,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    deadline = time.monotonic() + 10
    err = b""
    while b"listening on" not in err:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(5)
            pytest.fail(f"tcpdump did not start: {err!r}")
        time.sleep(0.05)
        err += proc.stderr.read() or b""
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> str:
    """Stop tcpdump by its PID; return what it said (its packet counts)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert proc.stderr is not None
    return (proc.stderr.read() or b"").decode(errors="replace")


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="capturing on lo needs root")
def test_no_plaintext_on_the_loopback_with_curve(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    tmp_path: Path,
    wait_until: Callable[..., bool],
) -> None:
    """The same traffic (client publish, link, delivery, persistent publish) through a
    plain pair and a secure pair: the marker is on the wire in plain mode (so the capture
    works) and nowhere in the secure capture."""

    def run(secure: bool) -> bytes:
        tag = "s" if secure else "p"
        if secure:
            b = broker_factory(broker_id="b", **keys.options("b"))
            a = broker_factory(
                broker_id="a",
                **keys.options("a", links=(LinkConfig(name="to-b", uri=b.endpoint, peer="b"),)),
            )
        else:
            b = broker_factory(broker_id="b" + tag)
            a = broker_factory(
                broker_id="a" + tag, links=(LinkConfig(name="to-b", uri=b.endpoint),)
            )
        ports = [*a.ports.values(), *b.ports.values()]
        out = tmp_path / f"{tag}.pcap"
        proc = _capture(ports, out)
        try:
            creds: dict[str, Any] = {}
            if secure:
                creds = {"keys": keys.client("alice")}
            sub = client_factory(
                b.endpoint, server_key=keys.node_public("b") if secure else None, **creds
            )
            pub = client_factory(
                a.endpoint, server_key=keys.node_public("a") if secure else None, **creds
            )
            got: list[bytes] = []
            sub.subscribe("X.>", lambda m: got.append(m.payload))
            assert wait_until(lambda: any(r["pattern"] == "X.>" for r in pub.routes()), 10)
            for _ in range(20):
                pub.publish("X.SECRET", MARKER)
            pub.publish("X.SECRET", MARKER, confirm=True)
            assert wait_until(lambda: len(got) == 21, 10)
            time.sleep(1.0)  # tcpdump writes what it saw (immediate mode, -U: per packet)
        finally:
            said = _stop(proc)
        assert not said.startswith("0 packets captured"), said
        assert a.status()["counters"]["forwarded"] == 21
        return out.read_bytes()

    plain = run(False)
    secure = run(True)
    assert plain.count(MARKER) >= 21 * 2  # publish in, link, delivery out
    assert b"X.SECRET" in plain
    assert len(secure) > 5000  # the secure traffic was captured
    assert MARKER not in secure
    assert b"X.SECRET" not in secure


def test_cli_client_commands_with_keys(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    procs: Any,
    wait_until: Callable[..., bool],
) -> None:
    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = str(keys.root / "b" / "node.key")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    got: list[bytes] = []
    alice.subscribe("X.>", lambda m: got.append(m.payload))
    durable = alice.subscribe("X.D", lambda m: got.append(b"durable:" + m.payload), durable="d1")
    creds = [
        "--broker",
        b.endpoint,
        "--keys",
        str(keys.client("alice")),
        "--server-key",
        server_key,
    ]
    rc, _, err = procs.run("pub", "X.D", "hello", "-n", "3", *creds)
    assert rc == 0, err
    rc, _, err = procs.run("pub", "Y.A", "nope", *creds)
    assert rc == 1
    assert "permission denied: client:alice may not publish to 'Y.A'" in err
    env = procs.env(ZBROKER_KEYS=str(keys.client("alice")), ZBROKER_SERVER_KEY=server_key)
    rc, out, err = procs.run("status", "--broker", b.endpoint, env=env)
    assert rc == 0, err
    assert "auth failures" in out and "CURVE" in out
    assert wait_until(lambda: len(got) == 6, 10)
    time.sleep(0.2)
    assert sorted(got) == [b"durable:hello"] * 3 + [b"hello"] * 3
    durable.unsubscribe()
    rc, _, err = procs.run("pub", "X.D", "plain", "--broker", b.endpoint, "--timeout", "1")
    assert rc == 1  # a plain client gets no answer from a secure node
    assert b.status()["counters"]["received"] == 3


def test_secure_nodes_started_from_the_command_line_link(
    keys: Keys, procs: Any, free_port: Callable[[], int], wait_until: Callable[..., bool]
) -> None:
    """`zbroker start --secure` with the flags of the README's third step."""
    pb, pa = free_port(), free_port()
    common = ["--secure", "--allowlist", str(keys.allowlist), "--clients", str(keys.clients)]
    procs.zbroker(
        "start", "--id", "b", "--port", str(pb), "--data-dir", str(keys.root / "b"), *common
    )
    procs.zbroker(
        "start",
        "--id",
        "a",
        "--port",
        str(pa),
        "--data-dir",
        str(keys.root / "a"),
        "--peer",
        f"b@tcp://{HOST}:{pb}",
        *common,
    )

    def status_of(port: int, node: str) -> dict[str, Any] | None:
        try:
            with Client(
                f"tcp://{HOST}:{port}",
                keys=keys.client("alice"),
                server_key=keys.node_public(node),
                timeout=1,
            ) as c:
                return c.status()
        except BrokerUnreachable:
            return None

    def linked() -> bool:
        st = status_of(pa, "a")
        return st is not None and [(lk["peer"], lk["state"]) for lk in st["links"]] == [("b", "up")]

    assert wait_until(linked, 30, 0.2)
    st = status_of(pb, "b")
    assert st is not None
    assert st["security"]["auth_failures"] == 0
    assert st["security"]["allowlisted_nodes"] == ["a", "b"]


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
    push = zmq.Context.instance().socket(zmq.PUSH)
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
