"""The client thread: one loop that owns the control and delivery sockets.

It polls the command channel (user threads), the SUB socket (deliveries) and every
session's DEALER; runs every callback, in arrival order, in slices (``DELIVERY_SLICE``) so
that slow callbacks delay nothing else for long; sends the tail of a publish batch nobody
filled; and every 50 ms ticks the sessions (heartbeats, failover), reports delivery gaps
and expires requests. Session changes arrive here as
:class:`~.sessions.SessionEvents` and are passed to the parts they concern: the publisher
and subscriber connect to the primary, waiting requests go out. Durables keep to their
home nodes over sessions of their own (:class:`~.durable_session.DurableHomes`), which
this loop polls and ticks too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import zmq

from .. import wire
from ..errors import BrokerUnreachable, ClientClosed
from .channel import Channel
from .credentials import Credentials
from .durable_session import DurableHomes
from .durables import Durables
from .fanout import Fanout
from .locators import Locator
from .publisher import Publisher
from .queues import QueueMembers
from .requests import Requests
from .sessions import Session, Sessions, Settings
from .subscriber import Callbacks, Subscriber

__all__ = ["ClientThread"]

log = logging.getLogger("zbroker.client")

#: how long callbacks may run before the thread serves its other sockets and its tick
#: (checked between delivery frames): pings, requests and commands do not wait for a slow
#: subscriber to drain its queue
DELIVERY_SLICE = 0.05


class ClientThread:
    """The client's own thread and what it owns. ``ready`` resolves with the first
    primary's HELLO (or fails: no node answered)."""

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        settings: Settings,
        *,
        channel: Channel,
        locator: Locator,
        credentials: Credentials,
        publisher: Publisher,
        fanout: Fanout | None,
        callbacks: Callbacks,
        durables: Durables,
        queues: QueueMembers,
        hwm: int,
    ) -> None:
        self._settings = settings
        self._channel = channel
        self._credentials = credentials
        self._publisher = publisher
        self._fanout = fanout
        self._durables = durables
        self._queues = queues
        #: the primary node's HELLO reply (``Client.hello``)
        self.hello: dict[str, Any] = {}
        #: missing-topic notices go here (set by Client.on_missing_topic)
        self.on_missing: Callable[[dict[str, Any]], None] | None = None
        self.ready: Future[dict[str, Any]] = Future()
        self.subscriber = Subscriber(ctx, hwm, callbacks)
        self._persistent = persistent = publisher.persistent
        self._requests = Requests(settings.timeout, persistent.reply)
        self._poller = zmq.Poller()
        self._sessions = Sessions(ctx, locator, credentials, settings, self._poller, self)
        self._homes = DurableHomes(ctx, locator, credentials, settings, self._poller, durables)
        self._ready_deadline = 0.0
        self._running = True
        self._release: Callable[[], None] | None = None  # see after_stop
        self._thread = threading.Thread(target=self._run, name="zbroker-client", daemon=True)

    def start(self) -> None:
        self._ready_deadline = time.monotonic() + self._settings.timeout
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def is_current(self) -> bool:
        """Is the caller this thread (a callback)?"""
        return threading.current_thread() is self._thread

    def after_stop(self, release: Callable[[], None]) -> None:
        """Run ``release`` on this thread once it has stopped and closed its sockets
        (``Client.close()`` called from a callback, which cannot join its own thread)."""
        self._release = release

    def _run(self) -> None:
        cmd = self._channel.bind()
        self._poller.register(cmd, zmq.POLLIN)
        self._poller.register(self.subscriber.sock, zmq.POLLIN)
        try:
            self._loop(cmd)
        except Exception as exc:  # report, never leave the constructor waiting
            if not self.ready.done():
                self.ready.set_exception(exc)
            else:
                log.exception("client thread crashed")
        finally:
            self._answer_waiting()
            self._sessions.close()
            self._homes.close()
            cmd.close()
            self.subscriber.close()
            if self._release is not None:
                self._release()

    def _answer_waiting(self) -> None:
        """The thread stops taking commands: every caller still waiting for an answer
        gets ClientClosed now (a request, a subscribe, a durable's request, a persistent
        publish), instead of waiting out its timeout for a BrokerUnreachable."""
        crashed = self._running  # (close() and a failed start stop the loop first)
        why = "the client's thread has stopped (see the log)" if crashed else "client closed"
        left = self._channel.shut()
        self._persistent.stopped(lambda: left)
        for _, _, fut in left:
            if fut is not None and not fut.done():
                fut.set_exception(ClientClosed(f"{why} before the node answered"))
        self._requests.fail(why)
        self._homes.fail(why)
        self.subscriber.fail(why)

    def _loop(self, cmd: zmq.Socket[bytes]) -> None:
        next_tick = 0.0
        publisher = self._publisher
        subscriber = self.subscriber
        sub = subscriber.sock
        while self._running:
            # 1-4 ms while a flood keeps a batch open (see Publisher.flush_tail); not at
            # all while frames of a node we left wait to be delivered
            wait = 0 if subscriber.backlog else publisher.tail_poll if publisher.armed else 50
            delivered = False
            for sock, _ in self._poller.poll(wait):
                if sock is sub:
                    subscriber.on_frames(time.monotonic() + DELIVERY_SLICE)
                    delivered = True
                elif sock is cmd:
                    self._on_commands()
                else:
                    self._on_socket(sock)
            if subscriber.backlog and not delivered:
                subscriber.on_frames(time.monotonic() + DELIVERY_SLICE)
            if publisher.armed:
                publisher.flush_tail()
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + 0.05
                self._tick(now)

    def _tick(self, now: float) -> None:
        if self._channel.pending():
            self._on_commands()  # a wake-up byte that could not be sent
        alive = self._sessions.tick(now)
        primary = self._sessions.primary
        if primary is not None:  # (without one, gaps wait for the next node)
            gaps = self.subscriber.take_gaps()
            if gaps:
                primary.send(wire.encode_control(wire.GAPS, 0, gaps))
        if not self.ready.done():
            self._check_ready(now, alive)
        self._requests.expire(now)
        self._persistent.sweep(now, primary)
        self._homes.tick(now, primary)

    def _check_ready(self, now: float, alive: set[str]) -> None:
        s = self._settings
        up = self._sessions.up()
        primary = self._sessions.primary
        if primary is not None and len(up) >= (s.min_brokers if s.fanout else 1):
            self.ready.set_result(primary.hello)
        elif now > self._ready_deadline:
            found = self._credentials.unreachable_hint if alive else " (no node found)"
            self.ready.set_exception(
                BrokerUnreachable(
                    f"no zbroker node answered at {s.address} within {s.timeout:g} s{found}"
                    if not s.fanout
                    else f"fan-out: {len(up)} of the {s.min_brokers} nodes needed answered "
                    f"at {s.address} within {s.timeout:g} s"
                )
            )
            self._running = False

    def _on_socket(self, sock: zmq.Socket[bytes]) -> None:
        session = self._sessions.owner(sock)
        if session is not None:
            try:
                self._sessions.drain(session)
            finally:
                self._queues.flush_acks(session if self._sessions.alive(session) else None)
            return
        home = self._homes.owner(sock)
        if home is not None:  # a durable's home node (its deliveries are acked there)
            sessions, session = home
            try:
                sessions.drain(session)
            finally:
                self._durables.flush_acks(session if sessions.alive(session) else None)

    def _on_commands(self) -> None:
        for name, arg, fut in self._channel.commands():
            if name == "persistent":  # (first: the one a flood of persistent publishes sends)
                self._persistent.submit(arg, self._sessions.primary)
            elif name == "stop":
                self._running = False
            elif name == "sub":
                assert fut is not None
                self.subscriber.subscribe(arg, fut)
            elif name == "unsub":
                self.subscriber.unsubscribe(arg)
                if fut is not None:
                    fut.set_result(None)
            elif name == "send":  # one-way, to the primary if there is one
                primary = self._sessions.primary
                if primary is not None:
                    primary.send(wire.encode_control(arg[0], 0, arg[1]))
                if fut is not None:
                    fut.set_result(None)
            elif name == "dreq":  # a durable's request: to its home node
                assert fut is not None
                self._homes.submit(arg[0], arg[1], arg[2], fut)
            elif name == "dsend":
                self._homes.send(*arg)
            elif name == "req":
                assert fut is not None
                self._requests.submit(arg[0], arg[1], fut, self._sessions.primary)

    # -- SessionEvents -------------------------------------------------------------------

    def session_up(self, session: Session) -> None:
        self._homes.met(session)
        if self._fanout is not None:
            self._fanout.plug(session.endpoint, session.data_endpoint("publish"))

    def session_lost(self, session: Session, primary: bool) -> None:
        if self._fanout is not None:
            self._fanout.unplug(session.endpoint)
        if primary:
            self.subscriber.disconnect(session.data_endpoint("deliver"))
            self._publisher.detach()

    def primary_changed(self, session: Session) -> None:
        """Subscriptions, requests and (without fan-out) publishing go through this node."""
        self.hello = session.hello
        self.subscriber.connect(
            session.endpoint, session.data_endpoint("deliver"), self._credentials
        )
        self._publisher.attach(
            session.endpoint,
            session.data_endpoint("publish"),
            session.frame_max,
            session.hello.get("client_protocol"),
        )
        if self.ready.done():
            log.info("connected to node %s at %s", session.hello.get("broker_id"), session.endpoint)
        self._requests.send_waiting(session)
        self._persistent.moved(session)  # what waits for confirmation: to this node now
        if self.ready.done():  # (durables stay with their home nodes: DurableHomes)
            self._queues.rejoin(session)

    def node_restarted(self, session: Session) -> None:
        self._queues.rejoin(session)

    def control_frame(self, session: Session, op: int, req_id: int, body: Any) -> None:
        if req_id == 0 and op == wire.STATE_MISSING:
            if self.on_missing is not None:
                self.on_missing(body)  # (a missing-topic notice: Client.on_missing_topic)
        elif req_id == 0 and op == wire.QDELIVER:  # (durables come over their home sessions)
            self._queues.deliver(body)
        else:
            self._requests.reply(op, req_id, body)
