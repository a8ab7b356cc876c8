"""Sessions and failover: which nodes the client talks to, and whether they are alive.

A :class:`Session` is one node's control DEALER and liveness. :class:`Sessions` (owned by
the client thread) opens sessions to the locator's candidates, says HELLO, pings, fails a
session that stops answering heartbeats, or whose node said goodbye (left the zeroconf
group, or is stopping and said LEAVING), and retries its endpoint with exponential
backoff. One session is the *primary*: subscriptions, requests
and (without fan-out) publishing go through it; when it fails another one that is up
takes its place, or a candidate is tried, chosen at random among those not waiting out
a backoff (so the clients of one address list or group spread over its nodes).

What a session change means to the rest of the client is the client thread's to decide:
Sessions tells it through :class:`SessionEvents`, and forwards every frame that is not
its own (replies, durable deliveries).
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import zmq

from .. import wire
from ..const import CLIENT_PROTOCOL
from ..errors import ConfigError, ProtocolError
from .credentials import Credentials
from .locators import Locator, endpoint

__all__ = ["Session", "SessionEvents", "Sessions", "Settings", "check_options"]

log = logging.getLogger("zbroker.client")

#: what a session says first, and again to a node that restarted under it
_HELLO = wire.encode_control(wire.HELLO, 0, {"client_protocol": CLIENT_PROTOCOL})


@dataclass(frozen=True, slots=True)
class Settings:
    """The client options the client thread works by."""

    address: str
    timeout: float
    heartbeat_interval: float
    heartbeat_timeout: float
    backoff: tuple[float, float, float]  # reconnect: initial delay, max delay, multiplier
    fanout: bool
    min_brokers: int


def check_options(hwm: int, min_brokers: int, **seconds: float) -> None:
    """Raise ConfigError for a client option out of range. Durations are positive numbers
    of seconds: a negative one reached ZeroMQ as a socket option it refuses (a ZMQError
    from the constructor), and a NaN never expires; ``min_brokers`` below 1 was taken as 1
    without a word."""
    if type(min_brokers) is not int or min_brokers < 1:
        raise ConfigError(f"min_brokers must be an integer >= 1, not {min_brokers!r}")
    for name, value in seconds.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{name} must be a number of seconds, not {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{name} must be a positive number of seconds, not {value!r}")
    if type(hwm) is not int or hwm < 0:
        raise ConfigError(f"hwm must be an integer >= 0 (0: no limit), not {hwm!r}")


class Session:
    """One node the client talks to: its control DEALER and liveness."""

    __slots__ = (
        "asked",
        "deadline",
        "dealer",
        "endpoint",
        "frame_max",
        "hello",
        "last_ping",
        "rehello",
        "state",
    )

    def __init__(self, endpoint: str, dealer: zmq.Socket[bytes], deadline: float) -> None:
        self.endpoint = endpoint
        self.dealer = dealer
        self.state = "hello"
        self.deadline = deadline
        self.hello: dict[str, Any] = {}
        self.frame_max = 0  # the node's max_frame_bytes, from its HELLO (0: not known)
        self.last_ping = 0.0
        # when we sent the oldest ping the node has not answered (0: none waits). Silence is
        # measured from a ping we sent, not from the last frame: while callbacks hold the
        # client thread no ping goes out, and a node that was not asked owes no answer.
        self.asked = 0.0
        # a HELLO sent again to a restarted node, not answered yet: until it is, the
        # node's "unknown" answers to pings sent before it are expected, not a loss
        self.rehello = False

    def send(self, frame: bytes) -> bool:
        """Send without ever blocking or raising in the client thread: a node that does
        not read is caught by the heartbeat, not by a stuck thread."""
        try:
            self.dealer.send(frame, zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def data_endpoint(self, port_name: str) -> str:
        """The endpoint of the node's ``publish`` or ``deliver`` port (from its HELLO)."""
        host = urlsplit(self.endpoint).hostname or ""
        return endpoint(host, int(self.hello["ports"][port_name]))


class SessionEvents(Protocol):
    """What the client thread hears from :class:`Sessions`."""

    def session_up(self, session: Session) -> None: ...

    def session_lost(self, session: Session, primary: bool) -> None: ...

    def primary_changed(self, session: Session) -> None: ...

    def node_restarted(self, session: Session) -> None: ...

    def control_frame(self, session: Session, op: int, req_id: int, body: Any) -> None: ...


class Sessions:
    """The client thread's sessions with nodes."""

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        locator: Locator,
        credentials: Credentials,
        settings: Settings,
        poller: zmq.Poller,
        events: SessionEvents,
    ) -> None:
        self._ctx = ctx
        self._locator = locator
        self._credentials = credentials
        self._settings = settings
        self._poller = poller
        self._events = events
        self._sessions: dict[str, Session] = {}
        self._by_socket: dict[zmq.Socket[bytes], Session] = {}
        self.primary: Session | None = None
        self._failures: dict[str, tuple[int, float]] = {}  # endpoint -> (count, retry at)

    def owner(self, sock: zmq.Socket[bytes]) -> Session | None:
        return self._by_socket.get(sock)

    def alive(self, session: Session) -> bool:
        return self._sessions.get(session.endpoint) is session

    def up(self) -> list[Session]:
        return [s for s in self._sessions.values() if s.state == "up"]

    def tick(self, now: float) -> set[str]:
        """Fail what is silent, ping what is due, open what is needed; returns the
        locator's candidates."""
        s = self._settings
        alive = set(self._locator.candidates())
        for session in list(self._sessions.values()):
            if session.state == "hello" and now > session.deadline:
                self._fail(session, now, "no answer")
            elif session.state == "up":
                if (
                    session.asked
                    and now - session.asked > s.heartbeat_timeout
                    and not int(session.dealer.getsockopt(zmq.EVENTS)) & zmq.POLLIN
                ):  # (frames waiting to be read: the node answered, we were busy)
                    self._fail(session, now, f"no answer to a ping for {s.heartbeat_timeout:g} s")
                elif session.endpoint not in alive:
                    self._fail(session, now, "it left the network (goodbye)")
                elif now - session.last_ping >= s.heartbeat_interval:
                    session.last_ping = now
                    session.asked = session.asked or now
                    session.send(wire.encode_control(wire.PING, 0, {}))
        self._connect_more(now)
        return alive

    def _connect_more(self, now: float) -> None:
        candidates = self._locator.candidates()
        if not candidates:
            return
        ready_to_try = [
            ep
            for ep in candidates
            if ep not in self._sessions and self._failures.get(ep, (0, 0.0))[1] <= now
        ]
        if self._settings.fanout:
            for ep in ready_to_try:
                self._open(ep, now)
        elif self.primary is None and not any(s.state == "hello" for s in self._sessions.values()):
            if ready_to_try:
                # at random: the clients of one list or group spread over its nodes (the
                # first candidate took them all); one that failed waits out its backoff
                self._open(random.choice(ready_to_try), now)

    def _open(self, endpoint: str, now: float) -> None:
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        # requests are bounded by the caller (windows, credit): never refuse one locally
        dealer.setsockopt(zmq.SNDHWM, 0)
        # and what the node sends here is bounded by credit: no receive bound either, so
        # that libzmq keeps reading (and answering the node's heartbeat) while a callback
        # holds the client thread; a full queue would stop it, and the node would close
        # the connection as silent (const.CONTROL_HEARTBEAT_TIMEOUT_MS)
        dealer.setsockopt(zmq.RCVHWM, 0)
        dealer.setsockopt(zmq.IPV6, 1)
        try:
            self._credentials.secure(dealer, endpoint)
            dealer.connect(endpoint)
        except zmq.ZMQError as exc:
            # an endpoint ZeroMQ refuses (a candidate found by discovery, or one that
            # passed parse_address): a failure with backoff, never a dead client thread
            # leaving its socket open (Context.term would wait for it forever)
            dealer.close(linger=0)
            log.warning("cannot connect to %s: %s", endpoint, exc)
            self._backoff(endpoint, now)
            return
        session = Session(endpoint, dealer, now + self._settings.timeout)
        self._sessions[endpoint] = session
        self._by_socket[dealer] = session
        self._poller.register(dealer, zmq.POLLIN)
        dealer.send(_HELLO)

    def _close(self, session: Session) -> None:
        self._sessions.pop(session.endpoint, None)
        self._by_socket.pop(session.dealer, None)
        self._poller.unregister(session.dealer)
        session.dealer.close(linger=0)

    def _fail(self, session: Session, now: float, why: str) -> None:
        was_up = session.state == "up"
        self._close(session)
        self._backoff(session.endpoint, now)
        if was_up:
            log.warning(
                "lost node %s at %s: %s", session.hello.get("broker_id"), session.endpoint, why
            )
            self._events.session_lost(session, session is self.primary)
        if session is self.primary:
            self.primary = None
            others = self.up()
            if others:
                self._make_primary(others[0])

    def _backoff(self, endpoint: str, now: float) -> None:
        """``endpoint`` failed: try it again after an exponentially growing delay."""
        count = self._failures.get(endpoint, (0, 0.0))[0] + 1
        initial, cap, mult = self._settings.backoff
        self._failures[endpoint] = (count, now + min(initial * mult ** (count - 1), cap))

    def _make_primary(self, session: Session) -> None:
        self.primary = session
        self._events.primary_changed(session)

    def drain(self, session: Session) -> None:
        """Read every frame the session's node sent: HELLO and PING are handled here,
        the rest goes to :meth:`SessionEvents.control_frame`."""
        now = time.monotonic()
        while True:
            try:
                frame = session.dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            session.asked = 0.0  # any frame answers
            try:
                op, req_id, body = wire.decode_control(frame)
            except ProtocolError as exc:
                log.warning("bad control reply from node: %s", exc)
                continue
            if req_id == 0 and op not in (wire.DELIVER, wire.QDELIVER, wire.STATE_MISSING):
                self._on_node(session, op, body, now)
                if not self.alive(session):
                    return  # (LEAVING closed it)
                continue
            self._events.control_frame(session, op, req_id, body)
            if not self.alive(session):
                return

    def _on_node(self, session: Session, op: int, body: dict[str, Any], now: float) -> None:
        if op == wire.PING and session.state == "up":
            inc = body.get("incarnation")
            if inc is not None and inc != session.hello.get("incarnation"):
                # the node restarted under us faster than our heartbeat noticed
                log.info("node restarted: incarnation %s at %s", inc, session.endpoint)
                session.hello = {**session.hello, "incarnation": inc}
                if session is self.primary:
                    self._events.node_restarted(session)
                # (the new process greets this connection: its pings are not "unknown")
                session.send(_HELLO)
                session.rehello = True
            elif body.get("unknown") and not session.rehello:
                # the same process no longer knows this connection: libzmq reconnected
                # it after the node closed the old one (as silent), and what the node
                # kept for it went with that; start afresh, as after a lost node
                self._fail(session, now, "the node had closed this connection (reconnected)")
        elif op == wire.LEAVING:
            # the node is stopping: move now, not after the heartbeat timeout (it still
            # takes what was sent to it, the publish socket's linger flushes that)
            self._fail(session, now, "it is stopping (it said LEAVING)")
        elif op == wire.HELLO and session.state == "up":
            session.rehello = False  # (the restarted node knows this connection now)
        elif op == wire.HELLO and session.state == "hello":
            if not isinstance(body.get("ports"), dict):
                return
            session.state = "up"
            session.hello = body
            node = body.get("publish_batch")  # the node's max_frame_bytes
            session.frame_max = node if type(node) is int and node > 0 else 0
            session.last_ping = now
            self._failures.pop(session.endpoint, None)
            self._events.session_up(session)
            if self.primary is None:
                self._make_primary(session)

    def close(self) -> None:
        for session in list(self._sessions.values()):
            self._poller.unregister(session.dealer)  # (closed mid-run: a home no longer used)
            session.dealer.close(linger=200)  # bounded: lets a last DURABLE_CLOSE out
        self._sessions.clear()
        self._by_socket.clear()
