"""Client address lists: failover between nodes, and fan-out publishing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from zbroker import Broker, BrokerUnreachable, Client, ConfigError, Message


def _wait(pred: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_fanout_publishes_every_message_to_every_node(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client]
) -> None:
    a, b = broker_factory(broker_id="FA"), broker_factory(broker_id="FB")  # not linked
    got_a: list[Message] = []
    got_b: list[Message] = []
    client_factory(a.endpoint).subscribe("F.>", got_a.append)
    client_factory(b.endpoint).subscribe("F.>", got_b.append)
    fan = client_factory(f"{a.endpoint},{b.endpoint}", fanout=True, min_brokers=2)
    for i in range(100):
        fan.publish("F.X", b"%d" % i)
    assert _wait(lambda: len(got_a) == 100 and len(got_b) == 100)
    time.sleep(0.1)
    want = [b"%d" % i for i in range(100)]
    assert [m.payload for m in got_a] == want
    assert [m.payload for m in got_b] == want
    assert {m.id.origin for m in got_a} == {"FA"} and {m.id.origin for m in got_b} == {"FB"}


def test_fanout_waits_for_min_brokers(broker_factory: Callable[..., Broker]) -> None:
    a = broker_factory()
    t0 = time.monotonic()
    with pytest.raises(BrokerUnreachable, match="fan-out: 1 of the 2 nodes"):
        Client(f"{a.endpoint},tcp://127.0.0.1:1", fanout=True, min_brokers=2, timeout=0.5)
    assert time.monotonic() - t0 < 3.0
    bad: Any
    for bad in (0, -1, 1.5, True):  # (0 was taken as 1 without a word)
        with pytest.raises(ConfigError, match="min_brokers must be an integer >= 1"):
            Client(a.endpoint, fanout=True, min_brokers=bad)


def test_address_list_fails_over_and_keeps_subscriptions(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client]
) -> None:
    a = broker_factory(broker_id="LA")
    b = broker_factory(broker_id="LB")
    got: list[Any] = []
    c = client_factory(f"{a.endpoint},{b.endpoint}", heartbeat_interval=0.1, heartbeat_timeout=0.5)
    if c.broker_id == "LB":  # (a random one of the list)
        a, b = b, a
    c.subscribe("L.>", lambda m: got.append(m.payload))
    a.stop()  # no goodbye reaches a client: it notices by heartbeat
    assert _wait(lambda: c.broker_id == b.broker_id, 5.0)
    pub = client_factory(b.endpoint)
    # the subscription moved with the client: wait until B has it, then publish
    assert _wait(lambda: "L.>" in b.status()["subscriptions"]["patterns"], 5.0)
    for i in range(10):
        pub.publish("L.X", b"%d" % i)
    assert _wait(lambda: len(got) == 10)
    assert got == [b"%d" % i for i in range(10)]
    c.publish("L.Y", b"from-c")  # publishing moved too
    assert _wait(lambda: len(got) == 11)
    assert got[-1] == b"from-c"


# -- many subscriptions move whole (issue 18, item 5) -------------------------------------

MANY = 3000


def _subscribe_many(c: Client, got: dict[str, int]) -> None:
    def count(m: Message) -> None:
        got[m.topic] = got.get(m.topic, 0) + 1

    for i in range(MANY):
        c.subscribe(f"M.{i}", count)


def _each_pattern_delivers_once(node: Broker, pub: Client, got: dict[str, int]) -> None:
    # every pattern is on the node the client moved to (libzmq re-sends them itself:
    # before the fix its pipe's high-water mark kept 1,000 and dropped the rest)
    def held() -> int:
        return int(node.status()["subscriptions"]["count"])

    assert _wait(lambda: held() == MANY, 15.0), held()
    for i in range(MANY):
        pub.publish(f"M.{i}", b"x")
    assert _wait(lambda: sum(got.values()) >= MANY, 15.0), sum(got.values())
    time.sleep(0.2)
    assert got == {f"M.{i}": 1 for i in range(MANY)}


def test_a_failover_moves_every_one_of_3000_subscriptions(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client]
) -> None:
    nodes = {"MA": broker_factory(broker_id="MA"), "MB": broker_factory(broker_id="MB")}
    c = client_factory(
        ",".join(n.endpoint for n in nodes.values()), heartbeat_interval=0.1, heartbeat_timeout=0.5
    )
    first = c.broker_id
    other = nodes["MB" if first == "MA" else "MA"]
    got: dict[str, int] = {}
    _subscribe_many(c, got)
    nodes[first].stop()
    assert _wait(lambda: c.broker_id == other.broker_id, 5.0)
    _each_pattern_delivers_once(other, client_factory(other.endpoint), got)


def test_a_node_restart_keeps_every_one_of_3000_subscriptions(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    tmp_path: Any,
) -> None:
    port = free_port()
    node = broker_factory(broker_id="MR", port=port, data_dir=tmp_path / "mr")
    c = client_factory(node.endpoint, heartbeat_interval=0.1, heartbeat_timeout=0.5)
    got: dict[str, int] = {}
    _subscribe_many(c, got)
    incarnation = node.incarnation
    node.stop()
    node = broker_factory(broker_id="MR", port=port, data_dir=tmp_path / "mr")
    assert node.incarnation != incarnation
    _each_pattern_delivers_once(node, client_factory(node.endpoint), got)


# -- placement (issue 18, item 7) ----------------------------------------------------------


def test_clients_given_a_list_spread_over_its_nodes(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client]
) -> None:
    nodes = [broker_factory(broker_id=f"P{i}") for i in range(3)]
    address = ",".join(n.endpoint for n in nodes)
    placed = [client_factory(address).broker_id for _ in range(20)]
    # random among the candidates: all 20 on one node has a chance of 3 in 3**20
    assert len(set(placed)) > 1, placed
