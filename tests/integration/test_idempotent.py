"""Idempotent persistent publishes (issue 18, item 8): a persistent publish whose
confirmation is lost and that is retried is stored exactly once.

The confirmation is lost at the client (its reply dropped as it arrives), so the node has
stored the message and answered, and the publisher never hears of it: the situation a
timeout leaves. Counts are exact: the node's retention log and a durable queue.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_ready, wait_until
from tests.node_configs import link_toml, node_toml
from zbroker import Broker, Client, ClientClosed, PublishTimeout, RequestError, wire
from zbroker.store import RetainRule

WAIT = 30.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


class LostReplies:
    """Drops the PUBLISH replies a client gets while ``dropping`` is above 0 (each drop
    counts it down; -1: drop every one until set to 0)."""

    def __init__(self, client: Client, dropping: int = 1) -> None:
        self.dropping = dropping
        self.dropped = 0
        self._lock = threading.Lock()
        requests = client._thread._requests  # the client thread's requests in flight
        self._reply = requests.reply
        requests.reply = self._filter  # type: ignore[method-assign]

    def _filter(self, op: int, req_id: int, body: dict[str, Any]) -> None:
        with self._lock:
            drop = op == wire.PUBLISH and self.dropping != 0
            if drop:
                self.dropped += 1
                if self.dropping > 0:
                    self.dropping -= 1
        if not drop:
            self._reply(op, req_id, body)


def publish_until_confirmed(client: Client, topic: str, payload: bytes) -> dict[str, Any]:
    """What an application does with a persistent message it must not lose."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            reply: dict[str, Any] = client.publish(topic, payload, persistent=True, confirm=True)
            return reply
        except PublishTimeout as exc:
            assert time.monotonic() < deadline, exc


def durable_stored(client: Client, name: str) -> int:
    (d,) = [d for d in client.status()["durables"] if d["name"] == name]
    return int(d["stored"])


def test_lost_confirmation_retried_is_stored_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(broker_id="I", retain=(RetainRule("IP.>"),))
    sub = client_factory(broker.endpoint)
    sub.subscribe("IP.>", lambda m: None, durable="d").unsubscribe()  # a queue, detached
    pub = client_factory(broker.endpoint, publish_timeout=2.0)
    lost = LostReplies(pub)
    first = publish_until_confirmed(pub, "IP.X", b"once")
    assert lost.dropped == 1
    second = pub.publish("IP.X", b"next", persistent=True, confirm=True)
    assert [m.payload for m in sub.read("IP.>")] == [b"once", b"next"]
    assert durable_stored(sub, "d") == 2
    # the retry was answered as the first try was: same message id and log sequence
    assert first["id"] == ["I", broker.incarnation, 1] and first["retained_seq"] == 1
    assert second["id"] == ["I", broker.incarnation, 2] and second["retained_seq"] == 2


def test_publishing_again_after_a_timeout_is_its_retry(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """The library gave up (every confirmation lost): PublishTimeout says the message may
    have been stored, and publishing the same message again is safe."""
    broker = broker_factory(broker_id="I", retain=(RetainRule("IP.>"),))
    pub = client_factory(broker.endpoint, publish_timeout=1.5)
    lost = LostReplies(pub, dropping=-1)
    with pytest.raises(PublishTimeout) as info:
        pub.publish("IP.X", b"once", {"h": 1}, persistent=True, confirm=True)
    text = str(info.value)
    assert "it may have been stored" in text and "Retrying is safe" in text, text
    assert lost.dropped >= 2  # the library tried more than once (each stored once)
    lost.dropping = 0
    again = pub.publish("IP.X", b"once", {"h": 1}, persistent=True, confirm=True)
    assert again == {"id": ["I", broker.incarnation, 1], "retained_seq": 1, "duplicate": True}
    # a different message (other headers) is a new one
    other = pub.publish("IP.X", b"once", {"h": 2}, persistent=True, confirm=True)
    assert other == {"id": ["I", broker.incarnation, 2], "retained_seq": 2}
    assert [(m.payload, m.headers) for m in pub.read("IP.>")] == [
        (b"once", {"h": 1}),
        (b"once", {"h": 2}),
    ]
    assert pub.status()["persistent"] == {"producers": 1, "duplicates": lost.dropped}


def test_unconfirmed_publishes_stay_within_the_window(
    broker_factory: BrokerFactory, client_factory: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client keeps its unconfirmed persistent publishes within the span of sequences a
    node remembers: past it, a publish waits for a confirmation."""
    monkeypatch.setattr(wire, "PRODUCER_WINDOW", 3)  # (the client's view of it)
    broker = broker_factory(broker_id="I", retain=(RetainRule("IP.>"),))
    pub = client_factory(broker.endpoint, publish_timeout=WAIT)
    lost = LostReplies(pub, dropping=-1)
    futures = [pub.publish("IP.X", b"%d" % i, persistent=True) for i in range(3)]
    timer = threading.Timer(0.5, lambda: setattr(lost, "dropping", 0))
    timer.start()
    started = time.monotonic()
    futures.append(pub.publish("IP.X", b"3", persistent=True))  # waits for room
    assert time.monotonic() - started >= 0.5
    assert [f.result(WAIT)["retained_seq"] for f in futures] == [1, 2, 3, 4]
    assert [m.payload for m in pub.read("IP.>")] == [b"0", b"1", b"2", b"3"]
    timer.join()


def test_a_retry_older_than_the_window_is_refused(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(broker_id="I", retain=(RetainRule("IP.>"),))
    client = client_factory(broker.endpoint)

    def publish(pseq: int) -> dict[str, Any]:
        body = {"topic": "IP.X", "payload": b"%d" % pseq, "fmt": 0, "headers": None}
        return client.request(wire.PUBLISH, {**body, "producer": 77, "pseq": pseq})

    assert publish(1)["retained_seq"] == 1
    assert publish(wire.PRODUCER_WINDOW + 1)["retained_seq"] == 2
    assert publish(2)["retained_seq"] == 3  # within the window, never taken: new
    assert publish(2) == {"id": ["I", broker.incarnation, 3], "retained_seq": 3, "duplicate": True}
    with pytest.raises(RequestError, match="may have been stored"):
        publish(1)
    with pytest.raises(RequestError, match="producer must be"):
        client.request(wire.PUBLISH, {"topic": "IP.X", "payload": b"", "producer": 0, "pseq": 1})
    assert client.log_range() == (1, 3)


# -- real processes: a node restart, a client failover ----------------------------------------

RETAIN = """
[[retain]]
pattern = "IP.>"
"""


class Nodes:
    """``zbroker start`` processes by name; C (if any) dials every other node."""

    def __init__(
        self, procs: Any, tmp_path: Path, free_port: Callable[[], int], names: str, retain: str
    ) -> None:
        self.procs = procs
        self.ports = {n: free_port() for n in names}
        self.configs: dict[str, Path] = {}
        self.running: dict[str, Any] = {}
        for name in names:
            links = ""
            if name == "C":
                links = "".join(
                    link_toml(f"c{o.lower()}", self.ports[o]) for o in names if o != "C"
                )
            path = tmp_path / f"{name}.toml"
            path.write_text(
                node_toml(
                    name,
                    self.ports[name],
                    tmp_path / name,
                    (RETAIN if name in retain else "") + links,
                )
            )
            self.configs[name] = path

    def ep(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def start(self, name: str) -> None:
        proc = self.procs.zbroker("start", "--config", str(self.configs[name]))
        self.running[name] = proc
        wait_ready(self.ep(name), proc=proc)

    def kill(self, name: str) -> None:
        proc = self.running.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)

    def status(self, name: str) -> dict[str, Any]:
        with Client(self.ep(name), timeout=5.0) as c:
            result: dict[str, Any] = c.status()
            return result

    def retained(self, name: str) -> int:
        return int(self.status(name)["store"]["retained_rows"])

    def routed(self, name: str) -> bool:
        """Does ``name`` route IP.> toward C (the durable's interest)?"""
        with Client(self.ep(name), timeout=5.0) as c:
            return any(r["pattern"] == "IP.>" and r["origin"] == "C" for r in c.routes())

    def durable(self, name: str) -> int:
        with Client(self.ep(name), timeout=5.0) as c:
            return durable_stored(c, "d")

    def nothing_held(self, name: str) -> bool:
        """Has ``name`` no message held in its forward queues?"""
        return bool(self.status(name)["forward"]["held"] == 0)

    def publisher_on_a(self) -> Client:
        """A client whose address list names A and B, placed on A: a client picks a node
        of its list at random, so open clients until one is on A (each try is a coin
        toss; 30 misses in a row would be a bug, which the caller's check shows)."""
        for _ in range(30):
            pub = Client(f"{self.ep('A')},{self.ep('B')}", timeout=5.0, publish_timeout=WAIT)
            if pub.hello["broker_id"] == "A":
                break
            pub.close()
        return pub


@pytest.mark.slow
def test_retry_across_a_node_restart_is_stored_once(
    procs: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    """Stored, confirmation lost, node killed (SIGKILL) and restarted: the retry to the
    restarted node is recognised from its store."""
    nodes = Nodes(procs, tmp_path, free_port, "A", retain="A")
    nodes.start("A")
    with Client(nodes.ep("A"), timeout=5.0) as c:
        c.subscribe("IP.>", lambda m: None, durable="d").unsubscribe()
    pub = Client(nodes.ep("A"), timeout=5.0, publish_timeout=WAIT)
    try:
        lost = LostReplies(pub, dropping=-1)
        fut = pub.publish("IP.X", b"once", persistent=True)
        assert wait_until(lambda: nodes.retained("A") == 1, WAIT)
        inc = nodes.status("A")["incarnation"]  # (the message ID's: A's first life)
        nodes.kill("A")
        lost.dropping = 0
        nodes.start("A")
        reply = fut.result(WAIT)
        assert reply["id"][:2] == ["A", inc] and reply["retained_seq"] == 1, reply
        assert reply.get("duplicate") is True, reply
        pub.publish("IP.X", b"next", persistent=True, confirm=True)
    finally:
        pub.close()
    assert nodes.retained("A") == 2
    assert nodes.durable("A") == 2


@pytest.mark.slow
@pytest.mark.parametrize("case", ["downstream_drops_retry", "retry_first", "other_node_has_it"])
def test_retry_after_failover_is_stored_once(
    case: str, procs: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    """A - C - B (C dials both; durable ``d`` and a retention rule on C). A client on A
    publishes; A stores it and forwards it toward C; every confirmation is lost; A is
    killed; the client fails over to B and its library sends the publish again.

    ``downstream_drops_retry``: B never saw the message (no rule of its own): it takes it
    and forwards it to C, which has A's copy and drops B's.
    ``retry_first``: C is stopped while A takes the publish, so A's copy waits in A's
    queue; C gets B's copy first, and A's when A is restarted: it drops A's.
    ``other_node_has_it``: B retains IP.> too, so it had A's copy (through C): it answers
    the retry as a duplicate, with A's message ID, and stores nothing again."""
    retain = "ABC" if case == "other_node_has_it" else "AC"
    nodes = Nodes(procs, tmp_path, free_port, "ABC", retain=retain)
    for name in "ABC":
        nodes.start(name)
    with Client(nodes.ep("C"), timeout=5.0) as c:
        c.subscribe("IP.>", lambda m: None, durable="d").unsubscribe()
    for name in "AB":
        assert wait_until(partial(nodes.routed, name), WAIT), name
    pub = nodes.publisher_on_a()  # A first
    c_proc = nodes.running["C"]
    try:
        assert pub.hello["broker_id"] == "A"
        lost = LostReplies(pub, dropping=-1)
        if case == "retry_first":
            c_proc.send_signal(signal.SIGSTOP)
        fut = pub.publish("IP.X", b"once", persistent=True)
        assert wait_until(lambda: nodes.retained("A") == 1, WAIT)
        inc = nodes.status("A")["incarnation"]  # (the message ID's: A's first life)
        if case != "retry_first":
            assert wait_until(lambda: nodes.durable("C") == 1, WAIT)
        if case == "other_node_has_it":
            assert wait_until(lambda: nodes.retained("B") == 1, WAIT)
        nodes.kill("A")
        lost.dropping = 0
        if case == "retry_first":
            c_proc.send_signal(signal.SIGCONT)
        reply = fut.result(WAIT)
        if case == "other_node_has_it":
            assert reply == {"id": ["A", inc, 1], "retained_seq": None, "duplicate": True}
        else:
            assert reply["id"][0] == "B" and "duplicate" not in reply, reply  # new to B
        assert wait_until(lambda: nodes.durable("C") == 1, WAIT)
        nodes.start("A")  # its queue toward C (A's copy, if still there) goes on
        for name in "AB":
            assert wait_until(partial(nodes.nothing_held, name), WAIT)
    finally:
        c_proc.send_signal(signal.SIGCONT)
        pub.close()
    c_status = nodes.status("C")
    assert c_status["forward"]["producer_duplicates"] == (0 if case == "other_node_has_it" else 1)
    assert nodes.durable("C") == 1
    assert c_status["store"]["retained_rows"] == 1
    assert nodes.retained("A") == 1
    assert nodes.retained("B") == (1 if case == "other_node_has_it" else 0)


def test_close_fails_what_is_unconfirmed(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """A persistent publish still unconfirmed when its client closes fails with
    ClientClosed (it may have been stored), as does one posted and never taken."""
    broker = broker_factory(broker_id="I", retain=(RetainRule("IP.>"),))
    pub = client_factory(broker.endpoint, publish_timeout=WAIT)
    LostReplies(pub, dropping=-1)
    futures = [pub.publish("IP.X", b"%d" % i, persistent=True) for i in range(50)]
    started = time.monotonic()
    pub.close()
    for f in futures:
        with pytest.raises(ClientClosed):
            f.result(WAIT)
    assert time.monotonic() - started < WAIT / 2
