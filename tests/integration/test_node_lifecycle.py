"""Integration tests of one node's life: ports, data directories, identity across
restarts, bounded and idempotent stop, failed and retried starts, clients pointed at
nothing or at bad addresses. In-thread Brokers, real ZeroMQ sockets on 127.0.0.1.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq

from tests.helpers import Collector
from tests.integration.one_node import (
    HOST,
    BrokerFactory,
    ClientFactory,
)
from zbroker import (
    AddressInUse,
    Broker,
    BrokerUnreachable,
    Client,
    ConfigError,
    DataDirError,
    ZBrokerError,
)

# -- lifecycle -----------------------------------------------------------------------------------


class _PortBlocker:
    """A listening TCP socket on 127.0.0.1:port (a port "in use")."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, port))
        self.sock.listen(1)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("offset", [0, 1, 2], ids=["control", "publish", "deliver"])
def test_port_in_use_raises_address_in_use_naming_the_port(
    tmp_path: Path, free_port: Callable[[], int], offset: int
) -> None:
    port = free_port()
    blocker = _PortBlocker(port + offset)
    data_dir = tmp_path / "node"
    try:
        broker = Broker(host=HOST, port=port, data_dir=data_dir)
        with pytest.raises(AddressInUse) as info:
            broker.start()
        assert str(port + offset) in str(info.value)
        assert not broker.running
    finally:
        blocker.close()
    # the failed start released the data directory and every port it had bound
    with Broker(host=HOST, port=port, data_dir=data_dir) as again:
        assert again.ports["control"] == port


def test_second_broker_on_same_port_raises_address_in_use(
    broker_factory: BrokerFactory, free_port: Callable[[], int]
) -> None:
    port = free_port()
    first = broker_factory(port=port)
    assert first.ports == {"control": port, "publish": port + 1, "deliver": port + 2}
    with pytest.raises(AddressInUse) as info:
        broker_factory(port=port)
    assert str(port) in str(info.value)
    assert first.running
    assert first.status()["broker_id"] == first.broker_id


def test_two_brokers_on_one_data_dir_raise_data_dir_error(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    data_dir = tmp_path / "shared"
    first = broker_factory(data_dir=data_dir)
    second = Broker(host=HOST, port=0, data_dir=data_dir)
    with pytest.raises(DataDirError) as info:
        second.start()
    assert str(data_dir) in str(info.value)
    assert not second.running
    assert first.running
    first.stop()
    # once the first one is gone the directory is free again
    third = broker_factory(data_dir=data_dir)
    assert third.broker_id == first.broker_id


def test_restart_keeps_broker_id_and_increments_incarnation(
    tmp_path: Path,
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
) -> None:
    data_dir = tmp_path / "persistent"
    seen: list[tuple[str, int]] = []
    ids_per_life: list[set[Any]] = []
    for _ in range(3):
        # an explicit port: a start that fails also uses up an incarnation
        b = broker_factory(data_dir=data_dir, port=free_port())
        seen.append((b.broker_id, b.incarnation))
        client = client_factory(b.endpoint)
        got = Collector()
        client.subscribe("LIFE.>", got)
        for i in range(3):
            client.publish("LIFE.X", i)
        assert got.wait_for(3)
        assert {m.id.incarnation for m in got.messages} == {b.incarnation}
        ids_per_life.append({m.id for m in got.messages})
        client.close()
        b.stop()
    assert len({bid for bid, _ in seen}) == 1
    first_inc = seen[0][1]
    assert [inc for _, inc in seen] == [first_inc, first_inc + 1, first_inc + 2]
    # message IDs never repeat across lives, although each life's sequence restarts
    assert not (ids_per_life[0] & ids_per_life[1]) and not (ids_per_life[1] & ids_per_life[2])


def test_configured_broker_id_is_used_and_persisted(
    tmp_path: Path, broker_factory: BrokerFactory, free_port: Callable[[], int]
) -> None:
    data_dir = tmp_path / "named"
    b = broker_factory(data_dir=data_dir, broker_id="node-alpha", port=free_port())
    assert b.broker_id == "node-alpha"
    b.stop()
    again = broker_factory(data_dir=data_dir, port=free_port())
    assert again.broker_id == "node-alpha"
    assert again.incarnation > b.incarnation


def test_stop_is_bounded_and_idempotent(
    broker_factory: BrokerFactory, client_factory: ClientFactory, free_port: Callable[[], int]
) -> None:
    port = free_port()
    b = broker_factory(port=port)
    client = client_factory(b.endpoint, timeout=1.0)
    client.subscribe("STOP.>", Collector())
    client.publish("STOP.X", b"x")
    t0 = time.monotonic()
    b.stop()
    first = time.monotonic() - t0
    assert first < 3.0, f"stop() took {first:.2f} s"
    assert not b.running
    t0 = time.monotonic()
    b.stop()
    assert time.monotonic() - t0 < 0.5
    with pytest.raises(ZBrokerError):
        b.status()
    # the ports are released: a new node binds the same triple right away
    again = broker_factory(port=port)
    assert again.ports["control"] == port


def test_calls_racing_stop_return_or_say_the_broker_stopped(
    broker_factory: BrokerFactory,
) -> None:
    # status() from a monitoring thread while the program stops the broker: each call
    # answers, or raises ZBrokerError at once; none waits out its timeout or fails on a
    # socket closed under it
    for _ in range(5):
        b = broker_factory()
        outcomes: list[str] = []
        started = threading.Event()

        def poll(
            b: Broker = b, outcomes: list[str] = outcomes, started: threading.Event = started
        ) -> None:
            while True:
                t0 = time.monotonic()
                try:
                    b.status()
                    outcomes.append("answered")
                except ZBrokerError:
                    outcomes.append(f"stopped {time.monotonic() - t0:.1f}")
                    return
                except Exception as exc:  # what the race must not give
                    outcomes.append(f"{type(exc).__name__}: {exc}")
                    return
                finally:
                    started.set()

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        assert started.wait(10)
        b.stop()
        t.join(10)
        assert not t.is_alive()
        last = outcomes[-1]
        assert last.startswith("stopped") and float(last.split()[1]) < 1.0, outcomes
        assert set(outcomes[:-1]) <= {"answered"}, outcomes


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with Broker(host=HOST, port=0, data_dir=tmp_path / "cm") as b:
        assert b.running
        endpoint = b.endpoint
        with Client(endpoint, timeout=10.0) as client:
            assert client.broker_id == b.broker_id
    assert not b.running


def test_client_to_port_without_node_raises_broker_unreachable(
    free_port: Callable[[], int],
) -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(BrokerUnreachable) as info:
        Client(f"tcp://{HOST}:{port}", timeout=0.5)
    elapsed = time.monotonic() - t0
    assert str(port) in str(info.value)
    assert elapsed < 5.0


def test_client_to_port_without_node_fails_within_its_timeout(
    free_port: Callable[[], int],
) -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(BrokerUnreachable):
        Client(f"tcp://{HOST}:{port}", timeout=0.5)
    elapsed = time.monotonic() - t0
    assert elapsed < 0.5 + 0.4, f"BrokerUnreachable after {elapsed:.2f} s for timeout=0.5"


@pytest.mark.parametrize("address", ["foo bar", "tcp://-x:7100", "tcp://[::1:7100"])
def test_client_to_a_bad_address_raises_config_error_at_once(address: str) -> None:
    """A host ZeroMQ refuses hung the constructor for ever (its thread died with a
    socket open, and Context.term waited for it); an unclosed IPv6 bracket raised a bare
    ValueError. (In a thread of its own, so that a hang fails the test instead.)"""
    raised: list[BaseException] = []

    def construct() -> None:
        try:
            Client(address, timeout=0.5).close()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=construct, daemon=True)
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive(), f"Client({address!r}) hung"
    assert len(raised) == 1 and isinstance(raised[0], ConfigError), raised
    assert address in str(raised[0])


@pytest.mark.parametrize(
    "option",
    [
        {"timeout": -1.0},
        {"timeout": float("nan")},
        {"publish_timeout": -1.0},
        {"heartbeat_interval": 0},
        {"hwm": -1},
    ],
    ids=["negative-timeout", "nan-timeout", "negative-publish-timeout", "zero-heartbeat", "hwm"],
)
def test_client_options_out_of_range_raise_config_error(option: dict[str, Any]) -> None:
    # a negative publish_timeout reached ZeroMQ as a LINGER it refuses: a bare ZMQError
    name = next(iter(option))
    with pytest.raises(ConfigError, match=name):
        Client("tcp://127.0.0.1:1", **option)


@pytest.mark.parametrize("busy", [1, 2], ids=["publish-port-taken", "deliver-port-taken"])
def test_port_zero_retries_when_a_neighbour_port_is_taken(
    tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch, busy: int
) -> None:
    taken_base, good_base = free_port(), free_port()
    blocker = _PortBlocker(taken_base + busy)
    # make the node's random choice deterministic: first a base whose neighbour is taken
    # (what happens at random on a busy machine), then a free one
    bases = iter([taken_base, good_base])

    def choose(sock: zmq.Socket[bytes], addr: str, *args: Any, **kwargs: Any) -> int:
        port = next(bases, None)
        if port is None:
            raise zmq.ZMQError(zmq.EADDRINUSE)
        sock.bind(f"{addr}:{port}")
        return port

    monkeypatch.setattr(zmq.Socket, "bind_to_random_port", choose)
    b = Broker(host=HOST, port=0, data_dir=tmp_path / "zero")
    try:
        b.start()
        assert b.ports == {"control": good_base, "publish": good_base + 1, "deliver": good_base + 2}
    finally:
        b.stop()
        blocker.close()


def _stop_orphaned_node(b: Broker) -> None:
    """Best effort: stop a node thread a Broker lost track of (see the xfail below)."""
    from zbroker.node import STOP

    node = getattr(b, "_node", None)
    ctx = getattr(node, "_ctx", None)
    endpoint = getattr(node, "_command_endpoint", None)
    if node is None or ctx is None or endpoint is None or ctx.closed:
        return
    threads = [t for t in threading.enumerate() if t.name == f"zbroker-node-{node.broker_id}"]
    if not any(t.is_alive() for t in threads):
        return
    cmd = ctx.socket(zmq.PAIR)
    cmd.setsockopt(zmq.LINGER, 0)
    cmd.connect(endpoint)
    cmd.send(STOP)
    for t in threads:
        t.join(5.0)
    cmd.close()
    ctx.term()


def test_start_can_be_retried_after_a_failed_start(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    port = free_port()
    before = set(threading.enumerate())
    blocker = _PortBlocker(port)
    b = Broker(host=HOST, port=port, data_dir=tmp_path / "retry")
    try:
        with pytest.raises(AddressInUse):
            b.start()
        blocker.close()
        try:
            b.start()
        except ZBrokerError:
            pass  # refusing a restart would be acceptable; leaking a node is not
        else:
            assert b.running
        b.stop()
        leaked = [
            t
            for t in threading.enumerate()
            if t.name.startswith("zbroker-node-") and t not in before and t.is_alive()
        ]
        assert not leaked, f"node thread(s) still running after stop(): {leaked}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, port))  # the port is free again
    finally:
        blocker.close()
        _stop_orphaned_node(b)
        b.stop()
