"""What the fuzz tests share (:mod:`.test_fuzz`, :mod:`.test_fuzz_regressions`), and the
other raw-socket tests with them: the node's limits, the handshaken fuzz link's names, the
readers of the node's counters, raw sockets to a node (:class:`RawPeer`, the ``raw``
fixture) and a valid MSGS entry to mutate (``_entry``)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import zmq

from zbroker import Broker, Client, wire
from zbroker.const import PROTOCOL_VERSION
from zbroker.store import RetainRule

HOST = "127.0.0.1"
WAIT = 30.0  # seconds: upper bound of any wait for the node (busy CI machines are slow)
LIMIT = 4096  # the node's max_frame_bytes in these tests
GUARD = 4 * LIMIT  # libzmq's MAXMSGSIZE on control and publish: larger frames drop the peer
LINK_PEER = "fuzzpeer"
LINK_NAME = "fz"
LINK_IDENT = f"{LINK_PEER}/{LINK_NAME}".encode()

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


def pack(value: Any) -> bytes:
    """``value`` in msgpack, with the codec's defaults (as the node's peers send it)."""
    packed: bytes = msgpack.packb(value)
    return packed


def link_hello() -> dict[str, Any]:
    """A valid LINK_HELLO map for the handshaken fuzz link."""
    return {
        "id": LINK_PEER,
        "incarnation": 1,
        "group": "default",
        "version": PROTOCOL_VERSION,
        "name": LINK_NAME,
        "duplex": True,
        "ttl": 8,
        "conduit": False,
        "include": [],
        "exclude": [],
        "static": [],
        "heartbeat_interval": 0.5,
        "heartbeat_timeout": 5.0,
    }


def counters(b: Broker) -> dict[str, Any]:
    result: dict[str, Any] = b.status()["counters"]
    return result


def bad_reasons(c: dict[str, Any]) -> Counter[str]:
    return Counter(
        {
            k.removeprefix("bad_input."): v
            for k, v in c["dropped"].items()
            if k.startswith("bad_input.")
        }
    )


def check_no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    errors = [
        r
        for r in caplog.records
        if (r.name.startswith("zbroker") and r.levelno >= logging.ERROR) or r.exc_info
    ]
    assert not errors, [f"{r.name}: {r.getMessage()}" for r in errors[:5]]


def wait_for(cond: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class RawPeer:
    """Raw sockets to one node: a control DEALER, a PUSH, and a DEALER for a link."""

    def __init__(self, b: Broker) -> None:
        self.b = b
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.control = self._socket(zmq.DEALER, b.ports["control"])
        self.push = self._socket(zmq.PUSH, b.ports["publish"])
        self.link = self._socket(zmq.DEALER, b.ports["control"], LINK_IDENT)
        self.delivers: list[dict[str, Any]] = []  # DELIVER bodies seen on the control DEALER

    def _socket(self, kind: int, port: int, ident: bytes | None = None) -> zmq.Socket[bytes]:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if ident is not None:
            s.setsockopt(zmq.ROUTING_ID, ident)
        s.connect(f"tcp://{HOST}:{port}")
        return s

    def expect(
        self, sock: zmq.Socket[bytes], want: Callable[[list[Any]], bool]
    ) -> list[Any] | None:
        """The first frame on ``sock`` that ``want`` accepts; None once the node thread is
        gone (or after WAIT seconds). DELIVER frames are kept in ``delivers``."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if sock.poll(50):
                value = msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
                if sock is self.control and value[0] == wire.DELIVER:
                    self.delivers.append(value[2])
                if want(value):
                    return list(value)
            elif not self.b.running:
                return None
        return None

    def request(self, op: int, body: dict[str, Any], req_id: int = 1) -> list[Any] | None:
        """The reply to a control request, None if none arrives."""
        self.control.send(wire.encode_control(op, req_id, body))
        return self.expect(self.control, lambda v: v[0] != wire.DELIVER and v[1] == req_id)

    def ping(self, sock: zmq.Socket[bytes] | None = None) -> bool:
        """True if the node answers a PING on ``sock`` (after everything sent before it)."""
        sock = sock or self.control
        sock.send(wire.encode_control(wire.PING, 424242, {}))
        return self.expect(sock, lambda v: v[:2] == [wire.PING, 424242]) is not None

    def handshake(self, **changes: Any) -> None:
        """A LINK_HELLO on the link DEALER; returns once the LINK_WELCOME arrived (frames
        of a link that is up already are skipped)."""
        self.link.send(wire.encode_link(wire.LINK_HELLO, {**link_hello(), **changes}))
        value = self.expect(self.link, lambda v: v[0] in (wire.LINK_WELCOME, wire.LINK_REFUSE))
        assert value is not None and value[0] == wire.LINK_WELCOME, value

    def open_durable(self) -> None:
        body = {"name": "d1", "pattern": "T.>", "credit": 10, "max_msgs": 0}
        opened = self.request(wire.DURABLE_OPEN, body)
        assert opened is not None and opened[0] == wire.DURABLE_OPEN, opened

    def close(self) -> None:
        for s in (self.control, self.push, self.link):
            s.close(linger=0)
        self.ctx.term()


@pytest.fixture
def raw(broker_factory: BrokerFactory) -> Iterator[RawPeer]:
    """A node that retains R.> (the T.* topics of these tests are not retained), and raw
    sockets to it."""
    b = broker_factory(max_frame_bytes=LIMIT, retain=(RetainRule("R.>"),))
    peer = RawPeer(b)
    try:
        yield peer
    finally:
        peer.close()


def _entry(**changes: Any) -> list[Any]:
    """A valid MSGS entry, with ``changes``."""
    m = {
        "topic": "T.x",
        "payload": b"p",
        "fmt": 0,
        "headers": None,
        "origin": "orig",
        "inc": 1,
        "seq": 1,
        "ts": 1.0,
        "path": ["orig", LINK_PEER],  # (a path ends with the peer that sent it)
        "targets": None,
    }
    m.update(changes)
    return list(m.values())
