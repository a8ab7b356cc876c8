"""``Security``: a node's security at run time (node thread only).

It composes the node's key pair, the allowlist, the client permissions, the ZAP handler
and the handshake monitors, and knows who sent the control frame being handled
(:attr:`Security.user`). A link handshake is accepted only from a ``node:`` user whose ID
is the one the HELLO claims, and every later frame on that link must come from the same
user (the node checks it with :meth:`Security.node_user`); a client's control request is
checked against the permission subjects its op declares (the node's op table); what it
publishes on the publish PULL goes through :func:`~.publish_filter.publish_recv`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from . import curve
from .allowlist import load_allowlist
from .keys import load_key_pair
from .logs import ThrottledLog
from .permissions import ClientPermissions, ClientRule, load_clients
from .publish_filter import publish_recv
from .zap import ZapHandler, user_ids

__all__ = ["Reloaded", "Security"]


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload of the allowlist and client permissions changed."""

    #: broker IDs no longer allowed, or whose key changed (their links must end)
    nodes_removed: frozenset[str]
    #: broker IDs newly allowed (a link that failed for want of their key may dial again)
    nodes_added: frozenset[str]
    #: client user ids no longer allowed, or whose key changed (``client:NAME``)
    clients_removed: frozenset[str]

    def summary(self) -> dict[str, list[str]]:
        return {
            "nodes_removed": sorted(self.nodes_removed),
            "nodes_added": sorted(self.nodes_added),
            "clients_removed": sorted(self.clients_removed),
        }


class Security:
    """A node's keys, allowlist and client rules, and its ZAP handler (node thread only).

    ``may_publish`` / ``may_subscribe`` are the permission table's own (cached) checks,
    bound here: the node calls them per message."""

    def __init__(
        self,
        key_file: Path,
        allowlist: Path | None,
        clients: Path | dict[str, Any] | None,
    ) -> None:
        self.public_key, self.secret_key = load_key_pair(key_file)
        self._sources = (allowlist, clients)
        self.nodes, self.clients = _load(allowlist, clients)
        self._log = ThrottledLog()
        self._zap = ZapHandler(user_ids(self.nodes, self.clients), self._log)
        self._perms = ClientPermissions(self.clients)
        self.may_publish = self._perms.may_publish
        self.may_subscribe = self._perms.may_subscribe
        self.may_monitor = self._perms.may_monitor
        #: reloads done, and the wall-clock time of the last one (0: never)
        self.reloads = 0
        self.reloaded_at = 0.0
        self._handshakes = curve.HandshakeMonitors(self._log)
        #: (socket, monitor) of each watched socket
        self.monitors = self._handshakes.monitors
        #: handshakes that failed before authentication (not CURVE, wrong server key)
        self.handshake_failures = self._handshakes.failures
        #: refused operations by kind ("publish", "subscribe", "link", "send")
        self.refused: dict[str, int] = {}
        self._on_permission_refused: Callable[[str, str, str], None] | None = None
        #: user id of the control frame being handled (set by :meth:`recv_control`)
        self.user = ""
        # a new connection's serial is given only once the XPUB's earlier disconnects are
        # known (node.secure_subs relies on this order)
        self._zap.before_serial = self._handshakes.drain_deliver

    def reload(
        self,
        allowlist: Path | None = None,
        clients: Path | dict[str, Any] | None = None,
        *,
        same_sources: bool = True,
    ) -> Reloaded:
        """Load the allowlist and client permissions again (from the sources given at start
        unless ``same_sources`` is False, when ``allowlist`` and ``clients`` replace them)
        and apply them to every later connection and operation. Raises ConfigError, with
        nothing changed, when the new ones do not load; the node applies the rest
        (:mod:`zbroker.node.reload`): connections and links the new rules no longer admit
        are ended there."""
        if same_sources:
            allowlist, clients = self._sources
        nodes, rules = _load(allowlist, clients)
        users = user_ids(nodes, rules)  # a key both a node's and a client's: refused here
        old_nodes, old_clients = self.nodes, self.clients
        self._sources = (allowlist, clients)
        self.nodes, self.clients = nodes, rules
        self._zap.users = users
        self._perms = ClientPermissions(rules)
        self.may_publish = self._perms.may_publish
        self.may_subscribe = self._perms.may_subscribe
        self.may_monitor = self._perms.may_monitor
        self.reloads += 1
        self.reloaded_at = time.time()
        return Reloaded(
            nodes_removed=frozenset(n for n, k in old_nodes.items() if nodes.get(n) != k),
            nodes_added=frozenset(n for n, k in nodes.items() if old_nodes.get(n) != k),
            clients_removed=frozenset(
                "client:" + n
                for n, rule in old_clients.items()
                if n not in rules or rules[n].key != rule.key
            ),
        )

    def node_ok(self, user: str, peer: str) -> bool:
        """May the connection of ``user`` speak for node ``peer`` on a link? (Its key is
        that node's, and the node is still in the allowlist.)"""
        return user == "node:" + peer and peer in self.nodes

    @property
    def auth_failures(self) -> int:
        """Connections the ZAP handler refused."""
        return self._zap.failures

    @property
    def conn_serial(self) -> int:
        """The serial number of the last connection accepted (frame property
        :data:`~.zap.CONN_PROPERTY`; serials count up from 1)."""
        return self._zap.serial

    def on_disconnect(self, handler: Callable[[int], None]) -> None:
        """Call ``handler(fd)`` when a connection of the deliver XPUB closes (once its
        monitor is watched: :meth:`watch`)."""
        self._handshakes.on_disconnect = handler

    def on_auth_refused(self, handler: Callable[[str, str], None]) -> None:
        """Call ``handler(address, reason)`` for each connection the ZAP handler refuses."""
        self._zap.on_refused = handler

    def on_permission_refused(self, handler: Callable[[str, str, str], None]) -> None:
        """Call ``handler(user, operation, subject)`` for each refused operation."""
        self._on_permission_refused = handler

    @property
    def zap(self) -> zmq.Socket[bytes] | None:
        """The ZAP handler's socket, once bound (for the node's poller)."""
        return self._zap.sock

    # sockets

    def bind_zap(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        """Bind the ZAP handler (before any CURVE server binds: without a handler,
        libzmq would let every key in)."""
        return self._zap.bind(ctx)

    def serve(self, sock: zmq.Socket[bytes]) -> None:
        """Make ``sock`` a CURVE server that needs our ZAP handler's approval."""
        curve.serve(sock, self.public_key, self.secret_key)

    def dial(self, sock: zmq.Socket[bytes], peer: str | None) -> str | None:
        """Make ``sock`` a CURVE client of node ``peer``; returns a problem or None."""
        key = self.nodes.get(peer) if peer is not None else None
        return curve.dial(sock, key, peer, self.public_key, self.secret_key)

    def watch(self, sock: zmq.Socket[bytes]) -> zmq.Socket[bytes]:
        """A monitor of ``sock``'s failed handshakes (and of the deliver XPUB's closed
        connections), for the node's poller."""
        return self._handshakes.watch(sock)

    def drain_deliver(self) -> None:
        """Learn of every closed connection of the deliver XPUB reported so far."""
        self._handshakes.drain_deliver()

    def on_monitor(self, mon: zmq.Socket[bytes]) -> None:
        self._handshakes.on_events(mon)

    def on_zap(self) -> None:
        """Answer every waiting ZAP request (RFC 27): known key -> 200 with its user id."""
        self._zap.on_requests()

    def close(self) -> None:
        self._handshakes.close()
        self._zap.close()

    # who sent it

    def recv_control(self, sock: zmq.Socket[bytes], flags: int) -> list[bytes]:
        """``recv_multipart`` for the control ROUTER that also notes the sender's user id."""
        frames = sock.recv_multipart(flags, copy=False)
        try:
            self.user = str(frames[-1].get("User-Id"))
        except zmq.ZMQError:
            self.user = ""
        return [f.bytes for f in frames]

    def node_user(self, broker_id: str) -> str:
        return "node:" + broker_id

    # permissions

    def permissions(self, user: str) -> dict[str, Any] | None:
        """A client's permissions, as its HELLO reply tells them (None: not a client)."""
        return self._perms.of(user)

    def refuse(self, kind: str, user: str, what: str) -> str:
        """Count and log a refused operation; return the message for the client."""
        counter = kind.split()[0]  # "publish", "subscribe", "read", "link", "send"
        self.refused[counter] = self.refused.get(counter, 0) + 1
        if self._on_permission_refused is not None:
            self._on_permission_refused(user, kind, what)
        who = user or "an unidentified sender"
        message = f"permission denied: {who} may not {kind} {what!r}"
        self._log.warn(user, kind, "refused: %s", message)
        return message

    def publish_recv(self, sock: zmq.Socket[bytes]) -> Callable[[int], bytes]:
        """A ``recv(flags)`` for the publish PULL that drops (and counts) frames whose
        sender may not publish to their topic (see :mod:`.publish_filter`). When every
        client may publish everywhere there is nothing to refuse, and the socket's own
        ``recv`` is returned."""
        if self._perms.publish_anywhere:
            return sock.recv
        return publish_recv(sock, self.may_publish, self.refuse)

    def status(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "public_key": self.public_key.decode(),
            "allowlisted_nodes": sorted(self.nodes),
            "clients": sorted(self.clients),
            "auth_failures": self.auth_failures,
            "handshake_failures": dict(sorted(self.handshake_failures.items())),
            "refused": dict(sorted(self.refused.items())),
            "reloads": self.reloads,
            "reloaded_at": self.reloaded_at or None,
        }


def _load(
    allowlist: Path | None, clients: Path | dict[str, Any] | None
) -> tuple[dict[str, bytes], dict[str, ClientRule]]:
    nodes = load_allowlist(allowlist) if allowlist is not None else {}
    rules = load_clients(clients) if clients is not None else {}
    return nodes, rules
