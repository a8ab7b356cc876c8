"""The node's own sockets: creating them with their options, binding the port triple,
and the poller that maps each socket to its handler.

Sockets (each owned by the node's one I/O thread)::

    control  ROUTER  tcp://HOST:PORT     control requests; links dialled by other nodes
    publish  PULL    tcp://HOST:PORT+1   clients' PUSH: publishes
    deliver  XPUB    tcp://HOST:PORT+2   clients' SUB: deliveries; reports subscriptions
    command  PAIR    inproc://...        the embedding Broker: stop, calls into the loop

Publishing uses PUSH/PULL rather than PUB/XSUB: PUSH blocks (and the client reports a
timeout) when the node cannot keep up, where PUB would drop silently.
"""

from __future__ import annotations

from collections.abc import Callable

import zmq

from ..config import NodeConfig
from ..const import (
    CLOSE_LINGER_MS,
    CONTROL_HEARTBEAT_IVL_MS,
    CONTROL_HEARTBEAT_TIMEOUT_MS,
    LINK_FRAME_SLACK,
)
from ..errors import AddressInUse

__all__ = ["NodeSockets", "Poller", "command_client", "format_endpoint"]


def format_endpoint(host: str, port: int) -> str:
    """``tcp://host:port`` with IPv6 literals in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


def command_client(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    """The embedding side of the node's inproc command channel."""
    sock = ctx.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


class Poller:
    """One zmq poller and a handler per socket: the loop's sources."""

    def __init__(self) -> None:
        self.poller = zmq.Poller()
        self.handlers: dict[zmq.Socket[bytes], Callable[[], None]] = {}

    def add(self, sock: zmq.Socket[bytes], handler: Callable[[], None]) -> None:
        self.handlers[sock] = handler
        self.poller.register(sock, zmq.POLLIN)

    def remove(self, sock: zmq.Socket[bytes]) -> None:
        if self.handlers.pop(sock, None) is not None:
            self.poller.unregister(sock)


class NodeSockets:
    """Creates, binds and closes the node's four sockets."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], cfg: NodeConfig, command: str) -> None:
        self.control = ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # a redialling peer reuses its routing id: the new connection takes it over
        self.control.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.control.setsockopt(zmq.SNDHWM, cfg.hwm)
        self.control.setsockopt(zmq.RCVHWM, cfg.hwm)
        # ZMTP heartbeats (const.py): a connection silent without closing is closed, so
        # the probes' ROUTER_MANDATORY sends find a vanished member or consumer gone.
        # (Set before bind: accepted connections take the options the socket had then.)
        # Not on the data sockets, where a peer's libzmq that stops reading also stops
        # answering: a subscriber whose callbacks stall fills its receive queue and would
        # be cut off and resubscribed behind its back, losing what was queued for it (a
        # ghost there holds only its own bounded queue); and this node, behind its
        # publishers, would cut them off. Neither holds anything another client waits for.
        self.control.setsockopt(zmq.HEARTBEAT_IVL, CONTROL_HEARTBEAT_IVL_MS)
        self.control.setsockopt(zmq.HEARTBEAT_TIMEOUT, CONTROL_HEARTBEAT_TIMEOUT_MS)
        self.publish = ctx.socket(zmq.PULL)
        self.publish.setsockopt(zmq.RCVHWM, cfg.hwm)
        self.deliver = ctx.socket(zmq.XPUB)
        self.deliver.setsockopt(zmq.SNDHWM, cfg.hwm)
        # Lossy XPUB (the default): a subscriber whose queue is full loses the message
        # alone, and nobody else waits for it. Every delivery carries a per-pattern
        # sequence, so that subscriber sees the gap and reports it (GAPS), and we count it.
        self.command = ctx.socket(zmq.PAIR)
        self.command.bind(command)
        self.all = [self.control, self.publish, self.deliver, self.command]
        for s in self.all:
            s.setsockopt(zmq.LINGER, CLOSE_LINGER_MS)
        # Frames over the configured limit are counted and dropped in Python (so they show
        # in status); libzmq's own cap, which disconnects the sender without a word, is
        # only a memory guard far above it.
        self.publish.setsockopt(zmq.MAXMSGSIZE, 4 * cfg.max_frame_bytes)
        # (link frames, which arrive here too, may carry LINK_FRAME_SLACK more)
        self.control.setsockopt(zmq.MAXMSGSIZE, 4 * cfg.max_frame_bytes + LINK_FRAME_SLACK)
        if ":" in cfg.host:
            for s in (self.control, self.publish, self.deliver):
                s.setsockopt(zmq.IPV6, 1)
        self.ports: dict[str, int] = {}

    @property
    def network(self) -> tuple[zmq.Socket[bytes], ...]:
        """The sockets that face the network (security serves these)."""
        return (self.control, self.publish, self.deliver)

    def bind(self, host: str, port: int) -> None:
        """Bind PORT, PORT+1, PORT+2 (port 0: a free consecutive triple)."""
        if port:
            for sock, p in (
                (self.control, port),
                (self.publish, port + 1),
                (self.deliver, port + 2),
            ):
                _bind_one(sock, host, p, port)
            self.ports = {"control": port, "publish": port + 1, "deliver": port + 2}
            return
        for _ in range(100):
            base = self.control.bind_to_random_port(
                format_endpoint(host, 0).rsplit(":", 1)[0], 20000, 60000
            )
            try:
                self.publish.bind(format_endpoint(host, base + 1))
            except zmq.ZMQError:
                self.control.unbind(_last_endpoint(self.control))
                continue
            try:
                self.deliver.bind(format_endpoint(host, base + 2))
            except zmq.ZMQError:
                self.control.unbind(_last_endpoint(self.control))
                self.publish.unbind(_last_endpoint(self.publish))
                continue
            self.ports = {"control": base, "publish": base + 1, "deliver": base + 2}
            return
        raise AddressInUse(f"no free triple of consecutive ports found on {host}")

    def close(self) -> None:
        for s in self.all:
            s.close()


def _bind_one(sock: zmq.Socket[bytes], host: str, port: int, base: int) -> None:
    try:
        sock.bind(format_endpoint(host, port))
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EADDRINUSE:
            raise AddressInUse(
                f"port {port} on {host} is already in use (a node on port {base} needs "
                f"{base}, {base + 1} and {base + 2}; choose another port, or 0 for free ones)"
            ) from exc
        raise AddressInUse(f"cannot bind {format_endpoint(host, port)}: {exc}") from exc


def _last_endpoint(sock: zmq.Socket[bytes]) -> str:
    ep = sock.getsockopt(zmq.LAST_ENDPOINT)
    return ep.decode() if isinstance(ep, bytes) else str(ep)
