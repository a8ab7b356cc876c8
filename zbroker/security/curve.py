"""CURVE on the node's sockets, and the handshakes that fail before authentication.

Every socket that crosses a network is a CURVE socket: the node's control ROUTER, publish
PULL and deliver XPUB are CURVE servers with the node's key pair that need the ZAP
handler's approval; each link DEALER is a CURVE client that authenticates the peer it
dials by that peer's public key (from the allowlist) and presents the node's own key.
A handshake that fails before authentication (a plain peer, a wrong server key) never
reaches the ZAP handler: a monitor on the socket counts it. The deliver XPUB's monitor also
reports each closed connection (its file descriptor): libzmq's own unsubscriptions for a
closed connection do not say whose they are, so the node's subscriptions are ended by
this event instead (:mod:`zbroker.node.secure_subs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from .logs import ThrottledLog
from .zap import ZAP_DOMAIN

__all__ = ["HandshakeMonitors", "dial", "serve"]


def serve(sock: zmq.Socket[bytes], public_key: bytes, secret_key: bytes) -> None:
    """Make ``sock`` a CURVE server that needs the ZAP handler's approval."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret_key)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public_key)
    sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)


def dial(
    sock: zmq.Socket[bytes],
    server_key: bytes | None,
    peer: str | None,
    public_key: bytes,
    secret_key: bytes,
) -> str | None:
    """Make ``sock`` a CURVE client of node ``peer`` whose key (from the allowlist) is
    ``server_key``; returns a problem or None."""
    if peer is None:
        return 'security is on: the link needs the peer\'s broker ID (peer = "ID")'
    if server_key is None:
        return f"peer {peer!r} is not in the allowlist: its public key is unknown"
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public_key)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret_key)
    return None


_HANDSHAKE_REASONS: dict[int, str] = {
    int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH): "not CURVE (a plain client or node?)",
    int(zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC): "CURVE handshake failed (wrong server key?)",
}


class HandshakeMonitors:
    """Monitors of the CURVE sockets' failed handshakes, counted by reason, and of the
    deliver XPUB's closed connections."""

    def __init__(self, log: ThrottledLog) -> None:
        self._log = log
        #: (socket, its monitor socket) for each watched socket
        self.monitors: list[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]] = []
        #: handshakes that failed before authentication, by reason
        self.failures: dict[str, int] = {}
        #: the XPUB's monitor, and who is told of its closed connections (by descriptor)
        self.deliver: zmq.Socket[bytes] | None = None
        self.on_disconnect: Callable[[int], None] | None = None

    def watch(self, sock: zmq.Socket[bytes]) -> zmq.Socket[bytes]:
        """A monitor of ``sock``'s failed handshakes (and for the XPUB, of its closed
        connections), for the node's poller. (Failures of authentication itself are the
        ZAP handler's to count: it knows the address.)"""
        events = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        xpub = sock.type == zmq.XPUB
        if xpub:
            events |= zmq.EVENT_DISCONNECTED
        mon = sock.get_monitor_socket(events)
        if xpub:
            self.deliver = mon
        self.monitors.append((sock, mon))
        return mon

    def drain_deliver(self) -> None:
        """Handle what the XPUB's monitor holds now (before a new connection's serial)."""
        if self.deliver is not None:
            self.on_events(self.deliver)

    def on_events(self, mon: zmq.Socket[bytes]) -> None:
        """Count (and log) the failures ``mon`` reports; pass on closed connections."""
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            info: dict[str, Any] = dict(event)
            value = info.get("value")
            kind = info.get("event")
            if kind == zmq.EVENT_DISCONNECTED:
                if self.on_disconnect is not None:
                    self.on_disconnect(int(value or 0))  # the connection's descriptor
                continue
            if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                # e.g. a plain peer that sent its greeting and hung up (value: an errno)
                reason = "handshake broke off (not CURVE, or the peer left)"
            else:
                reason = _HANDSHAKE_REASONS.get(int(value or 0), f"protocol error {value}")
            self.failures[reason] = self.failures.get(reason, 0) + 1
            endpoint = info.get("endpoint", b"")
            where = endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)
            # libzmq names only our endpoint here, not the peer's address
            self._log.warn(where, reason, "handshake failed on %s: %s", where, reason)

    def close(self) -> None:
        for sock, mon in self.monitors:
            if not sock.closed:
                sock.disable_monitor()
            mon.close(linger=0)
        self.monitors.clear()
        self.deliver = None
