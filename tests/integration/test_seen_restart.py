"""The persistent dedupe survives a node restart (issue 18, carried over): D, the far corner
of a diamond P - {M1, M2} - D, took P's persistent stream from M1, is restarted, and then
gets copies of the same messages from M2 (the route changed): each message reaches D's
durable queue and retention log exactly once.

M1 and M2 are raw link peers speaking the link protocol (handshake, PMSGS, PACK), so the
second path's copies are exact: the same ``(origin, incarnation, pseq)`` each time. D is a
real in-thread node whose store is closed and opened again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from zbroker import Broker, Client, wire
from zbroker.config import RetainRule
from zbroker.const import PROTOCOL_VERSION

WAIT = 30.0
BrokerFactory = Callable[..., Broker]


class Middle:
    """A neighbour of D carrying P's persistent messages over a link D accepts."""

    def __init__(self, d: Broker, peer: str) -> None:
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, f"{peer}/d".encode())
        self.sock.connect(f"tcp://127.0.0.1:{d.ports['control']}")
        self.peer = peer
        self.lseq = 0
        hello = {
            "id": peer,
            "incarnation": 1,
            "group": "default",
            "version": PROTOCOL_VERSION,
            "name": "d",
            "duplex": True,
            "ttl": 8,
            "conduit": False,
            "include": [],
            "exclude": [],
            "static": [],
            "heartbeat_interval": 0.5,
            "heartbeat_timeout": WAIT,
        }
        self.sock.send(wire.encode_link(wire.LINK_HELLO, hello))
        assert self.expect(wire.LINK_WELCOME) is not None

    def expect(self, kind: int, upto: int | None = None) -> list[Any] | None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.sock.poll(50):
                value = msgpack.unpackb(self.sock.recv(), raw=False, strict_map_key=False)
                if value[0] == kind and (upto is None or value[2] >= upto):
                    return list(value)
        return None

    def send(self, pseqs: list[int]) -> None:
        """P's persistent messages ``pseqs`` (incarnation 1), then wait for D's PACK."""
        entries = []
        for pseq in pseqs:
            self.lseq += 1
            path = ["P", self.peer]
            entries.append(
                [self.lseq, "T.x", str(pseq).encode(), 0, None, "P", 1, pseq, 1.0, path, None, pseq]
            )
        self.sock.send(wire.encode_link(wire.PMSGS, 1, 1, entries))
        assert self.expect(wire.PACK, self.lseq) is not None, "D did not acknowledge"

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


@pytest.fixture
def middles() -> Iterator[list[Middle]]:
    made: list[Middle] = []
    yield made
    for m in made:
        m.close()


def stored(d: Broker) -> tuple[list[int], int, int]:
    """(payloads in D's retention log, messages in its durable queue, repeats dropped)."""
    with Client(d.endpoint, timeout=10.0) as c:
        logged = [int(m.payload) for m in c.read("T.>", limit=10_000)]
        (q,) = [q for q in c.status()["durables"] if q["name"] == "d"]
        dup = c.status()["forward"]["persistent_duplicates"]
        return logged, int(q["stored"]), int(dup)


def test_a_copy_by_another_path_after_a_restart_is_taken_once(
    broker_factory: BrokerFactory, middles: list[Middle], tmp_path: Path
) -> None:
    data = tmp_path / "D"
    options: dict[str, Any] = {"broker_id": "D", "data_dir": data, "retain": (RetainRule("T.>"),)}
    d = broker_factory(**options)
    with Client(d.endpoint, timeout=10.0) as c:
        c.subscribe("T.>", lambda m: None, durable="d").unsubscribe()  # a queue, detached
    m1 = Middle(d, "M1")
    middles.append(m1)
    # in order, then with a gap: both the floor and the numbers above it are exercised
    first = [*range(1, 101), *range(150, 161)]
    m1.send(first)
    assert stored(d) == (first, len(first), 0)
    d.stop()

    d = broker_factory(**options)
    m2 = Middle(d, "M2")
    middles.append(m2)
    # the route moved to M2, which carries the stream from the start
    m2.send(list(range(1, 201)))
    logged, queued, dup = stored(d)
    new = [*range(101, 150), *range(161, 201)]
    assert logged == first + new
    assert queued == 200
    assert dup == len(first)
