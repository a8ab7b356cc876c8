"""What the security tests (``test_security*.py``, the Spark connector's secure test) share:
key pairs of nodes and clients under one directory with an allowlist and client
permissions (:class:`Keys`, the ``keys`` fixture), a secure pair of nodes, and waiting for
a link. Nodes run in threads of the test process (each with its own ZAP handler),
everything on 127.0.0.1."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zbroker import Broker, Client
from zbroker.config import LinkConfig
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
