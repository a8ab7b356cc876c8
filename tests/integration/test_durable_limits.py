"""Durable subscriptions' bounds and refusals: ``max_msgs`` (drop-oldest and reject-new,
with and without an attached subscriber, and what the database holds), deleting a durable,
reopening it with another pattern, and bad names, credits, bounds and patterns
(:mod:`.durables`)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.durables import (
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    detach_and_sync,
    durable_is,
    durable_of,
    numbers,
    publish_all,
    route_patterns,
)
from zbroker import Broker, ConfigError, InvalidTopic, Message, NoSuchDurable, RequestError, wire

# -- 5. max_msgs --------------------------------------------------------------------------------


def test_max_msgs_keeps_only_the_newest(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("CAP.>", lambda m: None, durable="cap", max_msgs=10))
    assert durable_is(broker, "cap", max_msgs=10, stored=0, dropped=0, attached=False)
    publish_all(client, "CAP.X", numbers(25))
    assert wait_until(lambda: broker.status()["counters"]["durable_stored"] == 25, WAIT)
    assert wait_until(lambda: durable_is(broker, "cap", stored=10, dropped=15), WAIT), durable_of(
        broker, "cap"
    )
    assert broker.status()["store"]["dropped"].get("durable_max_msgs") == 15
    # and the node's drops (the metric, DROPS advisories) have them too
    assert wait_until(
        lambda: broker.status()["counters"]["dropped"].get("durable_drop_oldest") == 15, WAIT
    ), broker.status()["counters"]["dropped"]

    got = Collector()
    back = client_factory(broker.endpoint)
    back.subscribe("CAP.>", got, durable="cap", max_msgs=10)
    assert (back.durable_info["cap"]["stored"], back.durable_info["cap"]["dropped"]) == (10, 15)
    assert got.wait_for(10)
    # (all acknowledged before the barrier: max_msgs counts unacknowledged messages too)
    assert wait_until(lambda: durable_is(broker, "cap", stored=0, in_flight=0), WAIT)
    client.publish("CAP.X", b"barrier")
    assert got.wait_payload(b"barrier")
    assert got.payloads() == [*numbers(10, 15), b"barrier"]
    assert not any(got.redelivered())
    assert wait_until(lambda: durable_is(broker, "cap", stored=0, dropped=15), WAIT), durable_of(
        broker, "cap"
    )


def test_reject_new_keeps_the_oldest_and_refuses_persistent_publishes(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    from zbroker.writer import StagedWriter, commit_staged

    data = tmp_path / "node"
    broker = broker_factory(data_dir=data)
    client = client_factory(broker.endpoint)
    detach_and_sync(
        client,
        client.subscribe("RJ.>", lambda m: None, durable="rj", max_msgs=5, overflow="reject-new"),
    )
    for p in numbers(5):
        client.publish("RJ.X", p, persistent=True, confirm=True)
    with pytest.raises(RequestError, match=r"durable subscription 'rj' is full .*reject-new"):
        client.publish("RJ.X", b"refused", persistent=True, confirm=True)
    publish_all(client, "RJ.X", [b"n1", b"n2"])  # non-persistent: not queued, counted
    client.publish("OTHER.X", b"fine", persistent=True, confirm=True)  # other topics go on
    w = StagedWriter(client)
    w.add("RJ.X", b"staged")
    with pytest.raises(RequestError, match="durable subscription 'rj' is full"):
        commit_staged(client, [w.finish()])
    assert wait_until(
        lambda: broker.status()["counters"]["dropped"].get("durable_reject_new") == 2, WAIT
    )
    assert broker.status()["counters"]["dropped"]["rejected_persistent"] == 2
    assert durable_is(broker, "rj", stored=5, dropped=0)
    client.close()

    # the held counts are exact after a restart: still full
    port = broker.ports["control"]
    broker.stop()
    broker = broker_factory(data_dir=data, port=port)
    client = client_factory(broker.endpoint)
    with pytest.raises(RequestError, match="durable subscription 'rj' is full"):
        client.publish("RJ.X", b"refused-again", persistent=True, confirm=True)
    got = Collector()
    back = client_factory(broker.endpoint)
    back.subscribe("RJ.>", got, durable="rj")
    assert got.wait_for(5)
    # drained and acknowledged: room again
    assert wait_until(lambda: durable_is(broker, "rj", stored=0, in_flight=0), WAIT)
    client.publish("RJ.X", b"after", persistent=True, confirm=True)
    assert got.wait_payload(b"after")
    assert got.payloads() == [*numbers(5), b"after"]


def test_bad_overflow_policy_is_refused(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(RequestError, match="overflow must be one of drop-oldest, reject-new"):
        client.subscribe("RJ.>", lambda m: None, durable="bad", overflow="drop-newest")


def test_max_msgs_does_not_drop_for_an_attached_subscriber_with_credit(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    n = 1000
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("CAPL.>", got, durable="capl", max_msgs=10, credit=100_000)
    publisher = client_factory(broker.endpoint)
    publish_all(publisher, "CAPL.X", numbers(n))
    publisher.publish("CAPL.X", b"barrier")
    assert got.wait_payload(b"barrier", timeout=5.0)
    assert got.payloads() == [*numbers(n), b"barrier"]
    assert durable_is(broker, "capl", dropped=0)


def test_max_msgs_bounds_what_waits_while_credit_bounds_what_is_in_flight(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """An attached subscriber that stopped acknowledging (its callback is stuck): the 5
    messages its credit let out stay in flight, untouched by max_msgs; of the 95 that wait
    behind them, only the newest 10 are kept. When it resumes it gets exactly those 15."""
    client = client_factory(broker.endpoint)
    release = threading.Event()
    got = Collector()

    def stuck(msg: Message) -> None:
        release.wait(30)  # the client thread waits here: nothing is acknowledged
        got(msg)

    client.subscribe("SLOW.>", stuck, durable="slow", max_msgs=10, credit=5)
    publisher = client_factory(broker.endpoint)
    publish_all(publisher, "SLOW.X", numbers(100))
    assert wait_until(lambda: broker.status()["counters"]["durable_stored"] == 100, WAIT)
    assert wait_until(lambda: durable_is(broker, "slow", dropped=85), WAIT), durable_of(
        broker, "slow"
    )
    assert durable_is(broker, "slow", in_flight=5, stored=15, attached=True)
    release.set()
    assert got.wait_for(15)
    assert wait_until(lambda: durable_is(broker, "slow", stored=0, in_flight=0), WAIT)
    assert got.payloads() == [*numbers(5), *numbers(10, 90)]
    assert not any(m.redelivered for m in got.messages)
    assert durable_is(broker, "slow", dropped=85)


def store_files_size(broker: Broker) -> dict[str, int]:
    """Sizes of the node's SQLite files (database, WAL, shared memory)."""
    path = Path(broker.status()["store"]["path"])
    return {p.name: p.stat().st_size for p in path.parent.iterdir() if p.name.startswith(path.name)}


def test_max_msgs_bounds_the_database_size(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    rounds, n, size = 6, 3000, 4096  # 72 MiB published while away
    # The store trims once per commit, and a node commits once per poll pass of up to
    # DRAIN_BATCH (2048) messages; the WAL keeps its high-water mark. So the files may hold
    # a few batches' worth whatever max_msgs says, but they must not grow with the volume.
    batch_bytes = 2048 * (size + 256)
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("BIG.>", lambda m: None, durable="big", max_msgs=10))
    blob = b"x" * size
    sizes = []
    for r in range(rounds):
        for i in range(r * n, (r + 1) * n):
            client.publish("BIG.X", str(i).encode() + b":" + blob)
        total = (r + 1) * n
        assert wait_until(lambda t=total: broker.status()["counters"]["durable_stored"] == t, WAIT)
        assert wait_until(
            lambda t=total: durable_is(broker, "big", stored=10, dropped=t - 10), WAIT
        )
        files = store_files_size(broker)
        sizes.append(sum(files.values()))
        assert sizes[-1] < 4 * batch_bytes, (r, files)
    # (the bound holds after every round: it does not depend on the volume published)
    assert sizes[-1] < rounds * n * size / 2, sizes

    got = Collector()
    client.subscribe("BIG.>", got, durable="big", max_msgs=10)
    assert got.wait_for(10)
    total = rounds * n
    assert [m.payload.split(b":")[0] for m in got.messages] == numbers(10, total - 10)
    assert wait_until(lambda: durable_is(broker, "big", stored=0, dropped=total - 10), WAIT)


# -- 6. delete, conflicts, bad arguments ---------------------------------------------------------


def test_delete_durable_removes_it_its_messages_and_its_interest(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("DEL.>", lambda m: None, durable="gone"))
    publish_all(client, "DEL.X", numbers(7))
    assert wait_until(lambda: durable_is(broker, "gone", stored=7), WAIT)
    assert "DEL.>" in route_patterns(client)

    assert client.delete_durable("gone") == 7
    assert durable_of(broker, "gone") is None
    assert "DEL.>" not in route_patterns(client)
    assert "DEL.>" not in broker.status()["subscriptions"]["patterns"]
    assert client.delete_durable("gone") == 0  # idempotent
    with pytest.raises(NoSuchDurable, match="no durable subscription named 'gone'"):
        client.delete_durable("gone", missing_ok=False)

    got = Collector()
    client.subscribe("DEL.>", got, durable="gone")
    info = client.durable_info["gone"]
    assert (info["created"], info["stored"], info["dropped"]) == (True, 0, 0)
    client.publish("DEL.X", b"barrier")
    assert got.wait_payload(b"barrier")
    assert got.payloads() == [b"barrier"]
    assert wait_until(lambda: durable_is(broker, "gone", stored=0, in_flight=0), WAIT)


def test_delete_durable_while_attached(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("DELA.>", got, durable="dela")
    client.publish("DELA.X", b"0")
    assert got.wait_for(1)
    assert wait_until(lambda: durable_is(broker, "dela", stored=0), WAIT)
    assert client.delete_durable("dela") == 0
    assert durable_of(broker, "dela") is None
    assert "DELA.>" not in route_patterns(broker)
    # nothing is stored or delivered for it any more
    client.publish("DELA.X", b"1")
    client.status()
    assert broker.status()["counters"]["durable_stored"] == 1
    assert got.payloads() == [b"0"]


def test_open_existing_name_with_another_pattern_is_refused(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    owner = client_factory(broker.endpoint)
    detach_and_sync(owner, owner.subscribe("ONE.>", lambda m: None, durable="taken"))
    other = client_factory(broker.endpoint)
    with pytest.raises(RequestError) as info:
        other.subscribe("TWO.>", lambda m: None, durable="taken")
    assert "'taken'" in str(info.value)
    assert "'ONE.>'" in str(info.value)
    assert durable_is(broker, "taken", pattern="ONE.>", attached=False)
    assert "TWO.>" not in route_patterns(broker)
    # the refused client can still open it with the right pattern
    got = Collector()
    other.subscribe("ONE.>", got, durable="taken")
    owner.publish("ONE.X", b"1")
    assert got.wait_for(1)
    assert got.payloads() == [b"1"]


def test_refused_reopen_keeps_the_existing_subscription(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("KEEP.>", got, durable="keep")
    with pytest.raises(RequestError):
        client.subscribe("OTHER.>", lambda m: None, durable="keep")
    client.publish("KEEP.X", b"1")
    assert got.wait_for(1, timeout=3.0)
    assert wait_until(lambda: durable_is(broker, "keep", stored=0, in_flight=0), 3.0)


@pytest.mark.parametrize(
    "name", ["", "-lead", ".lead", "has space", "x" * 65, "sl/ash", "naïve"], ids=repr
)
def test_bad_durable_names_are_refused(
    broker: Broker, client_factory: ClientFactory, name: str
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(ConfigError, match="durable subscription name"):
        client.subscribe("BAD.>", lambda m: None, durable=name)
    with pytest.raises(ConfigError, match="durable subscription name"):
        client.delete_durable(name)
    # the node checks as well
    body = {"name": name, "pattern": "BAD.>", "credit": 10, "max_msgs": 0}
    with pytest.raises(RequestError, match="durable name"):
        client.request(wire.DURABLE_OPEN, body)
    with pytest.raises(RequestError, match="durable name"):
        client.request(wire.DURABLE_DELETE, {"name": name})
    assert broker.status()["durables"] == []
    assert "BAD.>" not in route_patterns(broker)


@pytest.mark.parametrize("credit", [0, -1, 100_001, 2.5, "5", None, True], ids=repr)
def test_bad_credit_is_refused(broker: Broker, client_factory: ClientFactory, credit: Any) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(ConfigError, match="credit"):
        client.subscribe("CR.>", lambda m: None, durable="cr", credit=credit)
    body = {"name": "cr", "pattern": "CR.>", "credit": credit, "max_msgs": 0}
    with pytest.raises(RequestError, match="credit"):
        client.request(wire.DURABLE_OPEN, body)
    assert broker.status()["durables"] == []


@pytest.mark.parametrize("max_msgs", [-1, 1.5, "10"], ids=repr)
def test_bad_max_msgs_is_refused(
    broker: Broker, client_factory: ClientFactory, max_msgs: Any
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises((RequestError, ConfigError), match="max_msgs"):
        client.subscribe("MX.>", lambda m: None, durable="mx", max_msgs=max_msgs)
    assert broker.status()["durables"] == []
    # the refused open left nothing behind: the name opens normally afterwards
    client.subscribe("MX.>", lambda m: None, durable="mx")
    assert durable_is(broker, "mx", attached=True)


def test_bad_pattern_is_refused(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(InvalidTopic):
        client.subscribe("BAD..X", lambda m: None, durable="bp")
    body = {"name": "bp", "pattern": "BAD..X", "credit": 10, "max_msgs": 0}
    with pytest.raises(RequestError):
        client.request(wire.DURABLE_OPEN, body)
    assert broker.status()["durables"] == []
