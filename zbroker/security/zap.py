"""The node's ZAP handler (ZeroMQ RFC 27): who a connecting CURVE key is.

A key of the allowlist is the user ``node:BROKER_ID``, a client key ``client:NAME``; any
other key is refused, logged with the peer address and counted (``auth_failures``).
ZeroMQ stamps the user id on every frame of an accepted connection
(``frame.get("User-Id")``), and the connection's serial number, given here (property
:data:`CONN_PROPERTY` of the reply's metadata): what tells two connections of one key
apart. The handler is polled by the node's own loop: no extra thread,
nothing shared between nodes in one process, because each node has its own
``zmq.Context`` and so its own ZAP endpoint.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import zmq
from zmq.utils import z85

from ..errors import ConfigError
from .logs import ThrottledLog
from .permissions import ClientRule

__all__ = ["CONN_PROPERTY", "ZAP_DOMAIN", "ZapHandler", "user_ids"]

ZAP_DOMAIN = b"zbroker"
#: the frame property (ZAP metadata) holding an accepted connection's serial number
CONN_PROPERTY = "Zbroker-Conn"
_CONN_NAME = CONN_PROPERTY.encode()
_ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_ZAP_VERSION = b"1.0"


def user_ids(nodes: dict[str, bytes], clients: dict[str, ClientRule]) -> dict[bytes, str]:
    """Z85 public key -> user id; a key is either a node's or a client's."""
    users = {key: "node:" + broker_id for broker_id, key in nodes.items()}
    for name, rule in clients.items():
        if rule.key in users:
            raise ConfigError(
                f"client {name!r} uses the key of {users[rule.key]!r}: a key is "
                "either a node's or a client's"
            )
        users[rule.key] = "client:" + name
    return users


class ZapHandler:
    """Answers ZAP requests on its ROUTER (``sock``, once bound) from the known keys."""

    def __init__(self, users: dict[bytes, str], log: ThrottledLog) -> None:
        #: Z85 public key -> user id (replaced whole on a reload)
        self.users = users
        self._log = log
        self.sock: zmq.Socket[bytes] | None = None
        #: connections refused (unknown key, or not CURVE)
        self.failures = 0
        #: the serial number given to the last connection accepted (they count up from 1)
        self.serial = 0
        #: called before each serial is given (the node learns of earlier disconnects
        #: first: see :mod:`zbroker.node.secure_subs`)
        self.before_serial: Callable[[], None] | None = None
        #: told (address, reason) of each refusal (the node's auth advisory)
        self.on_refused: Callable[[str, str], None] | None = None

    def bind(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        """Bind the handler (before any CURVE server binds: without a handler, libzmq
        would let every key in)."""
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(_ZAP_ENDPOINT)
        self.sock = sock
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None

    def on_requests(self) -> None:
        """Answer every waiting ZAP request: known key -> 200 with its user id."""
        sock = self.sock
        assert sock is not None
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) < 8 or frames[1] != b"":
                continue  # not a ZAP request: libzmq never sends one
            ident, _, version, request_id, domain, address, _identity, mechanism = frames[:8]
            user, why = self._identify(version, mechanism, frames[8:])
            if user:
                if self.before_serial is not None:
                    self.before_serial()
                self.serial += 1
                meta = _property(_CONN_NAME, str(self.serial).encode())
                reply = [ident, b"", _ZAP_VERSION, request_id, b"200", b"OK", user.encode(), meta]
            else:
                self.failures += 1
                peer = address.decode("utf-8", "replace")
                self._log.warn(
                    peer,
                    why,
                    "authentication failed from %s (domain %s): %s",
                    peer,
                    domain.decode("utf-8", "replace"),
                    why,
                )
                if self.on_refused is not None:
                    self.on_refused(peer, why)
                reply = [ident, b"", _ZAP_VERSION, request_id, b"400", why.encode()[:255], b"", b""]
            try:
                sock.send_multipart(reply, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass

    def _identify(self, version: bytes, mechanism: bytes, creds: list[bytes]) -> tuple[str, str]:
        """(user id, "") for a request from a known CURVE key, else ("", why not)."""
        if version != _ZAP_VERSION:
            return "", "bad ZAP version"
        if mechanism != b"CURVE" or len(creds) != 1 or len(creds[0]) != 32:
            return "", f"mechanism {mechanism.decode('ascii', 'replace')} (CURVE required)"
        key = z85.encode(creds[0])
        user = self.users.get(key, "")
        return (user, "") if user else ("", f"unknown key {key.decode()}")


def _property(name: bytes, value: bytes) -> bytes:
    """One ZMTP metadata property (RFC 27's metadata frame): name, then a sized value."""
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value
