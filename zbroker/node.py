"""The node's I/O loop: the one thread that owns every ZeroMQ socket of a node.

Sockets (DESIGN §4)::

    control  ROUTER  tcp://HOST:PORT     control requests; links dialled by other nodes
    publish  PULL    tcp://HOST:PORT+1   clients' PUSH: publishes
    deliver  XPUB    tcp://HOST:PORT+2   clients' SUB: deliveries; reports subscriptions
    command  PAIR    inproc://...        the embedding Broker: stop, calls into the loop
    links    DEALER  (one per dialled link) connected to another node's ROUTER

One poller, one ``_on_<socket>`` handler per socket. Data sockets are drained in batches
(poll once, then non-blocking receives until EAGAIN or :data:`DRAIN_BATCH`), which is what
makes a Python forwarder fast. Frames are decoded by :mod:`zbroker.wire`, routing decisions
come from the sans-IO :class:`~zbroker.routing.RoutingEngine`.

Every poll pass ends by flushing what the pass produced: one MSGS frame per link holding
every message queued for it, then the routing engine's batched interest changes.

Publishing uses PUSH/PULL rather than PUB/XSUB: PUSH blocks (and the client reports a
timeout) when the node cannot keep up, where PUB would drop silently.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import queue
import struct
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

import msgpack
import zmq
import zmq.backend

from . import wire
from .config import NodeConfig, validate_broker_id
from .const import (
    BAD_INPUT_LOG_INTERVAL,
    CLOSE_LINGER_MS,
    DRAIN_BATCH,
    LINK_BATCH,
    LINK_BATCH_BYTES,
    LINK_FRAME_SLACK,
    PROTOCOL_VERSION,
    TICK_INTERVAL,
    TOPIC_CACHE_SIZE,
)
from .discovery import Discovery
from .errors import AddressInUse, ConfigError, InvalidTopic, ProtocolError
from .forward import Forwarder, PersistentDedupe
from .identity import Identity
from .links import Link, LinkKind, LinkState
from .process import gc_status
from .routing import (
    AdvertIn,
    DedupeWindow,
    LinkDown,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    RoutingEngine,
)
from .security import Security
from .staging import Staging, StagingError
from .store import OVERFLOW_POLICIES, Store
from .sublist import Sublist
from .topics import patterns_overlap, validate_pattern, validate_publish_topic, validate_topic

__all__ = ["Node", "format_endpoint"]

log = logging.getLogger("zbroker.node")

_CMD_STOP = b"stop"
_STAGING_OPS = frozenset({wire.STAGE, wire.STAGE_COMMIT, wire.STAGE_ABORT})
_DURABLE_OPS = frozenset(
    {wire.DURABLE_OPEN, wire.DURABLE_ACK, wire.DURABLE_CLOSE, wire.DURABLE_DELETE}
)


class Durable:
    """A durable subscription's live state (its messages are in the store)."""

    __slots__ = ("consumer", "credit", "max_msgs", "name", "next_q", "pattern", "sent", "sent_upto")

    def __init__(self, name: str, pattern: str, next_q: int, max_msgs: int) -> None:
        self.name = name
        self.pattern = pattern
        self.next_q = next_q
        self.max_msgs = max_msgs
        self.consumer: bytes | None = None  # routing id of the attached client session
        self.credit = 0
        self.sent: collections.deque[int] = collections.deque()  # sent, not yet acked
        self.sent_upto = 0


_CMD_CALL = b"call"


_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


def format_endpoint(host: str, port: int) -> str:
    """``tcp://host:port`` with IPv6 literals in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


class BadInputLog:
    """Logs malformed input at most once per (source, reason) per interval; counts it all."""

    def __init__(
        self, interval: float = BAD_INPUT_LOG_INTERVAL, what: str = "dropped bad input"
    ) -> None:
        self._interval = interval
        self._what = what
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
        log.warning("%s from %s: %s: %s%s", self._what, source, reason, detail, suffix)
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
        # this process's own mark in link handshakes: a HELLO bearing our broker ID but not
        # this mark comes from another node configured with the same ID, not from ourselves
        self.instance = uuid.uuid4().hex
        self.engine = RoutingEngine(identity.broker_id)
        self._ctx = ctx
        self._command_endpoint = command_endpoint
        self._calls: queue.SimpleQueue[tuple[Callable[[Node], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._bad_log = BadInputLog()
        # handshake refusals: an unauthenticated peer must not be able to flood the log
        self._refusal_log = BadInputLog(what="refused link")
        self._valid_topics: set[str] = set()  # publishable topics seen (no $ZB)
        self._valid_link_topics: set[str] = set()  # topics seen on links ($ZB allowed)
        self._prefix: dict[str, bytes] = {}
        self._pseq: dict[str, int] = {}  # sends per delivery pattern (the frame trailer)
        self._running = False
        self.started_at = time.time()
        self.ports: dict[str, int] = {}
        # counters: plain attributes on the hot path, a dict for the rarer drop reasons
        self.seq = 0
        self.received = 0
        self.delivered = 0
        self.bad_input = 0
        self.dropped: dict[str, int] = {}
        self.forwarded = 0
        self.durable_stored = 0
        self.durable_delivered = 0
        self.durable_acked = 0
        self.links_up = 0
        self.links_down = 0
        self.handshakes_refused = 0
        self.dedupe = DedupeWindow()
        #: CurveZMQ keys, allowlist and permissions (None: plain mode)
        self.security: Security | None = None
        self._dialers: dict[str, Link] = {
            lc.name: Link(
                name=lc.name,
                kind=LinkKind.STATIC,
                duplex=lc.duplex,
                options=lc.options,
                heartbeat_interval=lc.heartbeat_interval,
                heartbeat_timeout=lc.heartbeat_timeout,
                config=lc,
            )
            for lc in config.links
        }
        self._accepted: dict[bytes, Link] = {}
        self._by_engine_id: dict[str, Link] = {}
        self._dirty: list[Link] = []  # links with a non-empty outbox
        self._send_error = ""  # why the last _send_link failed: the drop counter's name
        self._next_durable_probe = 0.0
        # link frames: what we accept (what we send is cut for each peer's own limit)
        self._link_frame_limit = config.max_frame_bytes + LINK_FRAME_SLACK
        # _on_msgs: path seen on a link -> the path we forward (False: a loop); targets
        # arrays already type-checked (both bounded by _STREAM_CACHE_SIZE)
        self._fwd_paths: dict[tuple[str, ...], list[str] | bool] = {}
        self._checked_targets: set[tuple[str, ...]] = set()
        self._discovered: dict[str, dict[str, Any]] = {}  # peer id -> mDNS record
        # local interest by source: "clients" (XPUB), "retain", "durable:NAME"
        self._interest: dict[str, set[str]] = {}
        self._durables: dict[str, Durable] = {}
        self._durable_match: Sublist[str] = Sublist()
        self.store: Store | None = None
        self._confirms: list[tuple[bytes, int, dict[str, Any]]] = []  # after the next commit
        self.staging = Staging()  # rows of write tasks waiting for their commit
        # store-and-forward of persistent messages (zbroker.forward): made with the store
        self.forward: Forwarder | None = None
        self.pdedupe = PersistentDedupe()  # persistent messages: by (origin, inc, pseq)
        self.pseq = 0  # persistent messages originated in this incarnation
        self._pack_due: dict[Link, None] = {}  # inbound links to acknowledge after commit
        # committed staged rows being published, a slice per poll pass (see _apply_staged)
        self._applying: collections.deque[_Applying] = collections.deque()
        self._pump: set[str] = set()  # durables with something to send
        self._discovery: Discovery | None = None
        self._discovery_endpoint = f"inproc://zbroker-disc-{uuid.uuid4().hex}"
        self._next_tick = 0.0
        # msgpack of (origin, incarnation): constant middle of every envelope we originate
        self._envelope_id = msgpack.packb(identity.broker_id) + msgpack.packb(identity.incarnation)

    # -- lifecycle (all in the node thread) ---------------------------------------------

    def bind(self) -> None:
        """Create and bind every socket; raise AddressInUse naming the port on conflict."""
        cfg = self.config
        ctx = self._ctx
        if cfg.security:
            # keys, allowlist and permissions load (or fail clearly) before anything binds
            self.security = Security(
                cfg.key_dir or self.identity.data_dir, cfg.allowlist, cfg.clients
            )
            self.security.bind_zap(ctx)
        self.control = ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # a redialling peer reuses its routing id: the new connection takes it over
        self.control.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.control.setsockopt(zmq.SNDHWM, cfg.hwm)
        self.control.setsockopt(zmq.RCVHWM, cfg.hwm)
        self.publish = ctx.socket(zmq.PULL)
        self.publish.setsockopt(zmq.RCVHWM, cfg.hwm)
        self.deliver = ctx.socket(zmq.XPUB)
        self.deliver.setsockopt(zmq.SNDHWM, cfg.hwm)
        # Lossy XPUB (the default): a subscriber whose queue is full loses the message
        # alone, and nobody else waits for it. Every delivery carries a per-pattern
        # sequence, so that subscriber sees the gap and reports it (GAPS), and we count it.
        self.command = ctx.socket(zmq.PAIR)
        self.command.bind(self._command_endpoint)
        # findings of the discovery threads arrive here (DESIGN: inproc only)
        self.discovery_in = ctx.socket(zmq.PULL)
        self.discovery_in.bind(self._discovery_endpoint)
        self._sockets = [self.control, self.publish, self.deliver, self.command, self.discovery_in]
        self._publish_recv: Callable[[int], bytes] = self.publish.recv
        self._control_recv: Callable[[int], list[bytes]] = self.control.recv_multipart
        self._control_send = _raw_send(self.control)
        if self.security is not None:
            for s in (self.control, self.publish, self.deliver):
                self.security.serve(s)
            # no connection may take over another's routing id (links dial with fresh,
            # random ids instead, so a redial never needs the takeover)
            self.control.setsockopt(zmq.ROUTER_HANDOVER, 0)
            # subscriptions are approved one by one (see _on_deliver_secure)
            self.deliver.setsockopt(zmq.XPUB_MANUAL, 1)
            self._publish_recv = self.security.publish_recv(self.publish)
            sec, control = self.security, self.control
            self._control_recv = lambda flags: sec.recv_control(control, flags)
        for s in self._sockets:
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
        try:
            self._bind_ports(cfg.host, cfg.port)
            self.store = Store(
                self.identity.data_dir / "store.sqlite3", cfg.retain, fsync=cfg.fsync
            )
        except BaseException:
            self.close()
            raise
        for rule in cfg.retain:
            # a retention rule is local interest: the network brings its topics here
            self._add_interest(rule.pattern, "retain")
        assert self.store is not None
        for name, (pattern, next_q, max_msgs) in self.store.durables().items():
            self._durables[name] = Durable(name, pattern, next_q, max_msgs)
            self._durable_match.insert(pattern, name)
            self._add_interest(pattern, "durable:" + name)
        self.forward = Forwarder(
            self.store, max_msgs=cfg.forward_max_msgs, max_bytes=cfg.forward_max_bytes
        )
        self._restore_sticky_routes()

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
        for link in self._dialers.values():
            if link.socket is not None:
                link.socket.close(linger=0)
                link.socket = None
        if self.security is not None:
            self.security.close()  # its monitors first, while the sockets are open
        for s in getattr(self, "_sockets", []):
            s.close()
        if self.store is not None:
            self.store.close()
            self.store = None

    @property
    def endpoints(self) -> dict[str, str]:
        h = self.config.host
        return {name: format_endpoint(h, p) for name, p in self.ports.items()}

    def run(self) -> None:
        """Serve until a stop command arrives. Never raises for bad input."""
        self._poller = poller = zmq.Poller()
        self._handlers: dict[zmq.Socket[bytes], Callable[[], None]] = {
            self.publish: self._on_publish,
            self.deliver: self._on_deliver,
            self.control: self._on_control,
            self.command: self._on_command,
        }
        if self.config.discovery:
            # every socket in the poller costs each wake-up a check: only when it can speak
            self._handlers[self.discovery_in] = self._on_discovery
        if self.security is not None:
            assert self.security.zap is not None
            self._handlers[self.deliver] = self._on_deliver_secure
            self._handlers[self.security.zap] = self.security.on_zap
            sec = self.security
            for s in (self.control, self.publish, self.deliver):
                mon = sec.watch(s)
                self._handlers[mon] = functools.partial(sec.on_monitor, mon)
        for sock in self._handlers:
            poller.register(sock, zmq.POLLIN)
        self._running = True
        self.started_at = time.time()
        log.info(
            "node %s (incarnation %d, group %s) serving on %s",
            self.broker_id,
            self.incarnation,
            self.config.group,
            ", ".join(f"{k} {v}" for k, v in self.endpoints.items()),
        )
        for link in self._dialers.values():
            self._dial(link, time.monotonic())
        if self.config.discovery:
            self._start_discovery()
        handlers = self._handlers
        while self._running:
            busy = self._dialers or self._accepted
            timeout = int(TICK_INTERVAL * 1000) if busy else 1000
            if self._applying:
                timeout = 0  # a commit is being published: serve sockets, then go on
            for sock, _ in poller.poll(timeout):
                try:
                    handlers[sock]()
                except Exception:  # a bug, not bad input: log it, count it, keep serving
                    self._drop("internal_error")
                    log.exception("internal error in a socket handler; the node keeps running")
            if self._applying:
                self._apply_staged()
            if self._dirty:
                self._flush_outboxes()
            self._flush_adverts()
            if self._pump and self.store is not None:
                # durables the pump serves next keep their bounds until it has sent what
                # their subscribers have credit for (Store.trim_hold)
                self.store.trim_hold = self._pump
            if (self.store is not None and self.store.commit()) or self._confirms:
                self._send_confirms()
            if self.forward is not None:
                # after the commit: what is acknowledged or sent under a sequence is stored
                self._flush_forward()
            if self._pump:
                self._pump_durables()
            now = time.monotonic()
            if now >= self._next_tick:
                self._next_tick = now + TICK_INTERVAL
                self._tick(now)
        self._say_goodbye()
        if self._discovery is not None:
            self._discovery.stop()
            with self._discovery_lock:
                # every socket of the context must be closed, or Context.term() hangs
                self._discovery_push.close(linger=0)
        log.info("node %s stopping", self.broker_id)

    # -- handlers -----------------------------------------------------------------------

    def _on_publish(self) -> None:
        """Drain the publish socket: validate, number, deliver locally, queue for links.

        The hot path of a node, written for speed: no per-message objects beyond the
        decoded frame; the delivery envelope reuses the publish frame's bytes (both are
        msgpack arrays whose first four elements are identical), so the payload is never
        re-encoded; counters live in locals until the batch ends.
        """
        recv = self._publish_recv  # the socket's recv; with security, a permission filter
        valid = self._valid_topics
        prefix = self._prefix
        engine = self.engine
        local_matches = engine.local_matches
        route = engine.route
        unpackb = msgpack.unpackb
        tail = _ENVELOPE_TAIL.pack
        id_part = self._envelope_id
        origin = self.broker_id
        inc = self.incarnation
        noblock = zmq.NOBLOCK
        now = time.time
        limit = self.config.max_frame_bytes
        store = self.store
        retaining = store is not None and bool(store.rules)
        retain_rule = store.retain_rule if store is not None else _no_rule
        retain = store.retain if store is not None else _no_retain
        durables = bool(self._durables)
        seq = self.seq
        received = 0
        # deliveries of this pass, per pattern: sent as batch frames when the pass ends
        out: dict[str, list[bytes]] = {}
        budget = DRAIN_BATCH  # messages: a publish batch counts for what it holds
        events = cast("Callable[[int], int]", self.publish.getsockopt)
        first = True
        try:
            while budget > 0:
                if not first and not events(_EVENTS) & _POLLIN:
                    return  # (see _on_control: no zmq.Again per pass)
                first = False
                try:
                    raw = recv(noblock)
                except zmq.Again:
                    return
                if len(raw) > limit:
                    budget -= 1
                    self._bad("publisher", "oversized", f"{len(raw)} bytes > {limit}")
                    continue
                try:  # fixarray(4) not followed by a bin: one publish, our client's form
                    single = raw[0] == 0x94 and raw[1] not in _BIN_TYPES
                except IndexError:
                    single = True
                frames: list[Any] | tuple[bytes] = (raw,)
                if not single:
                    try:
                        outer = unpackb(raw, raw=False, strict_map_key=False)
                    except (ValueError, msgpack.UnpackException, TypeError) as exc:
                        budget -= 1
                        self._bad("publisher", "not_msgpack", str(exc))
                        continue
                    if type(outer) is list and outer and type(outer[0]) is bytes:
                        frames = outer  # a publish batch: [publish frame: bin, ...]
                budget -= len(frames)
                for frame in frames:
                    if type(frame) is not bytes:
                        self._bad("publisher", "bad_shape", "publish batch element must be bin")
                        continue
                    try:
                        value = unpackb(frame, raw=False, strict_map_key=False)
                    except (ValueError, msgpack.UnpackException, TypeError) as exc:
                        self._bad("publisher", "not_msgpack", str(exc))
                        continue
                    if type(value) is not list or len(value) != 4:
                        self._bad(
                            "publisher", "bad_shape", "publish frame must be a 4-element array"
                        )
                        continue
                    topic, payload, fmt, headers = value
                    if (
                        type(topic) is not str
                        or type(payload) is not bytes
                        or (fmt != 0 and fmt != 1)
                        or type(fmt) is not int
                        or (
                            headers is not None
                            and (
                                type(headers) is not dict
                                or not all(type(k) is str for k in headers)
                            )
                        )
                    ):
                        self._bad("publisher", "bad_type", "publish frame has wrong field types")
                        continue
                    if topic not in valid:
                        try:
                            validate_publish_topic(topic)
                        except InvalidTopic as exc:
                            self._bad("publisher", "bad_topic", str(exc))
                            continue
                        if len(valid) >= TOPIC_CACHE_SIZE:
                            valid.clear()
                        valid.add(topic)
                    seq += 1
                    received += 1
                    ts = now()
                    if retaining:
                        rule = retain_rule(topic)
                        if rule is not None:
                            retain(rule, topic, payload, fmt, headers, origin, inc, seq, ts)
                    if durables:
                        self._enqueue_durable(topic, payload, fmt, headers, origin, inc, seq, ts)
                    if engine.links:
                        patterns, sends = route(topic, (), None)
                        if sends:
                            msg = [
                                topic,
                                payload,
                                fmt,
                                headers,
                                origin,
                                inc,
                                seq,
                                ts,
                                [origin],
                                None,
                            ]
                            self._enqueue(sends, msg)
                    else:
                        patterns = local_matches(topic)
                    if not patterns:
                        continue
                    if frame[0] == 0x94:  # fixarray of 4: reuse its elements verbatim
                        body = b"\x98" + frame[1:] + id_part + tail(0xCF, seq, 0xCB, ts)
                    else:  # another encoder's (valid) array form: encode afresh
                        body = wire.encode_delivery_body(
                            topic, payload, fmt, headers, origin, inc, seq, ts
                        )
                    for pattern in patterns:
                        if pattern not in prefix:
                            continue  # interest of retention or a durable, no client on XPUB
                        bodies = out.get(pattern)
                        if bodies is None:
                            out[pattern] = [body]
                        else:
                            bodies.append(body)
        finally:
            self.seq = seq
            self.received += received
            if out:
                self._send_deliveries(out)

    def _send_deliveries(self, out: dict[str, list[Any]], *, encoded: bool = True) -> None:
        """Send a pass's deliveries: per pattern, one frame per :data:`wire.DELIVERY_BATCH`
        messages (or :data:`wire.DELIVERY_BATCH_BYTES`), so the subscriber and both libzmq
        I/O threads handle a frame per batch rather than per message. A pattern with one
        message sends the single-message form. ``out`` holds encoded envelopes, or with
        ``encoded=False`` envelope arrays (8 fields), packed here by one msgpack call per
        frame (what a link's messages need: no per-message encode call)."""
        if not encoded:
            self._send_delivery_arrays(out)
            return
        send = _raw_send(self.deliver)
        prefix = self._prefix
        pseq = self._pseq
        u64 = _U64.pack
        noblock = zmq.NOBLOCK
        most = wire.DELIVERY_BATCH
        most_bytes = wire.DELIVERY_BATCH_BYTES
        header = wire.array_header
        delivered = 0
        for pattern, bodies in out.items():
            pfx = prefix[pattern]
            n = pseq[pattern]
            total = len(bodies)
            delivered += total
            if total == 1:
                n += 1
                send(pfx + bodies[0] + u64(n), noblock)
                pseq[pattern] = n
                continue
            start = 0
            while start < total:
                # cut at `most` messages or once the frame passes `most_bytes`
                end = min(start + most, total)
                size = 0
                for i in range(start, end):
                    size += len(bodies[i])
                    if size >= most_bytes:
                        end = i + 1
                        break
                k = end - start
                n += k
                if k == 1:
                    send(pfx + bodies[start] + u64(n), noblock)
                else:
                    send(pfx + header(k) + b"".join(bodies[start:end]) + u64(n), noblock)
                start = end
            pseq[pattern] = n
        self.delivered += delivered

    def _send_delivery_arrays(self, out: dict[str, list[Any]]) -> None:
        send = _raw_send(self.deliver)
        prefix = self._prefix
        pseq = self._pseq
        u64 = _U64.pack
        packb = msgpack.packb
        noblock = zmq.NOBLOCK
        most = wire.DELIVERY_BATCH
        most_bytes = wire.DELIVERY_BATCH_BYTES
        delivered = 0
        for pattern, envelopes in out.items():
            pfx = prefix[pattern]
            n = pseq[pattern]
            total = len(envelopes)
            delivered += total
            start = 0
            while start < total:
                end = min(start + most, total)
                size = 0
                for i in range(start, end):
                    size += len(envelopes[i][1])  # the payload: the bulk of a message
                    if size >= most_bytes:
                        end = i + 1
                        break
                k = end - start
                n += k
                body = packb(envelopes[start]) if k == 1 else packb(envelopes[start:end])
                send(pfx + body + u64(n), noblock)
                start = end
            pseq[pattern] = n
        self.delivered += delivered

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
            if subscribe:
                # the delivery prefix exists exactly while clients hold the pattern
                self._prefix[pattern] = pattern.encode() + b"\0"
                self._pseq.setdefault(pattern, 0)
                self._add_interest(pattern, "clients")
            else:
                self._prefix.pop(pattern, None)
                self._drop_interest(pattern, "clients")
            log.debug("local interest %s %s", "+" if subscribe else "-", pattern)

    def _on_control(self) -> None:
        recv = self._control_recv  # with security, it also notes the sender's user id
        events = cast("Callable[[int], int]", self.control.getsockopt)
        budget = DRAIN_BATCH  # messages: a link's MSGS frame counts for what it holds
        first = True
        while budget > 0:
            budget -= 1
            # after the frame poll() announced, ask the socket rather than end on
            # zmq.Again: an exception per pass is a relay's largest cost at low rates
            if not first and not events(_EVENTS) & _POLLIN:
                return
            first = False
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            ident = frames[0]
            if len(frames) != 2:
                self._bad(
                    self._source(ident),
                    "bad_frame_count",
                    f"{len(frames)} frames, expected 1 after the identity",
                )
                continue
            body = frames[1]
            if len(body) > self._link_frame_limit:
                self._bad(self._source(ident), "oversized", f"{len(body)} bytes")
                continue
            try:
                value = wire.decode_frame(body)
                op = value[0]
                if op in wire.LINK_TYPES:
                    budget -= self._on_accepted_frame(ident, value, len(body))
                    continue
                if len(body) > self.config.max_frame_bytes:
                    # (only a link frame may carry the slack: a client's request may not)
                    raise ProtocolError("oversized", f"{len(body)} bytes")
                if len(value) != 3 or type(value[1]) is not int or type(value[2]) is not dict:
                    raise ProtocolError("bad_shape", "control frame must be [op, req_id, body]")
            except ProtocolError as exc:
                self._bad(self._source(ident), exc.reason, exc.detail)
                continue
            _, req_id, req = value
            if self.security is not None:
                refusal = self._secure_check(op, req)
                if refusal is not None:
                    self._send_control(ident, wire.ERROR, req_id, {"message": refusal})
                    continue
            if op == wire.PUBLISH:
                self._control_publish(ident, req_id, req)
                continue
            if op == wire.GAPS:
                # bounded: a lying client can inflate this counter only so far per report
                missed = min(
                    sum(v for v in req.values() if type(v) is int and 0 < v < 1 << 32), 10**6
                )
                if missed:
                    # a subscriber's queue here overflowed: the one loss a lossy XPUB hides
                    self._drop("slow_subscriber", missed)
                continue
            if op in _STAGING_OPS:
                self._staging_op(ident, req_id, op, req)
                continue
            if op in _DURABLE_OPS:
                reply = self._durable_op(ident, op, req)
                if reply is not None and req_id:
                    self._send_control(ident, reply[0], req_id, reply[1])
                continue
            reply = self._control_reply(op, req)
            if reply is None:
                self._bad(self._source(ident), "unknown_op", f"op {op}")
                reply = (wire.ERROR, {"message": f"unknown request op {op}"})
            self._send_control(ident, reply[0], req_id, reply[1])

    def _secure_check(self, op: int, req: dict[str, Any]) -> str | None:
        """With security on: the refusal message if the sender's key may not do this."""
        sec = self.security
        assert sec is not None
        user = sec.user
        if op == wire.PUBLISH:
            topic = req.get("topic")
            if isinstance(topic, str) and not sec.may_publish(user, topic):
                return sec.refuse("publish to", user, topic)
        elif op == wire.STAGE:
            # staged rows are checked when staged: the commit publishes what passed here
            rows = req.get("rows")
            for row in rows if type(rows) is list else ():
                topic = row[0] if type(row) is list and row else None
                if isinstance(topic, str) and not sec.may_publish(user, topic):
                    return sec.refuse("publish to", user, topic)
        elif op == wire.DURABLE_OPEN or op == wire.READ:
            pattern = req.get("pattern", ">")
            if isinstance(pattern, str) and not sec.may_subscribe(user, pattern):
                return sec.refuse("subscribe to", user, pattern)
        elif op in _DURABLE_OPS:
            name = req.get("name")
            d = self._durables.get(name) if isinstance(name, str) else None
            if d is not None and not sec.may_subscribe(user, d.pattern):
                return sec.refuse("subscribe to", user, d.pattern)
        return None

    def _on_deliver_secure(self) -> None:
        """``_on_deliver`` with security on: the XPUB is in manual mode, so a subscription
        takes effect (for the connection that sent it) only when the sender's key may
        subscribe to the pattern. Manual mode reports every connection's (un)subscribe,
        so the node counts them per (pattern, user) to know when the last one leaves;
        the unsubscriptions libzmq sends for a closed connection carry no user id."""
        sec = self.security
        assert sec is not None
        sock = self.deliver
        counts = sec.sub_counts
        for _ in range(DRAIN_BATCH):
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            msg = frame.bytes
            try:
                user: str | None = str(frame.get("User-Id"))
            except zmq.ZMQError:
                user = None  # libzmq's own unsubscription for a closed connection
            if not msg or msg[0] not in (0, 1):
                self._bad("subscriber", "bad_subscription", "not a (un)subscribe message")
                continue
            subscribe = msg[0] == 1
            key = msg[1:]
            if key.startswith(wire.SYNC_PREFIX):
                if user is not None:
                    sock.setsockopt(zmq.SUBSCRIBE if subscribe else zmq.UNSUBSCRIBE, key)
                if subscribe:
                    try:
                        sock.send(key, zmq.NOBLOCK)
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
            holders = counts.get(pattern)
            if subscribe:
                assert user is not None
                if not sec.may_subscribe(user, pattern):
                    sec.refuse("subscribe to", user, pattern)
                    continue
                sock.setsockopt(zmq.SUBSCRIBE, key)  # for the connection that asked
                if holders is None:
                    holders = counts[pattern] = {}
                    self._prefix[pattern] = pattern.encode() + b"\0"
                    self._pseq.setdefault(pattern, 0)
                    self._add_interest(pattern, "clients")
                holders[user] = holders.get(user, 0) + 1
            else:
                if holders is None:
                    continue
                if user is None:
                    user = next(iter(holders))  # a closed connection: any holder's count
                elif user not in holders:
                    continue  # it never held it (refused, or a stray unsubscribe)
                else:
                    sock.setsockopt(zmq.UNSUBSCRIBE, key)
                left = holders[user] - 1
                if left:
                    holders[user] = left
                else:
                    del holders[user]
                if not holders:
                    del counts[pattern]
                    self._prefix.pop(pattern, None)
                    self._drop_interest(pattern, "clients")
            log.debug("local interest %s %s (%s)", "+" if subscribe else "-", pattern, user)

    def _source(self, ident: bytes) -> str:
        link = self._accepted.get(ident)
        if link is not None:
            return f"link {link.name} from {link.peer}"
        return f"control:{ident.hex()[:16]}"

    def _control_reply(self, op: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        if op == wire.HELLO:
            hello = {
                "broker_id": self.broker_id,
                "incarnation": self.incarnation,
                "version": PROTOCOL_VERSION,
                "endpoints": self.endpoints,
                "ports": self.ports,
                # this node reads publish batches of up to this many bytes (a client
                # batches only toward a node that says so, and never over its limit)
                "publish_batch": self.config.max_frame_bytes,
            }
            if self.security is not None:
                # what this client may do: its library refuses the rest before sending
                hello["user"] = self.security.user
                hello["permissions"] = self.security.permissions(self.security.user)
            return op, hello
        if op == wire.STATUS:
            return op, self.status()
        if op == wire.PING:
            # the incarnation lets a client notice a restart its reconnect hid
            return op, {"incarnation": self.incarnation}
        if op == wire.PEERS:
            return op, {"peers": self.peers()}

        if op == wire.READ:
            return self._read(body)
        if op == wire.ROUTES:
            pattern = body.get("pattern")
            routes = self.engine.interest()
            if isinstance(pattern, str) and pattern:
                try:
                    validate_pattern(pattern)
                except InvalidTopic as exc:
                    return wire.ERROR, {"message": str(exc)}
                routes = [r for r in routes if patterns_overlap(pattern, str(r["pattern"]))]
            return op, {"routes": routes}
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

    # -- links: data path -------------------------------------------------------------------

    def _all_links(self) -> list[Link]:
        return [*self._dialers.values(), *self._accepted.values()]

    def _enqueue(
        self, sends: list[tuple[str, tuple[str, ...] | None, int]], msg: list[Any]
    ) -> None:
        """Queue ``msg`` (path already ends with us) on each send's link for this pass."""
        by_id = self._by_engine_id
        for link_id, targets, copies in sends:
            link = by_id.get(link_id)
            if link is None:
                # routed over a link that is down (a sticky route's ghost): a non-persistent
                # message has nowhere to wait, so it is lost here: counted, not silent
                self._drop("link_down", copies)
                continue
            m = (
                msg
                if targets is None and msg[9] is None
                else [*msg[:9], None if targets is None else list(targets)]
            )
            if not link.outbox:
                self._dirty.append(link)
            if copies == 1:
                link.outbox.append(m)
            else:
                link.outbox.extend([m] * copies)

    def _resolve_sends(
        self, sends: list[tuple[str, tuple[str, ...] | None, int]]
    ) -> tuple[list[tuple[Link, list[str] | None, int]], int]:
        """route()'s sends as (link, targets list to forward, copies), links that are up
        only, and the copies routed to links that are not (each message loses them). The
        targets list is shared by the messages of one frame (never modified)."""
        by_id = self._by_engine_id
        resolved = [
            (link, None if targets is None else list(targets), copies)
            for link_id, targets, copies in sends
            if (link := by_id.get(link_id)) is not None
        ]
        missing = sum(copies for link_id, _, copies in sends if link_id not in by_id)
        return resolved, missing

    def _flush_outboxes(self) -> None:
        now = time.monotonic()
        for link in self._dirty:
            box = link.outbox
            link.outbox = []
            if link.state is not LinkState.UP:
                link.drops += len(box)
                self._drop("link_down", len(box))
                continue
            most = link.batch_bytes
            for start in range(0, len(box), LINK_BATCH):
                chunk = box[start : start + LINK_BATCH]
                # small messages (the common case) need no look at each one: the first and
                # last payloads tell whether the chunk may be large
                if (len(chunk[0][1]) + len(chunk[-1][1])) * len(chunk) > 2 * most:
                    self._send_large(link, chunk, most, now)
                else:
                    self._send_msgs(link, chunk, now, most)
        self._dirty.clear()

    def _too_large(self, link: Link, what: str) -> None:
        """Count (and log at the 1st, 2nd, 4th, 8th... time: a stream of them is no flood)
        a message that no frame the peer of ``link`` accepts can hold."""
        link.drops += 1
        self._drop("link_frame_too_large")
        n = self.dropped["link_frame_too_large"]
        if n & (n - 1) == 0:
            log.warning(
                "link %s: %s does not fit in a frame %s accepts (at most %d bytes: its "
                "max_frame_bytes %d plus %d); dropped (%d such messages so far)",
                link.name,
                what,
                link.peer,
                link.frame_limit,
                link.peer_max_frame,
                LINK_FRAME_SLACK,
                n,
            )

    def _send_large(self, link: Link, chunk: list[Any], most: int, now: float) -> None:
        """Messages that may be large: cut before the message whose payload would take the
        frame past ``most`` bytes (a larger message travels alone)."""
        total = len(chunk)
        start = 0
        while start < total:
            end = total
            size = 0
            for i in range(start, total):
                size += len(chunk[i][1])
                if size > most and i > start:
                    end = i
                    break
            self._send_msgs(link, chunk[start:end], now)
            start = end

    def _send_msgs(self, link: Link, chunk: list[Any], now: float, most: int = 0) -> None:
        """One MSGS frame. If headers or long paths took the encoded frame past what the
        next node accepts: cut by payload bytes (``most``, when not done yet), else in
        halves."""
        frame = wire.encode_link(wire.MSGS, chunk)
        limit = link.frame_limit
        if len(frame) > limit and most and len(chunk) > 1:
            self._send_large(link, chunk, most, now)
            return
        if len(frame) > limit:
            if len(chunk) > 1:
                half = len(chunk) // 2
                self._send_msgs(link, chunk[:half], now)
                self._send_msgs(link, chunk[half:], now)
                return
            # one message the next node would refuse (its max_frame_bytes is smaller than
            # its publisher's node's, or headers and path grew it): lost here, counted
            self._too_large(link, f"a message of {len(frame)} bytes on {chunk[0][0]!r}")
            return
        if self._send_link(link, frame, now):
            link.msgs_out += len(chunk)
            self.forwarded += len(chunk)
        else:
            link.drops += len(chunk)
            self._drop(self._send_error, len(chunk))

    def _flush_adverts(self) -> None:
        actions = self.engine.flush()
        if not actions:
            return
        now = time.monotonic()
        for action in actions:
            link = self._by_engine_id.get(action.link)
            if link is None or link.state is not LinkState.UP:
                continue
            sticky = action.sticky
            entries = [
                [p, o, None if path is None else list(path)]
                if (p, o) not in sticky
                else [p, o, list(path or ()), True]  # durable-backed: kept while down
                for p, o, path in action.entries
            ]
            if sticky:
                # a long table leaves in several frames and only the first says "full"
                # (replace): sticky entries first, so a returning ghost link's sticky
                # routes, which the receiver kept, are never withdrawn in between
                entries.sort(key=lambda e: len(e) < 4)
            full = action.full
            for chunk in _advert_chunks(entries, link.batch_bytes):
                if not self._send_link(link, wire.encode_link(wire.ADVERT, full, chunk), now):
                    # losing an advertisement would leave the peer's table wrong: restart
                    reason = _SEND_ERRORS.get(self._send_error, self._send_error)
                    self._link_down(link, f"advertisement could not be sent ({reason})", now)
                    break
                full = False

    def _send_link(self, link: Link, frame: bytes, now: float) -> bool:
        try:
            if link.dialer:
                assert link.socket is not None
                link.socket.send(frame, zmq.NOBLOCK)
            else:
                # the Cython send twice: send_multipart's Python wrapper costs a
                # low-rate relay more than the sends (a ROUTER takes both or neither)
                send = self._control_send
                send(link.ident, _NOBLOCK_MORE)
                send(frame, _NOBLOCK)
        except zmq.Again:
            self._send_error = "link_queue_full"
            return False
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                # the ROUTER has no connection for this peer (it went away): not a full queue
                self._send_error = "link_peer_gone"
                return False
            raise
        link.last_sent = now
        link.bytes_out += len(frame)
        return True

    def _on_link_frame(self, link: Link, value: list[Any], size: int, now: float) -> int:
        """A frame from a link that is up (either side). Returns the messages it held."""
        link.last_recv = now
        link.bytes_in += size
        op = value[0]
        if op == wire.MSGS:
            if len(value) != 2 or type(value[1]) is not list:
                raise ProtocolError("bad_shape", "MSGS must be [21, messages]")
            if not link.can_receive:
                link.drops += len(value[1])
                self._drop("wrong_direction", len(value[1]))
                return 0
            self._on_msgs(link, value[1])
            return len(value[1])
        elif op == wire.HEARTBEAT:
            pass
        elif op == wire.PMSGS or op == wire.PACK:
            return self._on_forward_frame(link, value)
        elif op == wire.ADVERT:
            full, entries, sticky = wire.decode_advert_sticky(value)
            for pattern, origin, _ in entries:
                try:
                    validate_pattern(pattern)
                    validate_broker_id(origin)
                except (InvalidTopic, ConfigError) as exc:
                    raise ProtocolError("bad_advert", str(exc)) from exc
            self.engine.handle(
                AdvertIn(link=link.engine_id, full=full, entries=entries, sticky=sticky)
            )
            self._save_sticky_routes(link)
        elif op == wire.BYE:
            reason = (
                value[1].get("reason", "") if len(value) > 1 and isinstance(value[1], dict) else ""
            )
            self._link_down(
                link, f"peer said goodbye ({reason})" if reason else "peer said goodbye", now
            )
        elif op == wire.LINK_REFUSE:
            info = wire.check_link_map(value)
            self._link_down(link, f"peer dropped the link: {info.get('reason', '?')}", now)
        else:
            raise ProtocolError("unexpected", f"link frame type {op} on an established link")
        return 0

    def _on_msgs(self, link: Link, batch: list[Any]) -> None:
        """Messages from a link: the relay's hot path (loop check, dedupe, retention,
        durables, route, local delivery). Type checks are inlined; wire.check_link_msg is
        the same rule for other callers."""
        me = self.broker_id
        valid = self._valid_link_topics
        seen = self.dedupe.seen
        route = self.engine.route
        prefix = self._prefix
        store = self.store
        retaining = store is not None and bool(store.rules)
        durables = bool(self._durables)
        fmts = (0, 1)
        out: dict[str, list[Any]] = {}  # this frame's envelopes per pattern: batched
        # Every message of a stream shares path and targets: check each distinct one once
        # and forward one shared path list (a relay's per-message work was a third checks).
        fwd_paths = self._fwd_paths
        checked_targets = self._checked_targets
        # route() results are cached and shared: their sends, resolved to links, per frame
        prepared: dict[int, tuple[list[Any], list[tuple[Link, list[str] | None, int]], int]] = {}
        dirty = self._dirty
        link.msgs_in += len(batch)
        for m in batch:
            try:
                if type(m) is not list or len(m) != 10:
                    raise ProtocolError("bad_shape", "MSGS entry must be a 10-element array")
                topic, payload, fmt, headers, origin, inc, seq, ts, path, targets = m
                if (
                    type(topic) is not str
                    or type(payload) is not bytes
                    or type(fmt) is not int
                    or fmt not in fmts
                    or (headers is not None and type(headers) is not dict)
                    or type(origin) is not str
                    or type(inc) is not int
                    or type(seq) is not int
                    or type(ts) not in (float, int)
                    or type(path) is not list
                    or (targets is not None and type(targets) is not list)
                ):
                    raise ProtocolError("bad_type", "MSGS entry has wrong field types")
                key_path = tuple(path)  # (unhashable elements: TypeError, bad_type)
                fwd = fwd_paths.get(key_path)
                if fwd is None:
                    if not all(type(p) is str for p in key_path):
                        raise ProtocolError("bad_type", "MSGS path and targets must be strings")
                    if len(fwd_paths) >= _STREAM_CACHE_SIZE:
                        fwd_paths.clear()
                    # False: our ID is on the path (a loop)
                    fwd = fwd_paths[key_path] = False if me in key_path else [*key_path, me]
                if targets is None:
                    key_targets = None
                else:
                    key_targets = tuple(targets)
                    if key_targets not in checked_targets:
                        if not all(type(t) is str for t in key_targets):
                            raise ProtocolError("bad_type", "MSGS path and targets must be strings")
                        if len(checked_targets) >= _STREAM_CACHE_SIZE:
                            checked_targets.clear()
                        checked_targets.add(key_targets)
                if not (0 <= inc < _I64 and 0 <= seq < _I64 and -_TS_MAX < ts < _TS_MAX):
                    # out of what the store can hold (and NaN fails every comparison)
                    raise ProtocolError("bad_value", "MSGS entry has out-of-range numbers")
                if topic not in valid:
                    validate_topic(topic)
                    if len(valid) >= TOPIC_CACHE_SIZE:
                        valid.clear()
                    valid.add(topic)
            except ProtocolError as exc:
                self._bad(self._link_source(link), exc.reason, exc.detail)
                continue
            except InvalidTopic as exc:
                self._bad(self._link_source(link), "bad_topic", str(exc))
                continue
            except TypeError as exc:  # unhashable path/targets elements
                self._bad(self._link_source(link), "bad_type", str(exc))
                continue
            if fwd is False:
                self._drop("loop")
                continue
            if seen(origin, inc, seq):
                continue
            if retaining:
                assert store is not None
                rule = store.retain_rule(topic)
                if rule is not None:
                    store.retain(rule, topic, payload, fmt, headers, origin, inc, seq, ts)
            if durables:
                self._enqueue_durable(topic, payload, fmt, headers, origin, inc, seq, ts)
            patterns, sends = route(topic, key_path, key_targets)
            if sends:
                # _enqueue, inlined: the links and target lists resolved once per frame
                prep = prepared.get(id(sends))
                if prep is None or prep[0] is not sends:
                    prep = prepared[id(sends)] = (sends, *self._resolve_sends(sends))
                if prep[2]:
                    self._drop("link_down", prep[2])  # routed over a down link: lost, counted
                for out_link, out_targets, copies in prep[1]:
                    fm = [topic, payload, fmt, headers, origin, inc, seq, ts, fwd, out_targets]
                    box = out_link.outbox
                    if not box:
                        dirty.append(out_link)
                    if copies == 1:
                        box.append(fm)
                    else:
                        box.extend([fm] * copies)
            if not patterns:
                continue
            envelope = None
            for pattern in patterns:
                if pattern not in prefix:
                    continue  # interest of retention or a durable, no client on XPUB
                if envelope is None:
                    envelope = m[:8]  # [topic, payload, fmt, headers, origin, inc, seq, ts]
                envelopes = out.get(pattern)
                if envelopes is None:
                    out[pattern] = [envelope]
                else:
                    envelopes.append(envelope)
        if out:
            self._send_deliveries(out, encoded=False)

    def _link_source(self, link: Link) -> str:
        return f"link {link.name} ({link.peer or link.engine_id})"

    # -- links: dialer side -----------------------------------------------------------------

    def _dial(self, link: Link, now: float) -> None:
        cfg = link.config
        assert cfg is not None
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        ident = f"{self.broker_id}/{link.name}"
        if self.security is not None:
            # unguessable per dial: with handover off, nobody can take this connection's
            # place on the peer's ROUTER (see bind)
            ident += "/" + uuid.uuid4().hex[:16]
        sock.setsockopt(zmq.ROUTING_ID, ident.encode())
        sock.setsockopt(zmq.SNDHWM, self.config.hwm)
        sock.setsockopt(zmq.RCVHWM, self.config.hwm)
        if "[" in cfg.uri:
            sock.setsockopt(zmq.IPV6, 1)
        if self.security is not None:
            problem = self.security.dial(sock, cfg.peer or link.peer or None)
            if problem is not None:
                sock.close()
                link.last_error = problem
                log.error("link %s: %s", link.name, problem)
                link.state = LinkState.FAILED
                return
        try:
            sock.connect(cfg.uri)
        except zmq.ZMQError as exc:
            sock.close()
            link.last_error = f"cannot connect to {cfg.uri}: {exc}"
            log.error("link %s: %s", link.name, link.last_error)
            link.state = LinkState.FAILED
            return
        link.socket = sock
        link.attempts += 1
        hello = {
            "id": self.broker_id,
            "incarnation": self.incarnation,
            "instance": self.instance,
            "group": self.config.group,
            "version": PROTOCOL_VERSION,
            "name": link.name,
            "duplex": cfg.duplex,
            "ttl": cfg.ttl,
            "conduit": cfg.conduit,
            "include": list(cfg.include),
            "exclude": list(cfg.exclude),
            "static": list(cfg.static),
            "heartbeat_interval": cfg.heartbeat_interval,
            "heartbeat_timeout": cfg.heartbeat_timeout,
            "max_frame_bytes": self.config.max_frame_bytes,
        }
        sock.send(wire.encode_link(wire.LINK_HELLO, hello))
        link.state = LinkState.HANDSHAKING
        link.deadline = now + cfg.heartbeat_timeout
        self._handlers[sock] = lambda: self._on_dialer(link)
        self._poller.register(sock, zmq.POLLIN)
        log.debug("link %s: dialling %s (attempt %d)", link.name, cfg.uri, link.attempts)

    def _on_dialer(self, link: Link) -> None:
        sock = link.socket
        budget = DRAIN_BATCH  # messages, not frames: a MSGS frame holds up to LINK_BATCH
        first = True
        while budget > 0:
            budget -= 1
            if sock is None or link.socket is not sock:
                return  # the link was torn down while draining
            if not first and not cast(int, sock.getsockopt(_EVENTS)) & _POLLIN:
                return  # (see _on_control: no zmq.Again per pass)
            first = False
            try:
                body = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            now = time.monotonic()
            try:
                if len(body) > self._link_frame_limit:
                    raise ProtocolError("oversized", f"{len(body)} bytes")
                value = wire.decode_frame(body)
                if link.state is LinkState.HANDSHAKING:
                    self._on_handshake_reply(link, value, now)
                elif link.state is LinkState.UP:
                    budget -= self._on_link_frame(link, value, len(body), now)
            except ProtocolError as exc:
                self._bad(self._link_source(link), exc.reason, exc.detail)

    def _on_handshake_reply(self, link: Link, value: list[Any], now: float) -> None:
        op = value[0]
        info = wire.check_link_map(value) if op in (wire.LINK_WELCOME, wire.LINK_REFUSE) else {}
        if op == wire.LINK_REFUSE:
            self.handshakes_refused += 1
            reason = str(info.get("reason", "no reason given"))
            retry = info.get("retry", True) is not False
            self._close_dialer(link)
            link.last_error = f"refused by peer: {reason}"
            if retry:
                link.state = LinkState.WAITING
                link.deadline = now + link.backoff()
                log.warning(
                    "link %s to %s refused: %s (retrying in %.1f s)",
                    link.name,
                    link.config and link.config.uri,
                    reason,
                    link.deadline - now,
                )
            else:
                link.state = LinkState.REFUSED
                log.error(
                    "link %s to %s refused: %s (not retrying)",
                    link.name,
                    link.config and link.config.uri,
                    reason,
                )
            return
        if op != wire.LINK_WELCOME:
            if op == wire.MSGS and len(value) == 2 and type(value[1]) is list:
                # counted in messages: one bad frame may have held hundreds
                link.drops += len(value[1])
                self._drop("link_not_ready", len(value[1]))
            raise ProtocolError("unexpected", f"frame type {op} before the handshake finished")
        peer = info.get("id")
        inc = info.get("incarnation")
        if not isinstance(peer, str) or type(inc) is not int:
            raise ProtocolError("bad_type", "LINK_WELCOME needs id and incarnation")
        problem = self._handshake_problem(peer, info)
        peer_max = 0
        if problem is None:
            try:
                peer_max = _peer_frame_max(info, self.config.max_frame_bytes)
            except ProtocolError as exc:
                problem = f"malformed handshake from {peer}: {exc.detail}"
        expected = link.config.peer if link.config is not None else None
        if problem is None and self.security is not None and expected and peer != expected:
            # CURVE proved the server holds `expected`'s key; a different ID is misconfigured
            problem = f"refused peer {peer}: the key we dialled is {expected!r}'s"
        if problem is not None:
            self.handshakes_refused += 1
            self._close_dialer(link)
            link.last_error = problem
            link.state = LinkState.WAITING
            link.deadline = now + link.backoff()
            log.warning("link %s: %s", link.name, problem)
            return
        link.peer = peer
        link.peer_incarnation = inc
        _set_peer_frame_max(link, peer_max)
        self._up(link, now)

    def _is_self(self, peer: str, info: dict[str, Any]) -> bool:
        """Our own HELLO or WELCOME: our broker ID and this process's mark (a peer that
        sends no mark is an older node: its ID alone decides)."""
        return peer == self.broker_id and info.get("instance") in (None, self.instance)

    def _handshake_problem(self, peer: str, info: dict[str, Any]) -> str | None:
        if peer == self.broker_id:
            if self._is_self(peer, info):
                return f"refused link to self ({peer})"
            # two nodes under one ID would break the loop rules (paths are broker IDs)
            return (
                f"refused peer {peer}: another node uses our broker ID {peer!r} (broker IDs "
                "must be unique: give each node its own --id, or its own data directory)"
            )
        group = info.get("group")
        if group != self.config.group:
            return f"refused peer {peer}: it is in group {group!r}, we are in {self.config.group!r}"
        version = info.get("version")
        if version != PROTOCOL_VERSION:
            return f"refused peer {peer}: protocol version {version!r}, we speak {PROTOCOL_VERSION}"
        return None

    def _close_dialer(self, link: Link) -> None:
        if link.socket is not None:
            self._poller.unregister(link.socket)
            self._handlers.pop(link.socket, None)
            link.socket.close(linger=0)
            link.socket = None

    # -- links: acceptor side ---------------------------------------------------------------

    def _on_accepted_frame(self, ident: bytes, value: list[Any], size: int) -> int:
        now = time.monotonic()
        if value[0] == wire.LINK_HELLO:
            self._accept_hello(ident, wire.check_link_map(value), now)
            return 0
        link = self._accepted.get(ident)
        if (
            link is not None
            and self.security is not None
            and self.security.user != "node:" + link.peer
        ):
            # another connection took over this routing id: it is not that peer's key
            self.security.refuse("send on link", self.security.user, f"{link.name} of {link.peer}")
            return 0
        if link is None:
            # we do not know this link (we restarted, or it timed out here): ask for a
            # new handshake instead of letting the peer talk into the void
            if value[0] != wire.BYE:
                self._send_raw(
                    ident,
                    wire.encode_link(
                        wire.LINK_REFUSE, {"reason": "unknown link: handshake again", "retry": True}
                    ),
                )
            return 0
        return self._on_link_frame(link, value, size, now)

    def _send_raw(self, ident: bytes, frame: bytes) -> None:
        try:
            self.control.send_multipart([ident, frame], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def _accept_hello(self, ident: bytes, info: dict[str, Any], now: float) -> None:
        peer = info.get("id")
        name = info.get("name")
        try:
            if not isinstance(peer, str) or not isinstance(name, str):
                raise ProtocolError("bad_type", "LINK_HELLO needs id and name strings")
            validate_broker_id(peer)
            validate_broker_id(name)
            inc = info.get("incarnation")
            if type(inc) is not int:
                raise ProtocolError("bad_type", "LINK_HELLO incarnation must be an integer")
            options = LinkOptions(
                ttl=_int(info, "ttl", 1, 255),
                conduit=_bool(info, "conduit"),
                include=_patterns(info, "include"),
                exclude=_patterns(info, "exclude"),
                static=_patterns(info, "static"),
            )
            duplex = _bool(info, "duplex")
            hb_interval = _num(info, "heartbeat_interval")
            hb_timeout = _num(info, "heartbeat_timeout")
            peer_max = _peer_frame_max(info, self.config.max_frame_bytes)
        except (ProtocolError, ConfigError, InvalidTopic) as exc:
            self.handshakes_refused += 1
            reason = f"malformed handshake: {exc}"
            self._refusal_log.report(repr(ident[:64]), "malformed", str(exc), now)
            self._send_raw(
                ident, wire.encode_link(wire.LINK_REFUSE, {"reason": reason, "retry": False})
            )
            return
        problem = self._handshake_problem(peer, info)
        sec = self.security
        retry = not self._is_self(peer, info)  # a duplicate ID may be fixed: keep trying
        if problem is None and sec is not None and sec.user != "node:" + peer:
            retry = False  # its key will not change by retrying
            # the broker ID is bound to the key the connection authenticated with
            problem = (
                f"refused peer {peer}: it authenticated as {sec.user or 'nobody'}, "
                f"not as node:{peer}"
            )
            sec.refuse("link as", sec.user, peer)
        if problem is not None:
            self.handshakes_refused += 1
            self._refusal_log.report(f"{peer}/{name}", "refused", problem, now)
            self._send_raw(
                ident,
                wire.encode_link(wire.LINK_REFUSE, {"reason": problem, "retry": retry}),
            )
            return
        previous = self._accepted.get(ident)
        if previous is not None:
            # a new handshake on the same connection supersedes whatever link it carried
            self._link_down(previous, "replaced by a new handshake on its connection", now)
        for old in list(self._accepted.values()):
            if old.peer == peer and old.name == name:
                if old.peer_incarnation > inc:
                    self._send_raw(
                        ident,
                        wire.encode_link(
                            wire.LINK_REFUSE, {"reason": "stale incarnation", "retry": False}
                        ),
                    )
                    return
                # a restarted (or redialling) peer replaces its stale link
                self._link_down(old, f"replaced by incarnation {inc} of {peer}", now)
        link = Link(
            name=name,
            kind=LinkKind.ACCEPTED,
            duplex=duplex,
            options=options,
            heartbeat_interval=hb_interval,
            heartbeat_timeout=hb_timeout,
            ident=ident,
            peer=peer,
            peer_incarnation=inc,
        )
        _set_peer_frame_max(link, peer_max)
        self._accepted[ident] = link
        welcome = {
            "id": self.broker_id,
            "incarnation": self.incarnation,
            "instance": self.instance,
            "group": self.config.group,
            "version": PROTOCOL_VERSION,
            "max_frame_bytes": self.config.max_frame_bytes,
        }
        self._send_raw(ident, wire.encode_link(wire.LINK_WELCOME, welcome))
        self._up(link, now)

    # -- links: both sides ------------------------------------------------------------------

    def _up(self, link: Link, now: float) -> None:
        link.state = LinkState.UP
        link.up_since = now
        link.last_recv = now
        link.last_sent = now
        link.attempts = 0
        link.last_error = ""
        link.ups += 1
        self.links_up += 1
        self._by_engine_id[link.engine_id] = link
        if link.kind is not LinkKind.DISCOVERED:
            # a configured or inbound link to the same peer makes a discovered one redundant
            for other in list(self._dialers.values()):
                if other.kind is LinkKind.DISCOVERED and other.peer == link.peer:
                    self._remove_discovered(other, now, "superseded by link " + link.name)
        self.engine.handle(
            LinkUp(
                link=link.engine_id,
                peer=link.peer,
                can_send=link.can_send,
                can_receive=link.can_receive,
                options=link.options,
            )
        )
        if self.forward is not None:
            # resume: everything unacknowledged on this link goes again, in order
            self.forward.attach(link.engine_id, link.peer, _link_key(link), now)
            self._save_sticky_routes(link)
        log.info(
            "link %s %s %s (incarnation %d) is up",
            link.name,
            "to" if link.dialer else "from",
            link.peer,
            link.peer_incarnation,
        )

    def _link_down(self, link: Link, reason: str, now: float, *, forget_peer: bool = True) -> None:
        was_up = link.state is LinkState.UP
        if was_up:
            self.links_down += 1
            # sticky (durable-backed) interest stays routed toward the down link, whose
            # queue holds persistent messages until it returns (engine rule 6)
            self.engine.handle(LinkDown(link=link.engine_id, keep_sticky=True))
            self._by_engine_id.pop(link.engine_id, None)
            self._pack_due.pop(link, None)
            if self.forward is not None:
                self.forward.detach(link.engine_id, now)
            log.warning(
                "link %s %s %s is down: %s",
                link.name,
                "to" if link.dialer else "from",
                link.peer,
                reason,
            )
        link.last_error = reason
        if link.outbox:
            link.drops += len(link.outbox)
            self._drop("link_down", len(link.outbox))
            link.outbox = []
        if link.kind is LinkKind.DISCOVERED:
            # mDNS cannot tell a crash from a pause: the link's heartbeats decide. The peer
            # is dropped; a new announcement (a restarted node re-announces) redials it.
            self._close_dialer(link)
            self._dialers.pop(link.name, None)
            if forget_peer and self._discovered.pop(link.peer, None) is not None:
                log.info("dropped discovered peer %s: %s", link.peer, reason)
        elif link.dialer:
            self._close_dialer(link)
            cfg = link.config
            assert cfg is not None
            if cfg.reconnect_max_attempts and link.attempts >= cfg.reconnect_max_attempts:
                link.state = LinkState.FAILED
                log.error("link %s: giving up after %d attempts", link.name, link.attempts)
            else:
                link.state = LinkState.WAITING
                link.deadline = now + (0.0 if was_up else link.backoff())
        else:
            self._accepted.pop(link.ident, None)

    def _tick(self, now: float) -> None:
        if self.forward is not None:
            self.forward.retransmit(now)
            self._expire_sticky_routes(now)
        if self.staging.nbytes:
            expired = self.staging.expire(now)
            if expired:
                self._drop("staged_expired", expired)
                log.warning("discarded %d staged rows whose commit never came", expired)
        if self._durables and now >= self._next_durable_probe:
            self._next_durable_probe = now + DURABLE_PROBE_INTERVAL
            self._probe_durable_consumers()
        hb = wire.encode_link(wire.HEARTBEAT)
        for link in self._all_links():
            state = link.state
            if state is LinkState.UP:
                if now - link.last_recv > link.heartbeat_timeout and not self._input_waiting(link):
                    self._link_down(link, f"no heartbeat for {link.heartbeat_timeout:g} s", now)
                elif now - link.last_sent >= link.heartbeat_interval:
                    self._send_link(link, hb, now)
            elif state is LinkState.HANDSHAKING and now >= link.deadline:
                self._close_dialer(link)
                link.last_error = "no answer to the handshake"
                link.state = LinkState.WAITING
                delay = link.backoff()
                link.deadline = now + delay
                if link.attempts & (link.attempts - 1) == 0:
                    # attempts 1, 2, 4, 8...: a peer that is not there is said at once, and
                    # a long outage does not flood the log
                    log.warning(
                        "link %s: no answer from %s to the handshake (attempt %d; nothing "
                        "listening there, or not a zbroker node); next attempt in %.1f s",
                        link.name,
                        link.config.uri if link.config is not None else "?",
                        link.attempts,
                        delay,
                    )
            elif state is LinkState.WAITING and link.dialer and now >= link.deadline:
                cfg = link.config
                assert cfg is not None
                if cfg.reconnect_max_attempts and link.attempts >= cfg.reconnect_max_attempts:
                    link.state = LinkState.FAILED
                    log.error("link %s: giving up after %d attempts", link.name, link.attempts)
                    if link.kind is LinkKind.DISCOVERED:
                        self._link_down(link, "unreachable", now)
                else:
                    self._dial(link, now)

    def _probe_durable_consumers(self) -> None:
        """Is each attached durable subscriber still connected? One whose credit is used
        up is never sent to, so a subscriber that died (kill -9) would stay "attached" for
        ever, its in-flight messages waiting for someone to reattach under its name. A
        small frame it ignores (a PING with our incarnation) tells: the ROUTER refuses it
        at once (ROUTER_MANDATORY) when the connection is gone. A full queue (a slow
        subscriber) is not gone."""
        frame = wire.encode_control(wire.PING, 0, {"incarnation": self.incarnation})
        send = self._control_send
        for d in self._durables.values():
            ident = d.consumer
            if ident is None:
                continue
            try:
                send(ident, _NOBLOCK_MORE)
                send(frame, _NOBLOCK)
            except zmq.Again:
                continue
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EHOSTUNREACH:
                    raise
                d.consumer = None
                assert self.store is not None
                self.store.set_attached(d.name, False)
                log.info(
                    "durable %s: its subscriber is gone; %d message(s) it had not "
                    "acknowledged wait for the next one to attach",
                    d.name,
                    len(d.sent),
                )

    def _input_waiting(self, link: Link) -> bool:
        """Frames queued for us on the link's socket: the peer is alive and we are behind
        (a long pass), so its silence is ours, not its."""
        sock = link.socket if link.dialer else self.control
        return sock is not None and bool(int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN)

    def _say_goodbye(self) -> None:
        """Tell every peer we are leaving, so it withdraws our interest at once."""
        bye = wire.encode_link(wire.BYE, {"reason": "node stopping"})
        now = time.monotonic()
        for link in self._all_links():
            if link.state is LinkState.UP:
                self._send_link(link, bye, now)

    # -- discovery --------------------------------------------------------------------------

    def _start_discovery(self) -> None:
        from .discovery import Discovery, default_interfaces

        push = self._ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(self._discovery_endpoint)
        lock = threading.Lock()
        self._discovery_push = push
        self._discovery_lock = lock

        def emit(event: dict[str, Any]) -> None:  # called from zeroconf's threads
            with lock:
                if not push.closed:
                    push.send(msgpack.packb(event))

        interfaces = list(self.config.interfaces) or default_interfaces(self.config.host)
        self._discovery = Discovery(
            broker_id=self.broker_id,
            group=self.config.group,
            port=self.ports["control"],
            interfaces=interfaces,
            emit=emit,
            incarnation=self.incarnation,
        )
        self._discovery.start()

    def _on_discovery(self) -> None:
        now = time.monotonic()
        while True:
            try:
                event = msgpack.unpackb(self.discovery_in.recv(zmq.NOBLOCK), raw=False)
            except zmq.Again:
                return
            peer = event.get("id")
            if not isinstance(peer, str):
                continue
            if event.get("event") == "lost":
                record = self._discovered.pop(peer, None)
                if record is not None:
                    log.info("discovered peer %s said goodbye", peer)
                for link in list(self._dialers.values()):
                    if link.kind is LinkKind.DISCOVERED and link.peer == peer:
                        self._remove_discovered(link, now)
                continue
            try:
                validate_broker_id(peer)
            except ConfigError:
                continue
            if event.get("group") != self.config.group:
                log.debug("ignoring node %s of group %r", peer, event.get("group"))
                continue
            if event.get("version") != PROTOCOL_VERSION:
                log.warning("ignoring node %s: protocol version %r", peer, event.get("version"))
                continue
            endpoints = [e for e in event.get("endpoints", []) if isinstance(e, str)]
            if not endpoints:
                continue
            self._discovered[peer] = {"endpoints": endpoints, "since": time.time()}
            self._consider_peer(peer, endpoints, now)

    def _consider_peer(self, peer: str, endpoints: list[str], now: float) -> None:
        """Link to a discovered peer unless it dials us, or a link to it exists already."""
        if peer == self.broker_id or self.broker_id > peer:
            return  # of a discovered pair, the lower broker ID dials: exactly one link
        for other in self._all_links():
            if other.kind is LinkKind.DISCOVERED:
                continue
            if other.peer == peer and other.state in (LinkState.UP, LinkState.HANDSHAKING):
                return  # configured or inbound link: not doubled
            if other.config is not None and other.config.uri in endpoints:
                return  # a configured link dials this very endpoint
        name = ("mdns-" + peer)[:64]
        link = self._dialers.get(name)
        if link is not None:
            if link.state in (LinkState.UP, LinkState.HANDSHAKING):
                return
            self._close_dialer(link)  # announced again: redial at once
            link.attempts = 0
        else:
            cfg = self.config.discovered_link(name, endpoints[0])
            if not cfg.reconnect_max_attempts:
                # an unreachable announcement must not be dialled forever
                cfg = dataclasses.replace(cfg, reconnect_max_attempts=5)
            link = Link(
                name=name,
                kind=LinkKind.DISCOVERED,
                duplex=cfg.duplex,
                options=cfg.options,
                heartbeat_interval=cfg.heartbeat_interval,
                heartbeat_timeout=cfg.heartbeat_timeout,
                config=cfg,
                peer=peer,
            )
            self._dialers[name] = link
        log.info("discovered %s at %s: linking", peer, endpoints[0])
        self._dial(link, now)

    def _remove_discovered(self, link: Link, now: float, reason: str = "peer gone") -> None:
        """Close a link to a discovered peer for good (it left, or another link replaces
        it); the peer's announcement record is kept."""
        if link.state is LinkState.UP:
            self._send_link(link, wire.encode_link(wire.BYE, {"reason": reason}), now)
        self._link_down(link, reason, now, forget_peer=False)

    def peers(self) -> list[dict[str, Any]]:
        """Every peer this node knows: how it was found, link state, endpoint."""
        order = {
            LinkState.UP: 0,
            LinkState.HANDSHAKING: 1,
            LinkState.WAITING: 2,
            LinkState.REFUSED: 3,
            LinkState.FAILED: 4,
        }
        peers: dict[str, dict[str, Any]] = {}

        def entry(pid: str) -> dict[str, Any]:
            return peers.setdefault(
                pid,
                {"id": pid, "found_by": [], "state": "discovered", "endpoint": None, "links": []},
            )

        for pid, rec in self._discovered.items():
            e = entry(pid)
            e["found_by"].append("mdns")
            e["endpoint"] = rec["endpoints"][0]
        for link in self._all_links():
            if not link.peer:
                continue
            e = entry(link.peer)
            how = {
                LinkKind.STATIC: "config",
                LinkKind.DISCOVERED: "mdns",
                LinkKind.ACCEPTED: "inbound",
            }[link.kind]
            if how not in e["found_by"]:
                e["found_by"].append(how)
            e["links"].append(link.name)
            if link.config is not None and e["endpoint"] is None:
                e["endpoint"] = link.config.uri
            current = e["state"]
            if current == "discovered" or order[link.state] < order.get(LinkState(current), 9):
                e["state"] = link.state.value
        for e in peers.values():
            e["found_by"].sort()
        return sorted(peers.values(), key=lambda e: e["id"])

    # -- durable subscriptions ---------------------------------------------------------------

    def _add_interest(self, pattern: str, source: str) -> None:
        sources = self._interest.setdefault(pattern, set())
        was_sticky = _sticky(sources)
        first = not sources
        sources.add(source)
        if first or _sticky(sources) != was_sticky:
            # durable interest is sticky: it stays routed while links to it are down
            self.engine.handle(LocalSubscribe(pattern=pattern, sticky=_sticky(sources)))

    def _drop_interest(self, pattern: str, source: str) -> None:
        sources = self._interest.get(pattern)
        if sources is None or source not in sources:
            return
        was_sticky = _sticky(sources)
        sources.discard(source)
        if not sources:
            del self._interest[pattern]
            self.engine.handle(LocalUnsubscribe(pattern=pattern))
        elif was_sticky and not _sticky(sources):
            self.engine.handle(LocalSubscribe(pattern=pattern, sticky=False))

    def _enqueue_durable(
        self,
        topic: str,
        payload: bytes,
        fmt: int,
        headers: Any,
        origin: str,
        inc: int,
        seq: int,
        ts: float,
    ) -> None:
        store = self.store
        assert store is not None
        for name in self._durable_match.match(topic):
            d = self._durables[name]
            if store.durable_rejects(name, 1, len(payload) + len(topic)):
                # reject-new and full: what is stored stays; this one is not queued
                self._drop("durable_reject_new")
                continue
            store.enqueue(name, d.next_q, (topic, payload, fmt, headers, origin, inc, seq, ts))
            d.next_q += 1
            self.durable_stored += 1
            if d.consumer is not None:
                self._pump.add(name)

    def _forward_full(
        self, sends: list[tuple[str, tuple[str, ...] | None, int]], n: int, size: int
    ) -> str | None:
        """With ``[forward] overflow = "reject-new"``: the link of ``sends`` whose
        store-and-forward queue cannot take ``n`` more messages of ``size`` bytes in all,
        None if they fit (or the policy is drop-oldest)."""
        fw = self.forward
        if fw is None or self.config.forward_overflow != "reject-new":
            return None
        for link_id, _targets, _copies in sends:
            q = fw.by_engine.get(link_id)
            if q is None:
                continue
            if (fw.max_msgs and len(q.entries) + n > fw.max_msgs) or (
                fw.max_bytes and q.nbytes + size > fw.max_bytes
            ):
                return f"{q.qkey} (toward {q.peer}: {len(q.entries)} messages waiting)"
        return None

    def _forward_refusal(self, topics: dict[str, list[int]]) -> str | None:
        """Back-pressure at the origin: why persistent messages on ``topics`` (topic ->
        [messages, bytes]) cannot be queued onward, None if they can."""
        if self.forward is None or self.config.forward_overflow != "reject-new":
            return None
        for topic, (n, size) in topics.items():
            _, sends = self.engine.route(topic, (), None)
            full = self._forward_full(sends, n, size) if sends else None
            if full is not None:
                return (
                    f"refused: the store-and-forward queue of link {full} is full "
                    "(overflow policy reject-new): the network downstream is slow or cut; "
                    "retry later"
                )
        return None

    def _durable_refusal(self, topics: dict[str, list[int]]) -> str | None:
        """Why messages on ``topics`` (topic -> [messages, bytes]) cannot be stored, if a
        matching durable subscription is full under ``reject-new``; None if they can."""
        if not self._durables or self.store is None:
            return None
        store = self.store
        adds: dict[str, list[int]] = {}
        for topic, (n, size) in topics.items():
            for name in self._durable_match.match(topic):
                a = adds.setdefault(name, [0, 0])
                a[0] += n
                a[1] += size
        for name, (n, size) in adds.items():
            if store.durable_rejects(name, n, size):
                return (
                    f"refused: durable subscription {name!r} is full (overflow policy "
                    "reject-new): it must be drained or deleted first"
                )
        return None

    def _durable_op(
        self, ident: bytes, op: int, req: dict[str, Any]
    ) -> tuple[int, dict[str, Any]] | None:
        store = self.store
        name = req.get("name")
        try:
            validate_broker_id(name, "durable name")
        except ConfigError as exc:
            return wire.ERROR, {"message": str(exc)}
        assert isinstance(name, str) and store is not None
        d = self._durables.get(name)
        if op == wire.DURABLE_OPEN:
            pattern = req.get("pattern")
            credit = req.get("credit", 100)
            max_msgs = req.get("max_msgs", 0)
            max_bytes = req.get("max_bytes", 0)
            max_age = req.get("max_age", 0.0)
            overflow = req.get("overflow", "drop-oldest")
            if overflow not in OVERFLOW_POLICIES:
                return wire.ERROR, {
                    "message": f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}"
                }
            try:
                validate_pattern(pattern)
            except InvalidTopic as exc:
                return wire.ERROR, {"message": str(exc)}
            assert isinstance(pattern, str)
            if type(credit) is not int or not 1 <= credit <= 100_000:
                return wire.ERROR, {"message": "credit must be an integer in 1..100000"}
            if type(max_msgs) is not int or not 0 <= max_msgs < _I64:
                return wire.ERROR, {"message": "max_msgs must be a non-negative integer"}
            if type(max_bytes) is not int or not 0 <= max_bytes < _I64:
                return wire.ERROR, {"message": "max_bytes must be a non-negative integer"}
            if type(max_age) not in (int, float) or not 0 <= max_age < 1e10:
                return wire.ERROR, {"message": "max_age must be a non-negative number of seconds"}
            created = d is None
            if d is None:
                store.create_durable(
                    name, pattern, max_msgs, max_bytes, float(max_age), str(overflow)
                )
                d = self._durables[name] = Durable(name, pattern, 1, max_msgs)
                self._durable_match.insert(pattern, name)
                self._add_interest(pattern, "durable:" + name)
            elif d.pattern != pattern:
                return wire.ERROR, {
                    "message": f"durable subscription {name!r} exists with pattern {d.pattern!r}"
                }
            # (re)attach: everything not acknowledged is sent again, flagged redelivered
            d.consumer, d.credit, d.sent = ident, credit, collections.deque()
            d.sent_upto = 0
            store.set_attached(name, True)
            self._pump.add(name)
            store.commit()
            return op, {
                "name": name,
                "pattern": pattern,
                "stored": store.durable_depth(name),
                "dropped": store.durable_dropped(name),
                "created": created,
            }
        if d is None:
            if op == wire.DURABLE_DELETE:
                return op, {"deleted": 0}
            return None
        if op == wire.DURABLE_ACK:
            upto = req.get("upto")
            if type(upto) is int and 0 <= upto < _I64 and d.consumer == ident:
                store.ack(name, upto)
                while d.sent and d.sent[0] <= upto:
                    d.sent.popleft()
                self.durable_acked += 1
                self._pump.add(name)
            return None
        if op == wire.DURABLE_CLOSE:
            if d.consumer == ident:
                d.consumer = None
                store.set_attached(name, False)
            return None
        if op == wire.DURABLE_DELETE:
            del self._durables[name]
            self._durable_match.remove(d.pattern, name)
            self._drop_interest(d.pattern, "durable:" + name)
            self._pump.discard(name)
            return op, {"deleted": store.delete_durable(name)}
        return None

    def _pump_durables(self) -> None:
        """Send attached durable subscribers what they have credit for.

        The messages are marked delivered and that is committed *before* they are sent:
        a node killed right after sending must flag them ``redelivered`` when it sends
        them again (a mark committed after the send could die with the node, and the
        repeat would look new). A message marked but not sent (its subscriber went away)
        is flagged when it comes: "may have been delivered"."""
        store = self.store
        assert store is not None
        names = self._pump
        self._pump = set()
        store.trim_hold = set()  # the commit below applies the bounds, after the marks
        batches: list[tuple[Durable, list[tuple[int, bytes]]]] = []
        for name in names:
            d = self._durables.get(name)
            if d is None or d.consumer is None:
                continue
            room = d.credit - len(d.sent)
            if room <= 0:
                continue
            rows = store.pending_durable(name, d.sent_upto, room)
            frames: list[tuple[int, bytes]] = []
            for q, topic, payload, fmt, h, origin, inc, oseq, ts, delivered in rows:
                body = {
                    "name": name,
                    "q": q,
                    "redelivered": bool(delivered),
                    "msg": [
                        topic,
                        payload,
                        fmt,
                        None if h is None else msgpack.unpackb(h, strict_map_key=False),
                        origin,
                        inc,
                        oseq,
                        ts,
                    ],
                }
                frames.append((q, wire.encode_control(wire.DELIVER, 0, body)))
            if frames:
                store.mark_delivered(name, [q for q, _ in frames])
                batches.append((d, frames))
        if not batches:
            store.commit()  # the bounds that waited for this pump (nothing else, if none)
            return
        store.commit()
        for d, frames in batches:
            for q, frame in frames:
                if d.consumer is None:
                    break
                try:
                    self.control.send_multipart([d.consumer, frame], zmq.NOBLOCK)
                except zmq.ZMQError:
                    d.consumer = None  # gone (or not reading): keep the rest for its return
                    store.set_attached(d.name, False)
                    break
                d.sent.append(q)
                d.sent_upto = q
                self.durable_delivered += 1

    def durable_status(self) -> list[dict[str, Any]]:
        store = self.store
        assert store is not None
        return [
            {
                "name": d.name,
                "pattern": d.pattern,
                "attached": d.consumer is not None,
                "in_flight": len(d.sent),
                "stored": store.durable_depth(d.name),
                "dropped": store.durable_dropped(d.name),
                "max_msgs": d.max_msgs,
            }
            for d in self._durables.values()
        ]

    # -- store-and-forward of persistent messages (zbroker.forward) ----------------------------

    def _forward_persistent(
        self, sends: list[tuple[str, tuple[str, ...] | None, int]], msg: list[Any], pseq: int
    ) -> None:
        """Queue a persistent message (``msg``: fields up to its path, which ends with us)
        in the store-backed queue of each send's link, up or down (a sticky route)."""
        fw = self.forward
        assert fw is not None
        for link_id, targets, _copies in sends:
            # one copy per link even with conduit off: the receiver's dedupe would fold
            # the others, and a stored copy is not free
            fields = [*msg, None if targets is None else list(targets), pseq]
            if not fw.put(link_id, fields):
                self._drop("forward_no_queue")

    def _on_forward_frame(self, link: Link, value: list[Any]) -> int:
        """PMSGS or PACK from a link that is up. Returns the messages it held."""
        fw = self.forward
        if value[0] == wire.PACK:
            epoch, upto = wire.decode_pack(value)
            if fw is not None:
                fw.on_ack(link.engine_id, epoch, upto, time.monotonic())
            return 0
        epoch, base, entries = wire.decode_pmsgs(value)
        if not link.can_receive:
            link.drops += len(entries)
            self._drop("wrong_direction", len(entries))
            return 0
        if fw is None:
            return 0
        self._on_pmsgs(link, fw, epoch, base, entries)
        self._pack_due[link] = None
        return len(entries)

    def _on_pmsgs(
        self, link: Link, fw: Forwarder, epoch: int, base: int, entries: list[Any]
    ) -> None:
        """Persistent messages from a link: taken once per link sequence (the position is
        committed with what they produce here), then like MSGS: loop check, persistent
        dedupe, retention, durables, store-and-forward onward, local delivery."""
        me = self.broker_id
        ikey = _link_key(link)
        store = self.store
        link.msgs_in += len(entries)
        backpressure = self.config.forward_overflow == "reject-new"
        for m in entries:
            try:
                lseq = wire.pmsgs_lseq(m)
            except ProtocolError as exc:
                self._bad(self._link_source(link), exc.reason, exc.detail)
                continue
            if backpressure and lseq == fw.inbound.get(ikey, (0, 0))[1] + 1:
                # the next entry must be queued onward: if a queue it would go to is full,
                # it is not taken (no PACK for it): the sender keeps it and sends it again,
                # and its own queue fills back toward the origin
                try:
                    route = self.engine.route(
                        m[1], tuple(m[9]), None if m[10] is None else tuple(m[10])
                    )
                except (TypeError, IndexError, ValueError):
                    route = None  # malformed: accepted and counted below
                if (
                    route is not None
                    and route[1]
                    and self._forward_full(route[1], 1, len(m[2]) if type(m[2]) is bytes else 0)
                ):
                    self._drop("forward_backpressure")
                    break
            if not fw.accept(ikey, epoch, base, lseq):
                continue
            # taken under its sequence: a bad entry is counted and never asked for again
            try:
                wire.check_pmsgs_entry(m)
                (_, topic, payload, fmt, headers, origin, inc, seq, ts, path, targets, pseq) = m
                if not all(type(p) is str for p in path) or (
                    targets is not None and not all(type(t) is str for t in targets)
                ):
                    raise ProtocolError("bad_type", "PMSGS path and targets must be strings")
                if not (0 <= inc < _I64 and 0 <= seq < _I64 and -_TS_MAX < ts < _TS_MAX):
                    raise ProtocolError("bad_value", "PMSGS entry has out-of-range numbers")
                if topic not in self._valid_link_topics:
                    validate_topic(topic)
                key_path = tuple(path)
                key_targets = None if targets is None else tuple(targets)
            except ProtocolError as exc:
                self._bad(self._link_source(link), exc.reason, exc.detail)
                continue
            except InvalidTopic as exc:
                self._bad(self._link_source(link), "bad_topic", str(exc))
                continue
            if me in path:
                self._drop("loop")
                continue
            if self.pdedupe.seen(origin, inc, pseq):
                continue  # the same message by another path
            if store is not None and store.rules:
                rule = store.retain_rule(topic)
                if rule is not None:
                    store.retain(rule, topic, payload, fmt, headers, origin, inc, seq, ts)
            if self._durables:
                self._enqueue_durable(topic, payload, fmt, headers, origin, inc, seq, ts)
            patterns, sends = self.engine.route(topic, key_path, key_targets)
            if sends:
                self._forward_persistent(
                    sends, [topic, payload, fmt, headers, origin, inc, seq, ts, [*path, me]], pseq
                )
            if patterns:
                body = wire.encode_delivery_body(topic, payload, fmt, headers, origin, inc, seq, ts)
                self._deliver_local(patterns, body)

    def _flush_forward(self) -> None:
        """After the pass's commit: acknowledge what inbound links gave us (it is stored),
        then send what outbound queues hold (it is stored under its sequence)."""
        fw = self.forward
        assert fw is not None
        now = time.monotonic()
        if self._pack_due:
            due = self._pack_due
            self._pack_due = {}
            for inbound in due:
                pos = fw.position(_link_key(inbound))
                if pos is not None and inbound.state is LinkState.UP:
                    self._send_link(inbound, wire.encode_link(wire.PACK, pos[0], pos[1]), now)
        for q in list(fw.ready()):
            out = self._by_engine_id.get(q.engine_id)
            if out is None or out.state is not LinkState.UP:
                continue
            while q.entries and q.sent_upto < q.entries[-1][0]:
                size = fw.next_size(q)
                if size > out.frame_limit - _PMSGS_HEAD:
                    # never fits a frame the peer takes (a smaller max_frame_bytes than
                    # ours): dropped once what is before it is acknowledged, so that
                    # the frame's base tells the peer not to wait for it
                    if not fw.drop_next(q):
                        break
                    self._too_large(out, f"a persistent message of {size} bytes")
                    continue
                frame, upto, n = fw.next_frame(q, LINK_BATCH, out.batch_bytes)
                if n == 0 or not self._send_link(out, frame, now):
                    break  # window full, or the socket's queue: the next pass goes on
                fw.sent(q, upto, n)
                out.msgs_out += n
                self.forwarded += n

    def _save_sticky_routes(self, link: Link) -> None:
        """Keep what restores this link's sticky routes after a restart of this node (a
        message that arrives before the link is back must still find its way)."""
        fw = self.forward
        if fw is None:
            return
        entries = self.engine.sticky_entries(link.engine_id)
        o = link.options
        meta = msgpack.packb(
            {
                "can_send": link.can_send,
                "ttl": o.ttl,
                "include": list(o.include),
                "exclude": list(o.exclude),
                "static": list(o.static),
                "sticky": [[p, org, list(path)] for p, org, path in entries],
            }
        )
        fw.set_meta(link.engine_id, meta)

    def _restore_sticky_routes(self) -> None:
        fw = self.forward
        assert fw is not None
        now = time.monotonic()
        for q in list(fw.by_engine.values()):
            if not q.meta:
                continue
            try:
                meta = msgpack.unpackb(q.meta, raw=False)
                options = LinkOptions(
                    ttl=meta["ttl"],
                    include=tuple(meta["include"]),
                    exclude=tuple(meta["exclude"]),
                    static=tuple(meta["static"]),
                )
                entries = [(p, o, tuple(path)) for p, o, path in meta["sticky"]]
            except (ValueError, KeyError, TypeError, msgpack.UnpackException):
                log.warning("link queue %s: unreadable sticky routes, not restored", q.qkey)
                continue
            self.engine.restore_ghost(
                q.engine_id, q.peer, entries, can_send=bool(meta["can_send"]), options=options
            )
            q.down_since = now

    def _expire_sticky_routes(self, now: float) -> None:
        """Sticky routes over a link down longer than ``sticky_ttl`` are withdrawn, and
        the persistent messages queued for it dropped (counted)."""
        fw = self.forward
        assert fw is not None
        ttl = self.config.sticky_ttl
        for link_id in self.engine.ghosts():
            q = fw.by_engine.get(link_id)
            if q is not None and (q.up or now - q.down_since <= ttl):
                continue
            self.engine.handle(LinkDown(link=link_id))
            self._drop("sticky_route_expired")
            if q is not None:
                n = fw.drop_queue(link_id)
                if n:
                    self._drop("forward_expired", n)
            log.warning("sticky routes over link %s expired after %g s down", link_id, ttl)

    # -- persistent publish and the retention log -------------------------------------------

    def _control_publish(self, ident: bytes, req_id: int, req: dict[str, Any]) -> None:
        """A publish sent as a request (``persistent``): handled like any publish, and
        confirmed only after the end-of-pass commit that stores it."""
        topic, payload, fmt, headers = (
            req.get("topic"),
            req.get("payload"),
            req.get("fmt", 0),
            req.get("headers"),
        )
        try:
            if (
                type(topic) is not str
                or type(payload) is not bytes
                or type(fmt) is not int
                or fmt not in (0, 1)
            ):
                raise ProtocolError("bad_type", "PUBLISH needs topic, payload bytes and fmt")
            if headers is not None and (
                type(headers) is not dict or not all(type(k) is str for k in headers)
            ):
                raise ProtocolError("bad_type", "headers must be a map with string keys")
            validate_publish_topic(topic)
        except (ProtocolError, InvalidTopic) as exc:
            self._bad(self._source(ident), getattr(exc, "reason", "bad_topic"), str(exc))
            self._send_control(ident, wire.ERROR, req_id, {"message": str(exc)})
            return
        store = self.store
        rule = store.retain_rule(topic) if store is not None else None
        full = None
        if (
            rule is not None
            and store is not None
            and store.rejects(rule, len(payload) + len(topic))
        ):
            full = store.rules[rule]
        refusal = self._durable_refusal({topic: [1, len(payload) + len(topic)]})
        if refusal is None:
            refusal = self._forward_refusal({topic: [1, len(payload) + len(topic)]})
        if full is None and refusal is not None:
            self._drop("rejected_persistent")
            self._send_control(ident, wire.ERROR, req_id, {"message": refusal})
            return
        if full is not None:
            # a persistent message that cannot be stored is refused, not half-accepted
            self._drop("rejected_persistent")
            self._send_control(
                ident,
                wire.ERROR,
                req_id,
                {
                    "message": f"refused: retention rule {full.pattern!r} is full "
                    f"(max_msgs {full.max_msgs or 'unbounded'}, max_bytes "
                    f"{full.max_bytes or 'unbounded'}; overflow policy reject-new)"
                },
            )
            return
        seq, stored = self._originate(topic, payload, fmt, headers, rule, persistent=True)
        self._confirms.append(
            (ident, req_id, {"id": [self.broker_id, self.incarnation, seq], "retained_seq": stored})
        )

    def _originate(
        self,
        topic: str,
        payload: bytes,
        fmt: int,
        headers: dict[str, Any] | None,
        rule: str | None,
        *,
        persistent: bool = False,
    ) -> tuple[int, int | None]:
        """Publish a checked message that starts here and is stored (``rule``: its
        retention rule, looked up by the caller): retain it, queue it for durables, route
        it (``persistent``: store-and-forward across links). Returns (message seq,
        retention seq or None)."""
        self.seq += 1
        self.received += 1
        seq, ts, me, inc = self.seq, time.time(), self.broker_id, self.incarnation
        stored = None
        store = self.store
        if rule is not None and store is not None:
            stored = store.retain(rule, topic, payload, fmt, headers, me, inc, seq, ts)
        if self._durables:
            self._enqueue_durable(topic, payload, fmt, headers, me, inc, seq, ts)
        patterns, sends = self.engine.route(topic, (), None)
        if sends and persistent:
            self.pseq += 1
            self._forward_persistent(
                sends, [topic, payload, fmt, headers, me, inc, seq, ts, [me]], self.pseq
            )
        elif sends:
            self._enqueue(sends, [topic, payload, fmt, headers, me, inc, seq, ts, [me], None])
        if patterns:
            body = wire.encode_delivery_body(topic, payload, fmt, headers, me, inc, seq, ts)
            self._deliver_local(patterns, body)
        return seq, stored

    # -- staged writes (exactly-once writers: see zbroker.staging) ----------------------------

    def _staging_op(self, ident: bytes, req_id: int, op: int, req: dict[str, Any]) -> None:
        staging = self.staging
        try:
            if op == wire.STAGE:
                held = staging.stage(
                    req.get("token"), req.get("part"), req.get("rows"), group=req.get("group")
                )
                self._send_control(ident, op, req_id, {"token": req["token"], "rows": held})
            elif op == wire.STAGE_ABORT:
                group = staging.check_group(req.get("group"))  # (bad: nothing discarded)
                dropped = staging.discard(req.get("tokens", []))
                if group is not None:
                    dropped += staging.discard_group(group)
                self._send_control(ident, op, req_id, {"discarded": dropped})
            else:
                # a malformed group refuses the whole commit before a row is applied (it
                # was checked after: the rows went out and the writer was told it failed)
                group = staging.check_group(req.get("group"))
                self._stage_commit(ident, req_id, req)
                if group is not None:
                    # attempts of this job that no commit names (failed, retried): gone now
                    staging.discard_group(group)
        except StagingError as exc:
            self._bad(self._source(ident), "bad_staging", str(exc))
            self._send_control(ident, wire.ERROR, req_id, {"message": str(exc)})

    def _stage_commit(self, ident: bytes, req_id: int, req: dict[str, Any]) -> None:
        """Publish the rows of committed tokens, all or none, once per (writer, batch)."""
        staging, store = self.staging, self.store
        assert store is not None
        tokens, writer, batch = req.get("tokens"), req.get("writer"), req.get("batch")
        key: tuple[str, int] | None = None
        if writer is not None:
            if (
                type(writer) is not str
                or not 0 < len(writer) <= 256
                or type(batch) is not int
                or not 0 <= batch < _I64
            ):
                raise StagingError(
                    "writer must be a string of 1..256 characters with an integer batch"
                )
            key = (writer, batch)
        if key is None and staging.was_applied(tokens):
            # the same commit sent again (its reply was lost): it is out already
            staging.duplicate_commits += 1
            self._send_control(ident, wire.STAGE_COMMIT, req_id, {"applied": 0, "duplicate": True})
            return
        names = staging.check_commit(tokens)
        if key is not None and (
            store.batch_applied(*key) or any(a.key == key for a in self._applying)
        ):
            # a batch replayed after a restart: its rows are out already
            staging.discard(names)
            staging.duplicate_commits += 1
            self._confirms.append((ident, req_id, {"applied": 0, "duplicate": True}))
            return
        if not names and key is None:
            self._send_control(ident, wire.STAGE_COMMIT, req_id, {"applied": 0, "duplicate": False})
            return
        # rows that a reject-new rule cannot take refuse the commit before anything is sent
        staged = [row for t in names for row in staging.peek(t)]
        rules = [store.retain_rule(row[0]) for row in staged]
        adds: dict[str, list[int]] = {}
        for rule, row in zip(rules, staged, strict=True):
            if rule is not None:
                a = adds.setdefault(rule, [0, 0])
                a[0] += 1
                a[1] += len(row[0]) + len(row[1])
        full = store.overflowing_rule(adds)
        topics: dict[str, list[int]] = {}
        for row in staged:
            t = topics.setdefault(row[0], [0, 0])
            t[0] += 1
            t[1] += len(row[0]) + len(row[1])
        refusal = self._durable_refusal(topics) or self._forward_refusal(topics)
        if full is None and refusal is not None:
            self._drop("rejected_persistent", len(staged))
            raise StagingError(refusal + "; the rows stay staged until aborted")
        if full is not None:
            self._drop("rejected_persistent", sum(n for n, _ in adds.values()))
            raise StagingError(
                f"refused: retention rule {full.pattern!r} cannot take this batch "
                f"(max_msgs {full.max_msgs or 'unbounded'}, max_bytes "
                f"{full.max_bytes or 'unbounded'}; overflow policy reject-new); the rows "
                "stay staged until aborted"
            )
        _, rows = staging.take(tokens)
        self._applying.append(_Applying(ident, req_id, rows, rules, key))

    def _apply_staged(self) -> None:
        """Publish the next slice of the oldest commit. A commit of many rows must not hold
        the loop for seconds: heartbeats, links and other clients are served between
        slices. The ``(writer, batch)`` record and the reply go with the last slice, in the
        same store transaction as its retained rows."""
        job = self._applying[0]
        end = min(job.pos + APPLY_SLICE, len(job.rows))
        originate, rows, rules = self._originate, job.rows, job.rules
        for i in range(job.pos, end):
            topic, payload, fmt, headers = rows[i]
            originate(topic, payload, fmt, headers, rules[i], persistent=True)
        job.pos = end
        if end < len(rows):
            return
        self._applying.popleft()
        if job.key is not None and self.store is not None:
            self.store.record_batch(*job.key, len(rows))
        self._confirms.append((job.ident, job.req_id, {"applied": len(rows), "duplicate": False}))

    def _deliver_local(self, patterns: frozenset[str], body: bytes) -> None:
        for pattern in patterns:
            pfx = self._prefix.get(pattern)
            if pfx is None:
                continue  # interest of retention or a durable, no client on XPUB
            n = self._pseq[pattern] + 1
            self._pseq[pattern] = n
            self.deliver.send(pfx + body + _U64.pack(n), zmq.NOBLOCK)
            self.delivered += 1

    def _send_confirms(self) -> None:
        confirms = self._confirms
        self._confirms = []
        for ident, req_id, body in confirms:
            self._send_control(ident, wire.PUBLISH, req_id, body)

    def _read(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A range of the retention log: ``start <= seq < end``, matching ``pattern``."""
        store = self.store
        if store is None:
            return wire.ERROR, {"message": "this node has no store"}
        pattern = body.get("pattern", ">")
        start = body.get("start", 1)
        end = body.get("end")
        limit = body.get("limit", 1000)
        try:
            validate_pattern(pattern)
        except InvalidTopic as exc:
            return wire.ERROR, {"message": str(exc)}
        if (
            type(start) is not int
            or not 0 <= start < _I64
            or (end is not None and (type(end) is not int or not 0 <= end < _I64))
        ):
            return wire.ERROR, {"message": "start and end must be integer sequence numbers"}
        if type(limit) is not int or not 1 <= limit <= 100_000:
            return wire.ERROR, {"message": "limit must be an integer in 1..100000"}
        store.commit()  # a reader sees everything received so far
        from .topics import match as topic_match

        def wanted(topic: str) -> bool:
            return topic_match(pattern, topic)

        # bounded by bytes too: a page of large payloads stays a frame of sane size; and by
        # rows examined: a sparse pattern over a long log must not hold the loop (links
        # and clients wait while it scans), so a page may end with few or no rows
        resume = store.read_page(
            start,
            end,
            limit,
            READ_PAGE_BYTES,
            None if pattern == ">" else wanted,
            READ_SCAN_ROWS,
        )
        rows, resume_at = resume
        upper = end if end is not None else store.last_seq + 1
        if resume_at is not None:
            upper = resume_at  # more may follow: resume from here
        reply: dict[str, Any] = {}
        unpack = msgpack.unpackb
        if body.get("columns") is True:
            # one array per field: a bulk reader (Spark) builds its columns from these
            # without a Python object per row
            cols: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * 9
            cols[4] = [None if h is None else unpack(h, strict_map_key=False) for h in cols[4]]
            reply["columns"] = cols
        else:
            reply["rows"] = [
                (*r[:4], unpack(r[4], strict_map_key=False), *r[5:]) if r[4] is not None else r
                for r in rows
            ]
        return wire.READ, {
            **reply,
            "first_seq": store.first_seq(),
            "last_seq": store.last_seq,
            "expired_upto": store.expired_upto(pattern),
            "next": upper,
        }

    # -- accounting -----------------------------------------------------------------------

    def _drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def _bad(self, source: str, reason: str, detail: str) -> None:
        self.bad_input += 1
        self._drop(f"bad_input.{reason}")
        self._bad_log.report(source, reason, detail, time.monotonic())

    def status(self) -> dict[str, Any]:
        patterns = sorted(self.engine.local_patterns)
        now = time.monotonic()
        routes = self.engine.interest()
        return {
            "broker_id": self.broker_id,
            "incarnation": self.incarnation,
            "group": self.config.group,
            "version": PROTOCOL_VERSION,
            "endpoints": self.endpoints,
            "uptime": round(time.time() - self.started_at, 3),
            "counters": {
                "received": self.received,
                "forwarded": self.forwarded,
                "delivered": self.delivered,
                "duplicates": self.dedupe.duplicates,
                "durable_stored": self.durable_stored,
                "durable_delivered": self.durable_delivered,
                "bad_input": self.bad_input,
                "links_up": self.links_up,
                "links_down": self.links_down,
                "handshakes_refused": self.handshakes_refused,
                "auth_failures": self.security.auth_failures if self.security else 0,
                "dropped": dict(sorted(self.dropped.items())),
            },
            "security": self.security.status() if self.security else {"enabled": False},
            "gc": gc_status(),
            "subscriptions": {"count": len(patterns), "patterns": patterns},
            "links": [link.describe(now) for link in self._all_links()],
            "store": self.store.stats() if self.store is not None else None,
            "durables": self.durable_status() if self.store is not None else [],
            "forward": {
                **(self.forward.stats() if self.forward is not None else {}),
                "sticky_ghost_links": self.engine.ghosts(),
            },
            "staging": {
                **self.staging.stats(),
                "applying_rows": sum(len(a.rows) - a.pos for a in self._applying),
            },
            "discovery": {
                "enabled": self._discovery is not None and self._discovery.running,
                "interfaces": self._discovery.interfaces if self._discovery else [],
                "error": self._discovery.error if self._discovery else None,
                "peers": len(self._discovered),
            },
            "interest": {
                "routes": len(routes),
                "remote": sum(1 for r in routes if r["link"] is not None),
                "origins": sorted({str(r["origin"]) for r in routes}),
                "entries": self.engine.entry_count(),
                "rejected": dict(sorted(self.engine.rejected.items())),
            },
        }


#: committed staged rows published per poll pass
APPLY_SLICE = 2000
#: seconds between checks that attached durable subscribers are still connected
DURABLE_PROBE_INTERVAL = 1.0
#: a READ reply stops adding rows once they hold this many bytes (at least one row)
READ_PAGE_BYTES = 8 * 1024 * 1024
#: rows a READ examines at most (a pattern-filtered page may then hold fewer than asked)
READ_SCAN_ROWS = 20_000


@dataclasses.dataclass(slots=True)
class _Applying:
    """A staged commit being published, slice by slice."""

    ident: bytes
    req_id: int
    rows: list[Any]
    rules: list[str | None]
    key: tuple[str, int] | None
    pos: int = 0


#: msgpack of (uint64 seq, float64 ts): the last two envelope fields, in one struct call
_ENVELOPE_TAIL = struct.Struct(">BQBd")
#: the per-pattern sequence trailer of a delivery frame
_U64 = struct.Struct(">Q")
#: entries in each of _on_msgs's caches of paths and targets (a stream is a distinct one)
_STREAM_CACHE_SIZE = 4096
#: msgpack's bin headers: an array whose first element is one is a publish batch
_BIN_TYPES = frozenset((0xC4, 0xC5, 0xC6))


#: bounds of numbers that reach SQLite (INTEGER is signed 64-bit; ts must be finite)
_I64 = 1 << 63
_TS_MAX = 1e15


_SEND_ERRORS = {"link_queue_full": "queue full", "link_peer_gone": "peer gone"}


#: bytes of a PMSGS frame around its entries (type, epoch, base, array header), at most
_PMSGS_HEAD = 32


def _peer_frame_max(info: dict[str, Any], own: int) -> int:
    """The max_frame_bytes a peer states in its LINK_HELLO or LINK_WELCOME. A node from
    before this field states none: it is taken to share ours (as was assumed then)."""
    v = info.get("max_frame_bytes")
    if v is None:
        return own
    if type(v) is not int or not 64 <= v <= 1 << 30:
        raise ProtocolError("bad_type", "max_frame_bytes must be an integer in 64..2**30")
    return v


def _set_peer_frame_max(link: Link, peer_max: int) -> None:
    """Frames to this peer are cut for its limit: what it accepts on a link (its
    max_frame_bytes plus LINK_FRAME_SLACK) and how many payload bytes one frame gathers."""
    link.peer_max_frame = peer_max
    link.frame_limit = peer_max + LINK_FRAME_SLACK
    link.batch_bytes = min(LINK_BATCH_BYTES, peer_max)


def _advert_chunks(entries: list[list[Any]], most: int) -> list[list[list[Any]]]:
    """ADVERT entries cut into frames of about ``most`` bytes: an interest table of tens of
    thousands of entries (a link's first, full advertisement) would otherwise be one frame
    over the receiver's max_frame_bytes, refused whole."""
    chunks: list[list[list[Any]]] = []
    chunk: list[list[Any]] = []
    size = 0
    for e in entries:
        path = e[2]
        n = len(e[0]) + len(e[1]) + 8 + (sum(len(b) + 2 for b in path) if path else 0)
        if chunk and size + n > most:
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(e)
        size += n
    chunks.append(chunk)  # an empty full table is a frame too: it clears the receiver's
    return chunks


def _link_key(link: Link) -> str:
    """A link's name in the store's link queues and positions, stable across restarts:
    peer, link name and which side dialled (A may dial B as "x" while B dials A as "x")."""
    return f"{link.peer}/{link.name}/{'dialed' if link.dialer else 'accepted'}"


def _sticky(sources: set[str]) -> bool:
    """Is local interest with these sources backed by a durable subscription?"""
    return any(s.startswith("durable:") for s in sources)


def _no_rule(topic: str) -> str | None:
    return None


def _no_retain(*args: Any) -> int:
    return 0


def _raw_send(sock: zmq.Socket[bytes]) -> Callable[[bytes, int], Any]:
    """The Cython send of ``sock``, skipping pyzmq's Python-level wrapper (about 0.4 us
    per message on the hot path). Behaviour for bytes frames is identical."""
    send: Callable[[bytes, int], Any] = zmq.backend.Socket.send.__get__(sock)
    return send


def _last_endpoint(sock: zmq.Socket[bytes]) -> str:
    ep = sock.getsockopt(zmq.LAST_ENDPOINT)
    return ep.decode() if isinstance(ep, bytes) else str(ep)


def _int(info: dict[str, Any], key: str, lo: int, hi: int) -> int:
    v = info.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise ProtocolError("bad_type", f"{key} must be an integer in {lo}..{hi}")
    return v


def _bool(info: dict[str, Any], key: str) -> bool:
    v = info.get(key)
    if type(v) is not bool:
        raise ProtocolError("bad_type", f"{key} must be a boolean")
    return v


def _num(info: dict[str, Any], key: str) -> float:
    v = info.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v < 86400:
        raise ProtocolError("bad_type", f"{key} must be a positive number of seconds")
    return float(v)


def _patterns(info: dict[str, Any], key: str) -> tuple[str, ...]:
    v = info.get(key, [])
    if type(v) is not list:
        raise ProtocolError("bad_type", f"{key} must be a list of patterns")
    return tuple(validate_pattern(p) for p in v)


def command_client(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    """The embedding side of the node's inproc command channel."""
    sock = ctx.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


STOP = _CMD_STOP
CALL = _CMD_CALL
