"""Subscriptions with security on: the XPUB is in manual mode, so a subscription takes
effect (for the connection that sent it) only when the sender's key may subscribe to
the pattern.

Every (un)subscribe the XPUB reports carries its connection's user id, serial number
(given by the ZAP handler, :data:`~zbroker.security.CONN_PROPERTY`) and file descriptor.
A connection holds a pattern once, as libzmq's filter does (subscribed twice, one
unsubscribe ends it); local interest ``clients`` in a pattern lasts while at least one
connection holds it, approved. libzmq's own unsubscriptions for a closed connection say
nothing of whose they are (and include what was refused), so they are ignored: the XPUB's
monitor reports the closed connection's descriptor, and the connection on it leaves with
what it held. No unsubscribe is ever charged to another connection.

Descriptors are reused. A connection's serial is given only once the XPUB's monitor has
been drained (``ZapHandler.before_serial``), so when a descriptor is reported closed,
every connection that had it has a serial no higher than the last one given: its frames
still queued are ignored, and the next connection on that descriptor (a higher serial) is
not taken for it.

A refused subscribe is counted and logged, never applied, and answered: the connection's
next sync key is echoed as ``key NUL msgpack({"error": text, "refused": [patterns]})``
for the refusals since its previous sync key, so a client that checked nothing itself
still gets a PermissionDenied; a sync key after nothing refused is echoed as is.
"""

from __future__ import annotations

import logging
import socket

import msgpack
import zmq

from .. import wire
from ..security import CONN_PROPERTY, Security
from .delivery import Delivery
from .selected import split_name

__all__ = ["SecureSubscriptions"]

log = logging.getLogger("zbroker.node")

#: refusals one connection's sync answer names at most (a flood names the first ones)
MAX_REFUSALS = 64
#: a shorter sync key is refused: subscribed, ``\x02`` alone would get every echo
SYNC_MIN = len(wire.SYNC_PREFIX) + 8


class _Conn:
    """One connection of the XPUB: the patterns it holds, refusals not yet answered."""

    __slots__ = ("fd", "held", "refused", "user")

    def __init__(self, fd: int, user: str) -> None:
        self.fd = fd
        self.user = user
        self.held: set[str] = set()
        self.refused: list[tuple[str, str]] = []  # (pattern, why) since its last sync key


class SecureSubscriptions:
    def __init__(self, delivery: Delivery, security: Security) -> None:
        self._delivery = delivery
        self._security = security
        self._conns: dict[int, _Conn] = {}  # by serial
        self._by_fd: dict[int, int] = {}  # descriptor -> serial of the connection on it
        self._closed_upto: dict[int, int] = {}  # descriptor -> newest serial closed there
        #: pattern -> connections holding it (approved)
        self.holders: dict[str, int] = {}
        security.on_disconnect(self.closed)

    def on_subscriptions(self, budget: int) -> None:
        sock = self._delivery.sock
        for _ in range(budget):
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                user = str(frame.get("User-Id"))
                serial = int(frame.get(CONN_PROPERTY))
                fd = int(frame.get("__fd"))  # the descriptor libzmq notes for SRCFD
            except zmq.ZMQError:
                continue  # libzmq's unsubscription for a closed connection: see above
            conn = self._conn(serial, fd, user)
            parsed = self._delivery.parse(frame.bytes)
            if conn is None or parsed is None:
                continue  # a closed connection's frame read late, or malformed (counted)
            subscribe, key, pattern = parsed
            if pattern is None:
                self._sync(conn, user, subscribe, key)
            elif subscribe:
                self._subscribe(conn, user, key, pattern)
            else:
                self._unsubscribe(conn, key, pattern)
            log.debug("local interest %s %s (%s)", "+" if subscribe else "-", pattern, user)

    def closed(self, fd: int) -> None:
        """The XPUB's connection on descriptor ``fd`` closed: it leaves with what it held."""
        self._closed_upto[fd] = self._security.conn_serial
        serial = self._by_fd.get(fd)
        if serial is not None:
            self._leave(serial)

    def revoke(self) -> int:
        """After a reload of the permissions: end every connection that holds a pattern
        its key may no longer subscribe to (a key no longer a client's may subscribe to
        nothing). libzmq offers no way to drop one connection's subscription later (in
        manual mode a subscription is applied for the connection whose frame is being
        read), so the connection's TCP socket is shut down: libzmq closes it, the client's
        socket reconnects and sends its subscriptions again, and each is checked against
        the new rules. Returns how many were ended."""
        sec = self._security
        sec.drain_deliver()  # closed descriptors first: never end a newcomer on a reused one
        ended = 0
        for serial, conn in list(self._conns.items()):
            if all(sec.may_subscribe(conn.user, split_name(p)[0]) for p in conn.held):
                continue
            self._closed_upto[conn.fd] = max(self._closed_upto.get(conn.fd, 0), serial)
            self._leave(serial)  # its frames still queued are ignored from now on
            if shut_down(conn.fd):
                ended += 1
            log.warning(
                "ended the connection of %s: it held a subscription the reloaded permissions "
                "refuse (it may reconnect; each subscription is checked again)",
                conn.user or "an unidentified client",
            )
        return ended

    def _conn(self, serial: int, fd: int, user: str) -> _Conn | None:
        """The connection a frame came from; None if it is known closed."""
        conn = self._conns.get(serial)
        if conn is not None:
            return conn
        if serial <= self._closed_upto.get(fd, 0):
            return None
        older = self._by_fd.get(fd)
        if older is not None and older < serial:
            self._leave(older)  # its descriptor is another connection's now: it is gone
        self._by_fd[fd] = serial
        conn = self._conns[serial] = _Conn(fd, user)
        return conn

    def _leave(self, serial: int) -> None:
        conn = self._conns.pop(serial)
        if self._by_fd.get(conn.fd) == serial:
            del self._by_fd[conn.fd]
        for pattern in conn.held:
            self._release(pattern)

    def _release(self, pattern: str) -> None:
        left = self.holders[pattern] - 1
        if left:
            self.holders[pattern] = left
        else:
            del self.holders[pattern]
            self._delivery.last(pattern)

    def _subscribe(self, conn: _Conn, user: str, key: bytes, pattern: str) -> None:
        sec = self._security
        base = split_name(pattern)[0]  # (a name with a selector)
        if not sec.may_subscribe(user, base):
            why = sec.refuse("subscribe to", user, base)
            if len(conn.refused) < MAX_REFUSALS:
                conn.refused.append((pattern, why))
            return
        self._delivery.sock.setsockopt(zmq.SUBSCRIBE, key)  # for the connection that asked
        if pattern in conn.held:
            return
        conn.held.add(pattern)
        n = self.holders.get(pattern, 0)
        self.holders[pattern] = n + 1
        if not n:
            self._delivery.first(pattern)

    def _unsubscribe(self, conn: _Conn, key: bytes, pattern: str) -> None:
        if pattern not in conn.held:
            return  # it never held it (refused, or a stray unsubscribe)
        conn.held.discard(pattern)
        self._delivery.sock.setsockopt(zmq.UNSUBSCRIBE, key)
        self._release(pattern)

    def _sync(self, conn: _Conn, user: str, subscribe: bool, key: bytes) -> None:
        sock = self._delivery.sock
        if not subscribe:
            sock.setsockopt(zmq.UNSUBSCRIBE, key)
            return
        if len(key) < SYNC_MIN:
            self._security.refuse("subscribe to", user, "a sync key this short")
            return
        sock.setsockopt(zmq.SUBSCRIBE, key)
        if not conn.refused:
            self._delivery.echo(key)
            return
        refused, conn.refused = conn.refused, []
        answer = {"error": "; ".join(why for _, why in refused), "refused": [p for p, _ in refused]}
        self._delivery.echo(key + b"\0" + msgpack.packb(answer))


def shut_down(fd: int) -> bool:
    """Shut down the TCP connection on descriptor ``fd`` (libzmq's: it sees the end and
    closes the descriptor itself; we never close it). False if ``fd`` is not a socket."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        return False
    finally:
        sock.detach()
    return True
