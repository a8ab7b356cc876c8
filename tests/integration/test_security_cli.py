"""Security on the wire and from the command line: no plaintext on the loopback with CURVE
(captured with ``tcpdump``), the CLI's client commands with keys, and secure nodes started
by ``zbroker start`` linking (:mod:`.secure_nodes`; every process stopped by its PID)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.secure_nodes import (
    HOST,
    Keys,
)
from tests.integration.secure_nodes import keys as keys  # (the fixture)
from zbroker import Broker, BrokerUnreachable, Client
from zbroker.config import LinkConfig

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
