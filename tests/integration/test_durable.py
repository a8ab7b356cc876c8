"""Integration tests of durable subscriptions: exact counts, per-publisher order, redelivery.

In-thread brokers (``broker_factory``) and real Clients on 127.0.0.1; tests marked ``slow``
also run subprocesses (a small subscriber script run with ``sys.executable``, the
``zbroker`` console script), always through the ``procs`` fixture, which stops every one of
them by PID. Waiting is done by polling a condition with a bound, never by fixed sleeps.

Exactly-once is proved with a final "barrier" message published after the ones a test
counts: a node stores one publisher's messages in order and sends one durable
subscription's messages down one connection in order, so once the barrier arrived every
earlier message (or a duplicate of it) has arrived too.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from zbroker import Broker, Client, ConfigError, InvalidTopic, Message, RequestError, wire
from zbroker.config import LinkConfig

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait (generous: CI machines are slow)

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]

#: short heartbeats and redials for links, where liveness matters
FAST_LINK: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "reconnect_initial_delay": 0.1,
    "reconnect_max_delay": 0.5,
}


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


def numbers(n: int, start: int = 0) -> list[bytes]:
    """The payloads ``b"start"`` .. ``b"start+n-1"``."""
    return [str(i).encode() for i in range(start, start + n)]


def publish_all(client: Client, topic: str, payloads: list[bytes]) -> None:
    for p in payloads:
        client.publish(topic, p)


def durable_of(source: Broker | Client, name: str) -> dict[str, Any] | None:
    """The node's status entry of durable subscription ``name`` (None: no such one)."""
    for d in source.status()["durables"]:
        if d["name"] == name:
            result: dict[str, Any] = d
            return result
    return None


def durable_is(source: Broker | Client, name: str, **expected: Any) -> bool:
    """True if durable ``name`` exists and its status entry has the ``expected`` values."""
    d = durable_of(source, name)
    return d is not None and all(d[k] == v for k, v in expected.items())


def route_patterns(source: Broker | Client) -> set[str]:
    """Patterns of the node's interest table (local and remote)."""
    if isinstance(source, Broker):
        rows: list[dict[str, Any]] = source.call(lambda node: node.engine.interest())
    else:
        rows = source.routes()
    return {r["pattern"] for r in rows}


def detach_and_sync(client: Client, sub: Any) -> None:
    """Detach a durable subscription; the round trip after it proves the node processed
    the detach (one connection: the node handles its frames in order)."""
    sub.unsubscribe()
    client.status()


# -- a subscriber in another process ------------------------------------------------------------

#: Opens (or reattaches to) a durable subscription and prints one JSON line per event:
#: ``{"event": "ready", "info": ...}`` once attached, ``{"event": "msg", ...}`` per message
#: (flushed before the callback returns, so before it is acknowledged), ``{"event":
#: "done"}`` after ``--count`` messages (then it detaches, syncs and exits 0). With
#: ``--kill-at K`` it SIGKILLs itself inside the callback of the K-th message, after
#: printing it and before acknowledging it.
SUBSCRIBER_SCRIPT = r"""
import argparse
import json
import os
import signal
import sys
import threading

from zbroker import Client

parser = argparse.ArgumentParser()
parser.add_argument("endpoint")
parser.add_argument("pattern")
parser.add_argument("name")
parser.add_argument("--count", type=int, required=True)
parser.add_argument("--credit", type=int, default=100)
parser.add_argument("--kill-at", type=int, default=0)
parser.add_argument("--timeout", type=float, default=60.0)
args = parser.parse_args()

lock = threading.Lock()
seen = 0
done = threading.Event()
printed_ready = threading.Event()


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def on_message(msg):
    global seen
    # deliveries may start before subscribe() returns: "ready" is printed first (the
    # node's reply precedes them on the connection, so subscribe() can return meanwhile)
    printed_ready.wait(30)
    with lock:
        seen += 1
        n = seen
    emit(
        {
            "event": "msg" if n <= args.count else "extra",
            "n": n,
            "topic": msg.topic,
            "payload": msg.payload.decode(),
            "redelivered": msg.redelivered,
            "id": str(msg.id),
        }
    )
    if n == args.kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if n >= args.count:
        done.set()


client = Client(args.endpoint, timeout=10.0, heartbeat_timeout=30.0)
sub = client.subscribe(args.pattern, on_message, durable=args.name, credit=args.credit)
emit({"event": "ready", "info": client.durable_info[args.name]})
printed_ready.set()
if not done.wait(args.timeout):
    emit({"event": "timeout", "seen": seen})
    client.close()
    sys.exit(3)
sub.unsubscribe()
client.status()  # a round trip: the acknowledgements and the detach reached the node
client.close()
emit({"event": "done"})
"""


@pytest.fixture
def subscriber_script(tmp_path: Path) -> Path:
    path = tmp_path / "durable_subscriber.py"
    path.write_text(SUBSCRIBER_SCRIPT, encoding="utf-8")
    return path


def start_subscriber(
    procs: Any,
    script: Path,
    ep: str,
    pattern: str,
    name: str,
    *,
    count: int,
    credit: int = 100,
    kill_at: int = 0,
) -> Any:
    args = [sys.executable, str(script), ep, pattern, name, "--count", str(count)]
    args += ["--credit", str(credit), "--kill-at", str(kill_at)]
    return procs.start(args)


def next_event(proc: Any, timeout: float = WAIT) -> dict[str, Any]:
    line = proc.readline(timeout)
    assert line is not None, (
        f"no output from {proc.describe()} within {timeout:g} s; "
        f"exit {proc.poll()}; stderr: {proc.stderr_text()!r}"
    )
    event: dict[str, Any] = json.loads(line)
    return event


def wait_ready_event(proc: Any) -> dict[str, Any]:
    event = next_event(proc)
    assert event["event"] == "ready", event
    info: dict[str, Any] = event["info"]
    return info


def read_messages(proc: Any, n: int, timeout: float = WAIT) -> list[dict[str, Any]]:
    """The next ``n`` message events of a subscriber process."""
    out = []
    for _ in range(n):
        event = next_event(proc, timeout)
        assert event["event"] == "msg", (event, out)
        out.append(event)
    return out


def finish(proc: Any) -> None:
    """Wait for a subscriber process that has its count to say done and exit 0."""
    event = next_event(proc)
    assert event == {"event": "done"}, event
    assert proc.wait(WAIT) == 0, proc.stderr_text()
    assert "Traceback" not in proc.stderr_text(), proc.stderr_text()


def ints(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["payload"]) for e in events]


# -- 1. live delivery ------------------------------------------------------------------------------


def test_live_delivery_exactly_once_in_order(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    n = 200
    sub_client = client_factory(broker.endpoint)
    got = Collector()
    sub = sub_client.subscribe("LIVE.>", got, durable="live")
    assert sub.durable == "live"
    assert sub_client.durable_info["live"] == {
        "name": "live",
        "pattern": "LIVE.>",
        "stored": 0,
        "dropped": 0,
        "created": True,
        "home": broker.broker_id,  # (the client keeps to it: issue 18 item 3)
    }
    assert durable_is(broker, "live", pattern="LIVE.>", attached=True, stored=0)

    publisher = client_factory(broker.endpoint)
    publish_all(publisher, "LIVE.X", numbers(n))
    publisher.publish("LIVE.BARRIER", b"barrier")

    assert got.wait_payload(b"barrier"), got.payloads()
    assert got.payloads() == [*numbers(n), b"barrier"]
    assert not any(got.redelivered())
    assert all(m.pattern == "LIVE.>" for m in got.messages)
    # every message acknowledged: nothing stored, nothing in flight, still attached
    assert wait_until(
        lambda: durable_is(broker, "live", attached=True, stored=0, in_flight=0), WAIT
    ), durable_of(broker, "live")
    counters = broker.status()["counters"]
    assert counters["durable_stored"] == n + 1
    assert counters["durable_delivered"] == n + 1


def test_two_publishers_keep_their_own_order(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    n = 150
    sub_client = client_factory(broker.endpoint)
    got = Collector()
    sub_client.subscribe("ORD.>", got, durable="ord")
    pubs = [client_factory(broker.endpoint) for _ in range(2)]
    threads = [
        threading.Thread(target=publish_all, args=(p, f"ORD.P{i}", numbers(n)))
        for i, p in enumerate(pubs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert got.wait_for(2 * n)
    assert wait_until(lambda: durable_is(broker, "ord", stored=0, in_flight=0), WAIT)
    for i in range(2):
        assert [m.payload for m in got.messages if m.topic == f"ORD.P{i}"] == numbers(n)
    assert len(got) == 2 * n


# -- 2. subscriber away ----------------------------------------------------------------------------


@pytest.mark.slow
def test_away_messages_are_stored_and_delivered_to_another_process(
    broker: Broker,
    client_factory: ClientFactory,
    procs: Any,
    subscriber_script: Path,
    wait_until: WaitUntil,
) -> None:
    n, m, live = 20, 30, 10
    first = client_factory(broker.endpoint)
    got = Collector()
    first.subscribe("AWAY.>", got, durable="away")
    publisher = client_factory(broker.endpoint)
    publish_all(publisher, "AWAY.X", numbers(n))
    assert got.wait_for(n)
    assert got.payloads() == numbers(n)
    assert wait_until(lambda: durable_is(broker, "away", stored=0, in_flight=0), WAIT)

    first.close()  # the subscriber goes away (without detaching first)
    publish_all(publisher, "AWAY.X", numbers(m, n))
    assert wait_until(lambda: durable_is(broker, "away", stored=m), WAIT), durable_of(
        broker, "away"
    )
    # the pattern stays in the node's interest while nobody is attached
    assert "AWAY.>" in route_patterns(broker)

    # another process reattaches by name: exactly the M stored, in order, then live ones
    proc = start_subscriber(
        procs, subscriber_script, broker.endpoint, "AWAY.>", "away", count=m + live
    )
    info = wait_ready_event(proc)
    assert (info["name"], info["pattern"], info["created"]) == ("away", "AWAY.>", False)
    assert info["stored"] == m
    away = read_messages(proc, m)
    assert ints(away) == list(range(n, n + m))
    assert all(e["topic"] == "AWAY.X" for e in away)
    assert wait_until(lambda: durable_is(broker, "away", attached=True, stored=0), WAIT)
    publish_all(publisher, "AWAY.LIVE", numbers(live, 1000))
    later = read_messages(proc, live)
    assert ints(later) == list(range(1000, 1000 + live))
    assert not any(e["redelivered"] for e in later)
    finish(proc)
    assert "extra" not in proc.stdout_text()
    assert wait_until(lambda: durable_is(broker, "away", attached=False, stored=0), WAIT)


def test_close_detaches_durable_subscriptions(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    client.subscribe("CLOSE.>", lambda m: None, durable="close")
    assert durable_is(broker, "close", attached=True)
    client.close()
    assert wait_until(lambda: durable_is(broker, "close", attached=False), 3.0), durable_of(
        broker, "close"
    )


# -- 3. credit window ------------------------------------------------------------------------------


def test_credit_window_bounds_messages_in_flight(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    n, credit = 40, 5
    release = threading.Event()
    entered = threading.Event()
    got = Collector()

    def blocking(msg: Message) -> None:
        got(msg)
        entered.set()
        assert release.wait(WAIT)

    # a long heartbeat timeout: the blocked client thread must not give up on the node
    sub_client = client_factory(broker.endpoint, heartbeat_timeout=60.0)
    sub_client.subscribe("CRED.>", blocking, durable="cred", credit=credit)
    publisher = client_factory(broker.endpoint)
    try:
        publish_all(publisher, "CRED.X", numbers(n))
        assert entered.wait(WAIT)
        assert wait_until(lambda: durable_is(broker, "cred", in_flight=credit, stored=n), WAIT), (
            durable_of(broker, "cred")
        )
        assert broker.status()["counters"]["durable_delivered"] == credit
        # it stays at the window: nothing more is sent until something is acknowledged
        assert not wait_until(lambda: not durable_is(broker, "cred", in_flight=credit), 0.3)
        assert len(got) == 1
    finally:
        release.set()
    publisher.publish("CRED.X", b"barrier")
    assert got.wait_payload(b"barrier"), got.payloads()
    assert got.payloads() == [*numbers(n), b"barrier"]
    assert not any(got.redelivered())
    assert wait_until(lambda: durable_is(broker, "cred", stored=0, in_flight=0), WAIT)
    assert broker.status()["counters"]["durable_delivered"] == n + 1


# -- 4. redelivery after a subscriber dies -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("credit", [1, 100], ids=["credit1", "credit100"])
def test_unacknowledged_messages_are_redelivered_after_sigkill(
    broker: Broker,
    client_factory: ClientFactory,
    procs: Any,
    subscriber_script: Path,
    wait_until: WaitUntil,
    credit: int,
) -> None:
    n, k = 30, 12
    setup = client_factory(broker.endpoint)
    detach_and_sync(setup, setup.subscribe("KILL.>", lambda m: None, durable="kill"))
    publish_all(setup, "KILL.X", numbers(n))
    assert wait_until(lambda: durable_is(broker, "kill", stored=n), WAIT)

    victim = start_subscriber(
        procs,
        subscriber_script,
        broker.endpoint,
        "KILL.>",
        "kill",
        count=n,
        credit=credit,
        kill_at=k,
    )
    assert wait_ready_event(victim)["stored"] == n
    seen_first = read_messages(victim, k)
    assert ints(seen_first) == list(range(k))
    assert not any(e["redelivered"] for e in seen_first)
    assert victim.wait(WAIT) == -signal.SIGKILL
    # the node committed every acknowledgement it got; the K-th was never acknowledged.
    # With credit 1 each message was sent only after the one before it was acknowledged,
    # so all K-1 acknowledgements arrived; with a wide window some of the last ones may
    # have died with the process (still queued in it): wait for them a little only.
    reached = wait_until(lambda: durable_is(broker, "kill", stored=n - (k - 1)), 2.0)
    assert reached or credit > 1, durable_of(broker, "kill")
    entry = durable_of(broker, "kill")
    assert entry is not None
    stored = entry["stored"]
    acked = n - stored
    assert acked <= k - 1, entry  # the K-th message was not acknowledged

    again = start_subscriber(
        procs, subscriber_script, broker.endpoint, "KILL.>", "kill", count=stored
    )
    assert wait_ready_event(again)["stored"] == stored
    seen_second = read_messages(again, stored)
    finish(again)
    # nothing acknowledged comes twice; everything not acknowledged comes again, in order
    assert ints(seen_second) == list(range(acked, n))
    assert set(ints(seen_first)) | set(ints(seen_second)) == set(range(n))
    flags = {int(e["payload"]): e["redelivered"] for e in seen_second}
    # what the dead process was sent (and maybe saw) is flagged; the rest is not
    sent_before = set(range(acked, min(n, acked + credit)))
    assert {p for p, f in flags.items() if f} == sent_before, flags
    if credit == 1:
        assert acked == k - 1
        assert [p for p, f in flags.items() if f] == [k - 1]
    assert wait_until(lambda: durable_is(broker, "kill", stored=0, attached=False), WAIT)

    # a barrier proves no further copy is on its way to a new subscriber
    final = client_factory(broker.endpoint)
    got = Collector()
    final.subscribe("KILL.>", got, durable="kill")
    setup.publish("KILL.X", b"barrier")
    assert got.wait_payload(b"barrier")
    assert got.payloads() == [b"barrier"]


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


# -- 7. node restart (in-thread) -----------------------------------------------------------------


def test_durables_and_stored_messages_survive_a_restart(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: WaitUntil,
) -> None:
    n = 50
    port, data_dir = free_port(), tmp_path / "restart-node"
    node = broker_factory(port=port, data_dir=data_dir)
    with Client(node.endpoint, timeout=10.0) as client:
        detach_and_sync(client, client.subscribe("RS.>", lambda m: None, durable="rs"))
        detach_and_sync(
            client, client.subscribe("RS.CAP.>", lambda m: None, durable="rscap", max_msgs=5)
        )
        publish_all(client, "RS.A", numbers(n))
        publish_all(client, "RS.CAP.B", numbers(8))
        assert wait_until(lambda: durable_is(node, "rs", stored=n + 8), WAIT)
        assert wait_until(lambda: durable_is(node, "rscap", stored=5, dropped=3), WAIT)
    node.stop()

    node = broker_factory(port=port, data_dir=data_dir)
    entry = durable_of(node, "rs")
    assert entry is not None
    assert entry == {
        "name": "rs",
        "pattern": "RS.>",
        "attached": False,
        "in_flight": 0,
        "stored": n + 8,
        "dropped": 0,
        "max_msgs": 0,
    }
    assert durable_is(node, "rscap", stored=5, dropped=3, max_msgs=5)
    assert {"RS.>", "RS.CAP.>"} <= route_patterns(node)

    client = client_factory(node.endpoint)
    got = Collector()
    client.subscribe("RS.>", got, durable="rs")
    assert client.durable_info["rs"]["created"] is False
    client.publish("RS.A", b"barrier")
    assert got.wait_payload(b"barrier"), got.payloads()
    assert [m.payload for m in got.messages if m.topic == "RS.A"] == [*numbers(n), b"barrier"]
    assert [m.payload for m in got.messages if m.topic == "RS.CAP.B"] == numbers(8)
    assert len(got) == n + 8 + 1
    assert not any(got.redelivered())
    capped = Collector()
    client.subscribe("RS.CAP.>", capped, durable="rscap")
    assert client.durable_info["rscap"]["stored"] == 5
    assert wait_until(lambda: durable_is(node, "rs", stored=0, in_flight=0), WAIT)
    # queue sequence numbers continue after the restart: new messages are not mistaken
    # for acknowledged ones
    client.publish("RS.CAP.B", b"after")
    assert capped.wait_payload(b"after"), capped.payloads()
    assert capped.payloads() == [*numbers(5, 3), b"after"]
    assert got.wait_payload(b"after")
    assert got.payloads()[-1] == b"after"
    assert len(got) == n + 8 + 2
    assert not any(capped.redelivered())
    assert wait_until(lambda: durable_is(node, "rscap", stored=0, in_flight=0), WAIT)


def restart_with_connected_subscriber(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    port: int,
    data_dir: Path,
    wait_until: WaitUntil,
    *,
    heartbeat_timeout: float,
    down_for: float,
    attach_timeout: float,
) -> None:
    """A subscriber stays connected while its node restarts (down for ``down_for`` s):
    its client must reattach the durable by itself and get exactly what follows."""
    n = 30
    node = broker_factory(port=port, data_dir=data_dir)
    got = Collector()
    sub_client = client_factory(
        node.endpoint,
        heartbeat_interval=0.2,
        heartbeat_timeout=heartbeat_timeout,
        reconnect_initial_delay=0.1,
        reconnect_max_delay=0.5,
    )
    sub_client.subscribe("RA.>", got, durable="ra")
    with Client(node.endpoint, timeout=10.0) as pub:
        publish_all(pub, "RA.X", numbers(n))
    assert got.wait_for(n)
    assert wait_until(lambda: durable_is(node, "ra", stored=0, in_flight=0), WAIT)
    node.stop()
    if down_for:
        # the scenario, not a wait for a condition: the node stays down this long
        time.sleep(down_for)

    node = broker_factory(port=port, data_dir=data_dir)
    # the client notices, reconnects and reattaches without being asked to
    assert wait_until(lambda: durable_is(node, "ra", attached=True), attach_timeout), durable_of(
        node, "ra"
    )
    with Client(node.endpoint, timeout=10.0) as pub:
        publish_all(pub, "RA.X", numbers(n, n))
        pub.publish("RA.X", b"barrier")
    assert got.wait_payload(b"barrier"), got.payloads()
    assert got.payloads() == [*numbers(2 * n), b"barrier"]
    assert not any(got.redelivered())


def test_connected_subscriber_reattaches_by_itself_after_a_restart(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: WaitUntil,
) -> None:
    # down longer than the client's heartbeat timeout: the client sees the node go
    restart_with_connected_subscriber(
        broker_factory,
        client_factory,
        free_port(),
        tmp_path / "reattach-node",
        wait_until,
        heartbeat_timeout=1.0,
        down_for=2.0,
        attach_timeout=WAIT,
    )


def test_connected_subscriber_reattaches_after_a_quick_restart(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: WaitUntil,
) -> None:
    restart_with_connected_subscriber(
        broker_factory,
        client_factory,
        free_port(),
        tmp_path / "quick-node",
        wait_until,
        heartbeat_timeout=5.0,
        down_for=0.0,
        attach_timeout=5.0,
    )


# -- 8. node SIGKILL (a real `zbroker start` process) ---------------------------------------------


@pytest.mark.slow
def test_confirmed_messages_survive_a_node_sigkill(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    n = 100
    port, data_dir = free_port(), tmp_path / "killed-node"
    start_args = ("start", "--port", str(port), "--data-dir", str(data_dir))
    node = procs.zbroker(*start_args)
    first = wait_ready(endpoint(port), WAIT, node)

    with Client(endpoint(port), timeout=10.0) as client:
        detach_and_sync(client, client.subscribe("SK.>", lambda m: None, durable="sk"))
    with Client(endpoint(port), timeout=10.0) as publisher:
        for p in numbers(n):
            reply = publisher.publish("SK.X", p, persistent=True, confirm=True)
            assert reply["id"][0] == first["broker_id"]
        # confirmed means committed: kill at once, no grace
        node.send_signal(signal.SIGKILL)
    assert node.wait(WAIT) == -signal.SIGKILL

    node = procs.zbroker(*start_args)
    second = wait_ready(endpoint(port), WAIT, node)
    assert second["broker_id"] == first["broker_id"]
    assert second["incarnation"] > first["incarnation"]
    client = Client(endpoint(port), timeout=10.0)
    try:
        assert durable_is(client, "sk", stored=n, attached=False, pattern="SK.>")
        got = Collector()
        client.subscribe("SK.>", got, durable="sk")
        assert client.durable_info["sk"]["stored"] == n
        client.publish("SK.X", b"barrier", persistent=True, confirm=True)
        assert got.wait_payload(b"barrier"), got.payloads()
        assert got.payloads() == [*numbers(n), b"barrier"]
        assert not any(got.redelivered())
        assert wait_until(lambda: durable_is(client, "sk", stored=0, in_flight=0), WAIT)
    finally:
        client.close()
    node.stop()
    assert "Traceback" not in node.stderr_text(), node.stderr_text()


# -- 9. network: interest stays while the subscriber is away ------------------------------------


def test_durable_interest_stays_in_the_network_while_away(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
) -> None:
    n = 100
    port_a = free_port()
    a = broker_factory(broker_id="A", port=port_a)
    b = broker_factory(
        broker_id="B", links=(LinkConfig(name="ba", uri=endpoint(port_a), **FAST_LINK),)
    )
    assert wait_until(
        lambda: (
            any(ln["state"] == "up" for ln in a.status()["links"])
            and any(ln["state"] == "up" for ln in b.status()["links"])
        ),
        WAIT,
    ), (a.status()["links"], b.status()["links"])

    sub_client = client_factory(b.endpoint)
    got = Collector()
    sub = sub_client.subscribe("NET.>", got, durable="net")

    def a_has_route() -> bool:
        rows: list[dict[str, Any]] = a.call(lambda node: node.engine.interest())
        return any(r["pattern"] == "NET.>" and r["origin"] == "B" for r in rows)

    assert wait_until(a_has_route, WAIT)
    publisher = client_factory(a.endpoint)
    publisher.publish("NET.X", b"live")
    assert got.wait_payload(b"live")

    detach_and_sync(sub_client, sub)
    sub_client.close()
    assert wait_until(lambda: durable_is(b, "net", attached=False, stored=0), WAIT)
    # the interest stays: A keeps routing NET.> to B (checked over a few heartbeats)
    assert not wait_until(lambda: not a_has_route(), 1.0)

    publish_all(publisher, "NET.X", numbers(n))
    assert wait_until(lambda: durable_is(b, "net", stored=n), WAIT), durable_of(b, "net")
    assert a_has_route()

    back = client_factory(b.endpoint)
    again = Collector()
    back.subscribe("NET.>", again, durable="net")
    assert back.durable_info["net"]["stored"] == n
    publisher.publish("NET.X", b"barrier")
    assert again.wait_payload(b"barrier"), again.payloads()
    assert again.payloads() == [*numbers(n), b"barrier"]
    assert not any(again.redelivered())
    assert wait_until(lambda: durable_is(b, "net", stored=0, in_flight=0), WAIT)
    assert got.payloads() == [b"live"]


# -- 10. CLI --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_sub_durable_receives_exactly_the_stored_messages(
    broker: Broker, client_factory: ClientFactory, procs: Any, wait_until: WaitUntil
) -> None:
    n = 12
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("CLI.>", lambda m: None, durable="cli"))
    publish_all(client, "CLI.X", numbers(n))
    assert wait_until(lambda: durable_is(broker, "cli", stored=n), WAIT)

    args = ("sub", "CLI.>", "--durable", "cli", "--json", "--broker", broker.endpoint)
    rc, out, err = procs.run(*args, "--count", str(n), timeout=WAIT)
    assert rc == 0, err
    assert "Traceback" not in err
    objs = [json.loads(line) for line in out.splitlines()]
    assert [o["payload"] for o in objs] == [str(i) for i in range(n)]
    assert all(o["topic"] == "CLI.X" and o["pattern"] == "CLI.>" for o in objs)
    # every one was acknowledged, also the last before the process exited
    assert wait_until(lambda: durable_is(broker, "cli", stored=0), WAIT), durable_of(broker, "cli")

    # a second run gets only what came since: nothing of the first run again
    client.publish("CLI.X", b"next")
    assert wait_until(lambda: durable_is(broker, "cli", stored=1), WAIT)
    rc, out, err = procs.run(*args, "--count", "1", timeout=WAIT)
    assert rc == 0, err
    assert [json.loads(line)["payload"] for line in out.splitlines()] == ["next"]


@pytest.mark.slow
def test_cli_sub_durable_count_leaves_the_rest_stored(
    broker: Broker, client_factory: ClientFactory, procs: Any, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("CLR.>", lambda m: None, durable="clr"))
    publish_all(client, "CLR.X", numbers(10))
    assert wait_until(lambda: durable_is(broker, "clr", stored=10), WAIT)
    args = ("sub", "CLR.>", "--durable", "clr", "--json", "--broker", broker.endpoint)
    rc, out, err = procs.run(*args, "--count", "3", timeout=WAIT)
    assert rc == 0, err
    assert [json.loads(line)["payload"] for line in out.splitlines()] == ["0", "1", "2"]
    # the 7 not printed are still there for the next run
    assert wait_until(lambda: durable_is(broker, "clr", stored=7), 3.0), durable_of(broker, "clr")


@pytest.mark.slow
def test_cli_sub_durable_with_two_patterns_is_a_usage_error(procs: Any) -> None:
    rc, out, err = procs.run(
        "sub", "A.>", "B.>", "--durable", "two", "--broker", endpoint(1), timeout=WAIT
    )
    assert rc == 2, (out, err)
    assert "--durable takes exactly one PATTERN" in err
    assert "Traceback" not in err
    assert out == ""


@pytest.mark.slow
def test_a_killed_subscriber_is_detached_and_what_it_had_comes_again(
    broker: Broker,
    client_factory: ClientFactory,
    procs: Any,
    subscriber_script: Path,
    wait_until: WaitUntil,
) -> None:
    """A subscriber process with credit 5 attaches to 20 stored messages and is killed
    (kill -9) at the third, with messages in flight to it and more waiting. With its credit
    used up the node never sends to it again, so it used to stay "attached" for ever. The
    node's probe (a PING it ignores, every DURABLE_PROBE_INTERVAL) finds the connection
    gone and detaches it; the next subscriber gets everything not acknowledged, the
    in-flight ones flagged redelivered."""
    from zbroker.features.durables import DURABLE_PROBE_INTERVAL

    setup = client_factory(broker.endpoint)
    detach_and_sync(setup, setup.subscribe("KILL.>", lambda m: None, durable="killed"))
    publish_all(client_factory(broker.endpoint), "KILL.X", numbers(20))
    assert wait_until(lambda: durable_is(broker, "killed", stored=20), WAIT)
    proc = start_subscriber(
        procs, subscriber_script, broker.endpoint, "KILL.>", "killed", count=100, credit=5,
        kill_at=3,
    )  # fmt: skip
    assert proc.wait(WAIT) == -signal.SIGKILL
    t0 = time.monotonic()
    assert wait_until(lambda: durable_is(broker, "killed", attached=False), WAIT)
    assert time.monotonic() - t0 < DURABLE_PROBE_INTERVAL + 2.0
    stored = durable_of(broker, "killed")
    assert stored is not None
    k = stored["stored"]  # 20 less what it acknowledged before it died (at most 2)
    f = stored["in_flight"]  # sent to it, never acknowledged (its credit: at most 5)
    assert 18 <= k <= 20 and 1 <= f <= 5, stored
    got = Collector()
    client_factory(broker.endpoint).subscribe("KILL.>", got, durable="killed", credit=100)
    assert got.wait_for(k)
    assert wait_until(lambda: durable_is(broker, "killed", stored=0, in_flight=0), WAIT)
    assert got.payloads() == numbers(20)[20 - k :]
    # what it had been sent and not acknowledged comes flagged; what was never sent not
    assert got.redelivered() == [True] * f + [False] * (k - f)
