"""Reloading the allowlist and client permissions without a restart (issue 18, carried
over): the new rules apply at once to publishes, to subscriptions already held, to keys
and to links; a bad file changes nothing; ``zbroker start`` reloads on SIGHUP.

Nodes are in-thread Brokers on 127.0.0.1 (and ``zbroker start`` processes for SIGHUP).
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.secure_nodes import Keys, _link_state, _secure_pair, _wait_link_up
from zbroker import Broker, Client
from zbroker.config import LinkConfig
from zbroker.errors import BrokerUnreachable, ConfigError

HOST = "127.0.0.1"


@pytest.fixture
def keys(tmp_path: Any) -> Keys:
    return Keys(tmp_path / "keys")


def _write_clients(keys: Keys, alice_sub: str, bob: bool = True) -> None:
    text = (
        f'[alice]\nkey_file = "clients/alice.key"\npublish = ["X.>"]\nsubscribe = [{alice_sub}]\n'
        "monitor = true\n"  # (she reads the node's status, as in test_security's Keys)
    )
    if bob:
        text += '\n[bob]\nkey_file = "clients/bob.key"\npublish = ["Y.>"]\nsubscribe = ["Y.*"]\n'
    keys.clients.write_text(text)


def test_narrowed_permissions_end_a_held_subscription_at_once(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = keys.node_public("b")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    wide, narrow = Collector(), Collector()
    alice.subscribe("X.>", wide)
    alice.subscribe("X.A", narrow)
    for i in range(10):
        alice.publish("X.A", b"before%d" % i)
    assert wait_until(lambda: len(wide) == 10 and len(narrow) == 10, 10)

    _write_clients(keys, '"X.A"')  # alice may subscribe X.A only now
    result = b.reload_security()
    assert result["connections_ended"] == 1
    assert result["clients_removed"] == []
    # her connection comes back (libzmq reconnects) holding only what is still allowed
    assert wait_until(lambda: b.status()["subscriptions"]["patterns"] == ["X.A"], 10), b.status()[
        "subscriptions"
    ]
    for i in range(20):
        alice.publish("X.A", b"after%d" % i)
    assert wait_until(lambda: len(narrow) == 30, 10), len(narrow)
    time.sleep(0.3)
    assert wide.payloads() == [b"before%d" % i for i in range(10)]
    assert narrow.payloads()[10:] == [b"after%d" % i for i in range(20)]
    st = b.status()["security"]
    assert st["reloads"] == 1
    assert st["refused"].get("subscribe", 0) >= 1  # X.> sent again, refused
    assert b.status()["counters"]["received"] == 30


def test_a_removed_client_key_may_do_nothing_more(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    b = broker_factory(broker_id="b", **keys.options("b"))
    server_key = keys.node_public("b")
    bob = client_factory(b.endpoint, keys=keys.client("bob"), server_key=server_key)
    got = Collector()
    bob.subscribe("Y.Z", got)
    bob.publish("Y.Z", b"one")
    assert wait_until(lambda: got.payloads() == [b"one"], 10)

    _write_clients(keys, '"X.>"', bob=False)
    result = b.reload_security()
    assert result["clients_removed"] == ["client:bob"]
    assert result["connections_ended"] == 1
    assert wait_until(lambda: b.status()["subscriptions"]["patterns"] == [], 10)
    bob._credentials.check = lambda hello, kind, what: None  # type: ignore[method-assign]
    for i in range(5):
        bob.publish("Y.Z", b"late%d" % i)  # the old connection: refused one by one
    assert wait_until(lambda: b.status()["security"]["refused"].get("publish") == 5, 10)
    assert b.status()["counters"]["received"] == 1
    assert got.payloads() == [b"one"]
    # and a new connection with that key is not let in
    with pytest.raises(BrokerUnreachable):
        Client(b.endpoint, keys=keys.client("bob"), server_key=server_key, timeout=1)


def test_a_bad_file_keeps_the_rules_in_force(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    b = broker_factory(broker_id="b", **keys.options("b"))
    keys.clients.write_text("[alice\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        b.reload_security()
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=keys.node_public("b"))
    got = Collector()
    alice.subscribe("X.>", got)
    alice.publish("X.A", b"still")
    assert wait_until(lambda: got.payloads() == [b"still"], 10)
    assert b.status()["security"]["reloads"] == 0


def test_a_node_removed_from_the_allowlist_is_unlinked_and_may_return(
    broker_factory: Callable[..., Broker],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    a, b = _secure_pair(broker_factory, keys)
    _wait_link_up(a, "to-b", wait_until)
    (keys.allowlist / "a.key").unlink()
    result = b.reload_security()
    assert result["nodes_removed"] == ["a"]
    assert result["links_ended"] == 1
    assert wait_until(lambda: b.status()["links"] == [], 10), b.status()["links"]
    assert wait_until(lambda: _link_state(a, "to-b")["state"] != "up", 10)
    time.sleep(1.5)  # a keeps dialling: b refuses its key every time
    assert _link_state(a, "to-b")["state"] != "up"
    assert b.status()["security"]["auth_failures"] >= 1

    shutil.copy(keys.root / "a" / "node.key", keys.allowlist / "a.key")
    assert b.reload_security()["nodes_added"] == ["a"]
    assert wait_until(lambda: _link_state(a, "to-b")["state"] == "up", 30)


def test_a_link_that_failed_for_want_of_a_key_dials_once_the_key_is_allowed(
    broker_factory: Callable[..., Broker],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    c = broker_factory(broker_id="c", **keys.options("c"))  # c's allowlist has a
    a = broker_factory(
        broker_id="a",
        **keys.options("a", links=(LinkConfig(name="to-c", uri=c.endpoint, peer="c"),)),
    )
    assert wait_until(lambda: _link_state(a, "to-c")["state"] == "failed", 10)
    shutil.copy(keys.root / "c" / "node.key", keys.allowlist / "c.key")
    assert a.reload_security()["nodes_added"] == ["c"]
    assert wait_until(lambda: _link_state(a, "to-c")["state"] == "up", 15)


def test_zbroker_start_reloads_on_sighup(
    keys: Keys, procs: Any, free_port: Callable[[], int], wait_until: Callable[..., bool]
) -> None:
    port = free_port()
    node = procs.zbroker(
        "start", "--id", "b", "--port", str(port), "--data-dir", str(keys.root / "b"),
        "--secure", "--allowlist", str(keys.allowlist), "--clients", str(keys.clients),
    )  # fmt: skip
    assert node.wait_stderr("ready at", 30), node.stderr_text()
    endpoint = f"tcp://{HOST}:{port}"
    server_key = keys.node_public("b")
    Client(endpoint, keys=keys.client("bob"), server_key=server_key, timeout=5).close()

    keys.clients.write_text("[alice\n")  # broken: refused, the node keeps its rules
    node.popen.send_signal(signal.SIGHUP)
    assert node.wait_stderr("reload refused, the previous rules stay", 10), node.stderr_text()
    Client(endpoint, keys=keys.client("bob"), server_key=server_key, timeout=5).close()  # kept
    _write_clients(keys, '"X.>"', bob=False)
    node.popen.send_signal(signal.SIGHUP)
    assert node.wait_stderr("security reloaded", 10), node.stderr_text()
    assert node.popen.poll() is None
    with pytest.raises(BrokerUnreachable):
        Client(endpoint, keys=keys.client("bob"), server_key=server_key, timeout=1)
    with Client(endpoint, keys=keys.client("alice"), server_key=server_key, timeout=5) as alice:
        assert alice.status()["security"]["reloads"] == 1


def test_a_reload_keeps_a_permitted_subscription_with_a_selector(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    keys: Keys,
    wait_until: Callable[..., bool],
) -> None:
    """A held subscription is judged by its pattern, not by its name with the selector."""
    _write_clients(keys, '"X.A"')
    b = broker_factory(broker_id="b", **keys.options("b"))
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=keys.node_public("b"))
    got = Collector()
    alice.subscribe("X.A", got, selector="region = 'EU'")
    assert b.reload_security()["connections_ended"] == 0
    alice.publish("X.A", b"eu", headers={"region": "EU"})
    alice.publish("X.A", b"us", headers={"region": "US"})
    assert got.wait_for(1)
    time.sleep(0.3)
    assert got.payloads() == [b"eu"]
