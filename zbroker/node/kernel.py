"""The kernel: one node's loop, the phases of a pass, and the parts every message and
feature shares. It imports no feature; the features a node runs are handed to it (the
composition root is :class:`zbroker.Broker`).

A pass of the loop, in this order, for these reasons:

1. **drain** — poll every socket once, then drain each ready one in batches (the
   pipeline handles each drained batch whole: route, link outboxes, feature sinks,
   deliveries; a link frame of one run whose head the node knows may go on at once as
   it came, :mod:`.shortcut`); then features with waiting work do one slice (a staged
   commit is published a slice per pass, so sockets are served in between).
2. **link flush** — the engine's batched interest changes leave as ADVERTs, then every
   message queued for a link this pass in MSGR frames. Interest first: a link carries
   frames in order, so interest that reached this node before a message reaches the next
   node before it too (a reply to that message finds its way back).
3. **events** — the pass's node events, to every feature that observes them.
4. **before commit** — features prepare the transaction (durables hold their trims until
   their subscribers were served).
5. **store commit** — one transaction per pass: everything the pass stored.
6. **after commit** — confirms first (what they confirm is stored now), then the features:
   store-and-forward sends what is now stored under its link sequence and acknowledges
   what it took; the durable pump sends what subscribers have credit for.
7. **tick** — every TICK_INTERVAL: link heartbeats, handshake timeouts and redials, and
   the features' timers.

Told to stop, the node first **drains** (:mod:`.drain`): its clients hear LEAVING and
move, and the passes go on until what they sent on their way out is taken.
"""

from __future__ import annotations

import functools
import logging
import queue
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import zmq

from .. import wire
from ..config import NodeConfig
from ..const import TICK_INTERVAL
from ..identity import Identity
from ..links.acceptor import Acceptor
from ..links.dialer import Dialer
from ..links.flush import flush_adverts, flush_outboxes
from ..links.handshake import Me
from ..links.table import LinkTable
from ..routing import RoutingEngine
from ..security import Security
from ..store import Store
from .context import Context
from .control import ControlDispatch
from .counters import BadInputLog, Counters
from .delivery import Delivery, raw_send
from .drain import Drain
from .events import AuthRefused, NodeEvent, PermissionRefused
from .feature import Feature, Op, overrides
from .hooks import KernelHooks
from .interest import LocalInterest
from .pipeline import Pipeline
from .secure_subs import SecureSubscriptions
from .shortcut import Shortcut
from .sockets import NodeSockets, Poller, format_endpoint
from .status import node_status

__all__ = ["CALL", "STOP", "Node"]

log = logging.getLogger("zbroker.node")

STOP = b"stop"
CALL = b"call"


class Node:
    """One broker node's sockets and loop. Created, bound, run and closed by one thread."""

    def __init__(
        self,
        config: NodeConfig,
        identity: Identity,
        ctx: zmq.Context[zmq.Socket[bytes]],
        command_endpoint: str,
        features: Sequence[Feature] = (),
    ) -> None:
        self.config = config
        self.identity = identity
        self.broker_id = identity.broker_id
        self.incarnation = identity.incarnation
        self.zmq_context = ctx
        self._command_endpoint = command_endpoint
        self.features = list(features)
        self.engine = RoutingEngine(
            identity.broker_id,
            local_branches=config.local_branches,
            host_branches=config.host_branches,
            flood_branches=config.flood_branches,
        )
        self.counters = Counters()
        self.interest = LocalInterest(self.engine, self.emit)
        self.poller = Poller()
        self.hooks = KernelHooks(self)
        # this process's own mark in link handshakes: a HELLO bearing our broker ID but not
        # this mark comes from another node configured with the same ID, not from ourselves
        me = Me(
            self.broker_id,
            self.incarnation,
            uuid.uuid4().hex,
            config.group,
            config.max_frame_bytes,
            identity.starts,
        )
        self.links = LinkTable(
            config=config, me=me, engine=self.engine, counters=self.counters,
            hooks=self.hooks, sockets=self.poller,
        )  # fmt: skip
        self.security: Security | None = None
        self.secure_subs: SecureSubscriptions | None = None
        self.store: Store | None = None
        self.events: list[NodeEvent] = []
        self.confirms: list[tuple[bytes, int, int, dict[str, Any]]] = []  # after the commit
        self.started_at = time.time()
        self._calls: queue.SimpleQueue[tuple[Callable[[Node], Any], Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._running = False
        self._next_tick = 0.0
        self.drain = Drain()  # told to stop, the node serves on a moment (.drain)

    # -- lifecycle (all in the node thread) ---------------------------------------------

    def bind(self) -> None:
        """Create and bind every socket, open the store, attach the features; raise
        AddressInUse naming the port on conflict."""
        cfg = self.config
        if cfg.security:
            # keys, allowlist and permissions load (or fail clearly) before anything binds
            self.security = Security(
                cfg.key_dir or self.identity.data_dir, cfg.allowlist, cfg.clients
            )
            self.security.bind_zap(self.zmq_context)
            self.security.on_auth_refused(
                lambda address, reason: self.emit(AuthRefused(address=address, reason=reason))
            )
            self.security.on_permission_refused(
                lambda user, op, what: self.emit(
                    PermissionRefused(user=user, operation=op, subject=what)
                )
            )
        self.sockets = socks = NodeSockets(self.zmq_context, cfg, self._command_endpoint)
        try:
            self._secure_sockets()
            socks.bind(cfg.host, cfg.port)
            self.store = Store(
                self.identity.data_dir / "store.sqlite3", cfg.retain, fsync=cfg.fsync
            )
            # a feature that cannot attach (the monitor's port taken) fails the start
            # cleanly: every socket closed, so the context can terminate
            self._assemble()
        except BaseException:
            self.close()
            raise

    def _secure_sockets(self) -> None:
        sec, socks = self.security, self.sockets
        if sec is None:
            return
        for s in socks.network:
            sec.serve(s)
        # no connection may take over another's routing id (links dial with fresh,
        # random ids instead, so a redial never needs the takeover)
        socks.control.setsockopt(zmq.ROUTER_HANDOVER, 0)
        # subscriptions are approved one by one (secure_subs)
        socks.deliver.setsockopt(zmq.XPUB_MANUAL, 1)

    def _assemble(self) -> None:
        """Wire the kernel's parts, then attach the features (in order)."""
        socks = self.sockets
        self.links.bind(socks.control, raw_send(socks.control))
        self.dialer = Dialer(self.links, self.zmq_context, self.security)
        acceptor = Acceptor(self.links, self.security, BadInputLog(what="refused link"))
        self.control = ControlDispatch(
            socks.control,
            self.counters,
            self.links,
            acceptor,
            self.security,
            self.config.max_frame_bytes,
        )
        self.delivery = Delivery(socks.deliver, self.counters, self.interest, self.emit)
        self.pipeline = Pipeline(
            broker_id=self.broker_id,
            incarnation=self.incarnation,
            engine=self.engine,
            counters=self.counters,
            interest=self.interest,
            delivery=self.delivery,
            links=self.links,
        )
        self.shortcut = Shortcut(self.pipeline, self.links, self.engine)
        self.links.shortcut = self.shortcut.take
        if self.security is None:  # (with it, publish_recv filters each frame first)
            self.pipeline.publish_shortcut = self.shortcut.publish
            self.pipeline.publish_flush = self.shortcut.flush
        self.control.add([Op(wire.GAPS, lambda req: self.delivery.on_gaps(req.body))])
        ctx = Context(self)
        for f in self.features:
            self.interest.register_sink(f)
        for f in self.features:
            f.attach(ctx)
            self.control.add(list(f.ops()))
            self.hooks.add_frames(f)
        # per phase, only the features that take part (a pass calls nothing else)
        phase = {
            hook: tuple(f for f in self.features if overrides(f, hook))
            for hook in ("busy", "on_events", "before_commit", "after_commit", "tick")
        }
        self._busy, self._observers = phase["busy"], phase["on_events"]
        self._before, self._after, self._timers = (
            phase["before_commit"],
            phase["after_commit"],
            phase["tick"],
        )

    def close(self) -> None:
        self.links.close()
        if self.security is not None:
            self.security.close()  # its monitors first, while the sockets are open
        for f in reversed(self.features):
            f.close()
        socks = getattr(self, "sockets", None)
        if socks is not None:
            socks.close()
        if self.store is not None:
            self.store.close()
            self.store = None

    @property
    def ports(self) -> dict[str, int]:
        return self.sockets.ports if hasattr(self, "sockets") else {}

    @property
    def endpoints(self) -> dict[str, str]:
        h = self.config.host
        return {name: format_endpoint(h, p) for name, p in self.ports.items()}

    def status(self) -> dict[str, Any]:
        return node_status(self)

    def emit(self, event: NodeEvent) -> None:
        """Queue a node event for this pass's observers (the events phase)."""
        self.events.append(event)

    def submit(self, fn: Callable[[Node], Any]) -> Future[Any]:
        """Queue ``fn(node)`` to run in the node thread (caller sends the CALL command)."""
        fut: Future[Any] = Future()
        self._calls.put((fn, fut))
        return fut

    # -- the loop -------------------------------------------------------------------------

    def register_publish(self) -> None:
        """(Re)register the publish PULL's handler: with security on, its permission
        filter (and that filter's cache of decisions) is made anew after a reload."""
        socks = self.sockets
        publish_recv: Callable[[int], bytes] = socks.publish.recv
        if self.security is not None:
            publish_recv = self.security.publish_recv(socks.publish)
        limit = self.config.max_frame_bytes
        self.poller.add(
            socks.publish,
            functools.partial(self.pipeline.on_publish, socks.publish, publish_recv, limit),
        )

    def _register_sockets(self) -> None:
        socks, poller = self.sockets, self.poller
        self.register_publish()
        subs: Any = self.delivery
        if self.security is not None:
            subs = self.secure_subs = SecureSubscriptions(self.delivery, self.security)
        poller.add(socks.deliver, lambda: subs.on_subscriptions(2048))
        poller.add(socks.control, self.control.on_frames)
        poller.add(socks.command, self._on_command)
        sec = self.security
        if sec is not None:
            assert sec.zap is not None
            poller.add(sec.zap, sec.on_zap)
            for s in socks.network:
                mon = sec.watch(s)
                poller.add(mon, functools.partial(sec.on_monitor, mon))

    def run(self) -> None:
        """Serve until a stop command arrives. Never raises for bad input."""
        self._register_sockets()
        self._running = True
        self.started_at = time.time()
        log.info(
            "node %s (incarnation %d, group %s) serving on %s",
            self.broker_id,
            self.incarnation,
            self.config.group,
            ", ".join(f"{k} {v}" for k, v in self.endpoints.items()),
        )
        now = time.monotonic()
        for link in self.links.dialers.values():
            self.dialer.dial(link, now)
        for f in self.features:
            f.start(now)
        while self._running:
            self._pass()
        self.links.goodbye(time.monotonic())
        for f in self.features:
            f.stop()
        log.info("node %s stopping", self.broker_id)

    def _pass(self) -> None:
        """One pass of the loop: the phases in the module docstring, in that order."""
        handlers = self.poller.handlers
        working = [f for f in self._busy if f.busy()] if self._busy else None
        timeout = 0 if working else int(TICK_INTERVAL * 1000) if self.links.any() else 1000
        if self.drain.until:
            timeout = self.drain.poll_ms(timeout)
        ready = self.poller.poller.poll(timeout)
        for sock, _ in ready:
            try:
                handlers[sock]()
            except Exception:  # a bug, not bad input: log it, count it, keep serving
                self.counters.drop("internal_error")
                log.exception("internal error in a socket handler; the node keeps running")
        if working:
            for f in working:
                f.work()
        # interest first: a message sent this pass may draw a reply that needs it (a
        # request whose reply topic was subscribed a moment before), and a link carries
        # frames in order, so the next node learns the interest before the message
        flush_adverts(self.links)
        if self.links.dirty:
            flush_outboxes(self.links)
        if self.events:
            events, self.events = self.events, []
            for f in self._observers:
                f.on_events(events)
        for f in self._before:
            f.before_commit()
        if (self.store is not None and self.store.commit()) or self.confirms:
            self._send_confirms()
        for f in self._after:
            f.after_commit()
        now = time.monotonic()
        if now >= self._next_tick:
            self._next_tick = now + TICK_INTERVAL
            self.links.tick(now, self.dialer.dial)
            for f in self._timers:
                f.tick(now)
        drain = self.drain
        if drain.until and not drain.go_on(ready, self.sockets.publish, now):
            self._running = False

    def _send_confirms(self) -> None:
        confirms, self.confirms = self.confirms, []
        for ident, req_id, op, body in confirms:
            self.control.send(ident, op, req_id, body)

    def _on_command(self) -> None:
        cmd = self.sockets.command.recv()
        if cmd == STOP:
            if not self.drain.begin(self.features, time.monotonic()):
                self._running = False
        elif cmd == CALL:
            # every queued call, not one per wake-up: a caller whose wake-up found the
            # pipe full sends none (Broker.call never blocks on it)
            calls = self._calls
            while not calls.empty():
                fn, fut = calls.get_nowait()
                try:
                    fut.set_result(fn(self))
                except Exception as exc:
                    fut.set_exception(exc)
