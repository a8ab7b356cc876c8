"""The node's I/O loop: the one thread that owns every ZeroMQ socket of a node.

Sockets (DESIGN §4)::

    control  ROUTER  tcp://HOST:PORT     control requests (HELLO, STATUS, PING)
    publish  PULL    tcp://HOST:PORT+1   clients' PUSH: publishes
    deliver  XPUB    tcp://HOST:PORT+2   clients' SUB: deliveries; reports subscriptions
    command  PAIR    inproc://...        the embedding Broker: stop, calls into the loop

One poller, one ``_on_<socket>`` handler per socket. Data sockets are drained in batches
(poll once, then non-blocking receives until EAGAIN or :data:`DRAIN_BATCH`), which is what
makes a Python forwarder fast. Frames are decoded by :mod:`zbroker.wire`, routing decisions
come from the sans-IO :class:`~zbroker.routing.RoutingEngine`.

Publishing uses PUSH/PULL rather than PUB/XSUB: PUSH blocks (and the client reports a
timeout) when the node cannot keep up, where PUB would drop silently.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import zmq

from . import wire
from .config import NodeConfig
from .const import (
    BAD_INPUT_LOG_INTERVAL,
    CLOSE_LINGER_MS,
    DRAIN_BATCH,
    PROTOCOL_VERSION,
    TOPIC_CACHE_SIZE,
)
from .errors import AddressInUse, InvalidTopic, ProtocolError
from .identity import Identity
from .routing import LocalSubscribe, LocalUnsubscribe, RoutingEngine
from .topics import validate_pattern, validate_publish_topic

__all__ = ["Node", "format_endpoint"]

log = logging.getLogger("zbroker.node")

_CMD_STOP = b"stop"
_CMD_CALL = b"call"


def format_endpoint(host: str, port: int) -> str:
    """``tcp://host:port`` with IPv6 literals in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


class BadInputLog:
    """Logs malformed input at most once per (source, reason) per interval; counts it all."""

    def __init__(self, interval: float = BAD_INPUT_LOG_INTERVAL) -> None:
        self._interval = interval
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}

    def report(self, source: str, reason: str, detail: str, now: float) -> None:
        key = (source, reason)
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        if len(self._last) > 10_000:  # bounded: a flood of sources cannot grow memory
            self._last.clear()
            self._suppressed.clear()
        more = self._suppressed.pop(key, 0)
        suffix = f" ({more} more since the last report)" if more else ""
        log.warning("dropped bad input from %s: %s: %s%s", source, reason, detail, suffix)
        self._last[key] = now


class Node:
    """One broker node's sockets and loop. Created, bound, run and closed by one thread."""

    def __init__(
        self,
        config: NodeConfig,
        identity: Identity,
        ctx: zmq.Context[zmq.Socket[bytes]],
        command_endpoint: str,
    ) -> None:
        self.config = config
        self.identity = identity
        self.broker_id = identity.broker_id
        self.incarnation = identity.incarnation
        self.engine = RoutingEngine(identity.broker_id)
        self._ctx = ctx
        self._command_endpoint = command_endpoint
        self._calls: queue.SimpleQueue[tuple[Callable[[Node], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._bad_log = BadInputLog()
        self._valid_topics: set[str] = set()
        self._prefix: dict[str, bytes] = {}
        self._running = False
        self.started_at = time.time()
        self.ports: dict[str, int] = {}
        # counters: plain attributes on the hot path, a dict for the rarer drop reasons
        self.seq = 0
        self.received = 0
        self.delivered = 0
        self.bad_input = 0
        self.dropped: dict[str, int] = {}

    # -- lifecycle (all in the node thread) ---------------------------------------------

    def bind(self) -> None:
        """Create and bind every socket; raise AddressInUse naming the port on conflict."""
        cfg = self.config
        ctx = self._ctx
        self.control = ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.publish = ctx.socket(zmq.PULL)
        self.publish.setsockopt(zmq.RCVHWM, cfg.hwm)
        self.deliver = ctx.socket(zmq.XPUB)
        self.deliver.setsockopt(zmq.SNDHWM, cfg.hwm)
        # A full subscriber queue makes send() fail with EAGAIN, which we count, instead of
        # XPUB's default silent drop.
        self.deliver.setsockopt(zmq.XPUB_NODROP, 1)
        self.command = ctx.socket(zmq.PAIR)
        self.command.bind(self._command_endpoint)
        self._sockets = [self.control, self.publish, self.deliver, self.command]
        for s in self._sockets:
            s.setsockopt(zmq.LINGER, CLOSE_LINGER_MS)
        # Frames over the configured limit are counted and dropped in Python (so they show
        # in status); libzmq's own cap, which disconnects the sender without a word, is
        # only a memory guard far above it.
        for s in (self.control, self.publish):
            s.setsockopt(zmq.MAXMSGSIZE, 4 * cfg.max_frame_bytes)
        if ":" in cfg.host:
            for s in (self.control, self.publish, self.deliver):
                s.setsockopt(zmq.IPV6, 1)
        try:
            self._bind_ports(cfg.host, cfg.port)
        except BaseException:
            self.close()
            raise

    def _bind_ports(self, host: str, port: int) -> None:
        if port:
            for sock, p in (
                (self.control, port),
                (self.publish, port + 1),
                (self.deliver, port + 2),
            ):
                self._bind_one(sock, host, p, port)
            self.ports = {"control": port, "publish": port + 1, "deliver": port + 2}
            return
        # port 0: find a free consecutive triple, so the PORT/+1/+2 convention still holds
        for _ in range(100):
            base = self.control.bind_to_random_port(
                format_endpoint(host, 0).rsplit(":", 1)[0], 20000, 60000
            )
            try:
                self.publish.bind(format_endpoint(host, base + 1))
            except zmq.ZMQError:
                self.control.unbind(str(self.control.last_endpoint))
                continue
            try:
                self.deliver.bind(format_endpoint(host, base + 2))
            except zmq.ZMQError:
                self.control.unbind(str(self.control.last_endpoint))
                self.publish.unbind(str(self.publish.last_endpoint))
                continue
            self.ports = {"control": base, "publish": base + 1, "deliver": base + 2}
            return
        raise AddressInUse(f"no free triple of consecutive ports found on {host}")

    @staticmethod
    def _bind_one(sock: zmq.Socket[bytes], host: str, port: int, base: int) -> None:
        try:
            sock.bind(format_endpoint(host, port))
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EADDRINUSE:
                raise AddressInUse(
                    f"port {port} on {host} is already in use (a node on port {base} needs "
                    f"{base}, {base + 1} and {base + 2}; choose another with --port)"
                ) from exc
            raise AddressInUse(f"cannot bind {format_endpoint(host, port)}: {exc}") from exc

    def close(self) -> None:
        for s in getattr(self, "_sockets", []):
            s.close()

    @property
    def endpoints(self) -> dict[str, str]:
        h = self.config.host
        return {name: format_endpoint(h, p) for name, p in self.ports.items()}

    def run(self) -> None:
        """Serve until a stop command arrives. Never raises for bad input."""
        poller = zmq.Poller()
        handlers: dict[zmq.Socket[bytes], Callable[[], None]] = {
            self.publish: self._on_publish,
            self.deliver: self._on_deliver,
            self.control: self._on_control,
            self.command: self._on_command,
        }
        for sock in handlers:
            poller.register(sock, zmq.POLLIN)
        self._running = True
        self.started_at = time.time()
        log.info(
            "node %s (incarnation %d) serving on %s",
            self.broker_id,
            self.incarnation,
            ", ".join(f"{k} {v}" for k, v in self.endpoints.items()),
        )
        while self._running:
            for sock, _ in poller.poll(1000):
                handlers[sock]()
        log.info("node %s stopping", self.broker_id)

    # -- handlers -----------------------------------------------------------------------

    def _on_publish(self) -> None:
        recv = self.publish.recv
        send = self.deliver.send
        valid = self._valid_topics
        prefix = self._prefix
        local_matches = self.engine.local_matches
        decode = wire.decode_publish
        encode = wire.encode_delivery_body
        origin = self.broker_id
        inc = self.incarnation
        noblock = zmq.NOBLOCK
        now = time.time
        limit = self.config.max_frame_bytes
        for _ in range(DRAIN_BATCH):
            try:
                frame = recv(noblock)
            except zmq.Again:
                return
            if len(frame) > limit:
                self._bad("publisher", "oversized", f"{len(frame)} bytes > {limit}")
                continue
            try:
                topic, payload, fmt, headers = decode(frame)
                if topic not in valid:
                    validate_publish_topic(topic)
                    if len(valid) >= TOPIC_CACHE_SIZE:
                        valid.clear()
                    valid.add(topic)
            except ProtocolError as exc:
                self._bad("publisher", exc.reason, exc.detail)
                continue
            except InvalidTopic as exc:
                self._bad("publisher", "bad_topic", str(exc))
                continue
            self.seq += 1
            self.received += 1
            patterns = local_matches(topic)
            if not patterns:
                continue
            body = encode(topic, payload, fmt, headers, origin, inc, self.seq, now())
            for pattern in patterns:
                pfx = prefix.get(pattern)
                if pfx is None:
                    pfx = prefix[pattern] = pattern.encode() + b"\0"
                try:
                    send(pfx + body, noblock)
                    self.delivered += 1
                except zmq.Again:
                    self._drop("subscriber_queue_full")

    def _on_deliver(self) -> None:
        recv = self.deliver.recv
        for _ in range(DRAIN_BATCH):
            try:
                msg = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if not msg or msg[0] not in (0, 1):
                self._bad("subscriber", "bad_subscription", "not a (un)subscribe message")
                continue
            subscribe = msg[0] == 1
            key = msg[1:]
            if key.startswith(wire.SYNC_PREFIX):
                if subscribe:
                    # every subscription the client sent before this key is now active
                    try:
                        self.deliver.send(key, zmq.NOBLOCK)
                    except zmq.Again:
                        self._drop("subscriber_queue_full")
                continue
            if not key.endswith(b"\0"):
                self._bad(
                    "subscriber", "bad_subscription", f"{key[:40]!r} lacks the NUL terminator"
                )
                continue
            try:
                pattern = validate_pattern(key[:-1].decode("utf-8"))
            except (UnicodeDecodeError, InvalidTopic) as exc:
                self._bad("subscriber", "bad_pattern", str(exc))
                continue
            event = (
                LocalSubscribe(pattern=pattern) if subscribe else LocalUnsubscribe(pattern=pattern)
            )
            for action in self.engine.handle(event):
                log.debug("interest %s %s", "+" if action.added else "-", action.pattern)

    def _on_control(self) -> None:
        sock = self.control
        for _ in range(DRAIN_BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            ident = frames[0]
            source = f"control:{ident.hex()[:16]}"
            if len(frames) != 2:
                self._bad(
                    source,
                    "bad_frame_count",
                    f"{len(frames)} frames, expected 1 after the identity",
                )
                continue
            if len(frames[1]) > self.config.max_frame_bytes:
                self._bad(source, "oversized", f"{len(frames[1])} bytes")
                continue
            try:
                op, req_id, body = wire.decode_control(frames[1])
            except ProtocolError as exc:
                self._bad(source, exc.reason, exc.detail)
                continue
            reply = self._control_reply(op, body)
            if reply is None:
                self._bad(source, "unknown_op", f"op {op}")
                reply = (wire.ERROR, {"message": f"unknown request op {op}"})
            self._send_control(ident, reply[0], req_id, reply[1])

    def _control_reply(self, op: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        if op == wire.HELLO:
            return op, {
                "broker_id": self.broker_id,
                "incarnation": self.incarnation,
                "version": PROTOCOL_VERSION,
                "endpoints": self.endpoints,
                "ports": self.ports,
            }
        if op == wire.STATUS:
            return op, self.status()
        if op == wire.PING:
            return op, {}
        return None

    def _send_control(self, ident: bytes, op: int, req_id: int, body: dict[str, Any]) -> None:
        try:
            self.control.send_multipart([ident, wire.encode_control(op, req_id, body)], zmq.NOBLOCK)
        except zmq.Again:
            self._drop("control_queue_full")
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:  # the requester went away: nothing to do
                raise

    def _on_command(self) -> None:
        cmd = self.command.recv()
        if cmd == _CMD_STOP:
            self._running = False
        elif cmd == _CMD_CALL:
            fn, fut = self._calls.get_nowait()
            try:
                fut.set_result(fn(self))
            except Exception as exc:
                fut.set_exception(exc)

    def submit(self, fn: Callable[[Node], Any]) -> Future[Any]:
        """Queue ``fn(node)`` to run in the node thread (caller sends the CALL command)."""
        fut: Future[Any] = Future()
        self._calls.put((fn, fut))
        return fut

    # -- accounting -----------------------------------------------------------------------

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _bad(self, source: str, reason: str, detail: str) -> None:
        self.bad_input += 1
        self._drop(f"bad_input.{reason}")
        self._bad_log.report(source, reason, detail, time.monotonic())

    def status(self) -> dict[str, Any]:
        patterns = sorted(self.engine.local_patterns)
        return {
            "broker_id": self.broker_id,
            "incarnation": self.incarnation,
            "version": PROTOCOL_VERSION,
            "endpoints": self.endpoints,
            "uptime": round(time.time() - self.started_at, 3),
            "counters": {
                "received": self.received,
                "delivered": self.delivered,
                "bad_input": self.bad_input,
                "dropped": dict(sorted(self.dropped.items())),
            },
            "subscriptions": {"count": len(patterns), "patterns": patterns},
        }


def command_client(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    """The embedding side of the node's inproc command channel."""
    sock = ctx.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


STOP = _CMD_STOP
CALL = _CMD_CALL
