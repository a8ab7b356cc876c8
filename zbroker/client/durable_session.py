"""Durables stay with their home node: a session of their own to it, whatever the primary.

A durable name is one durable in the network, kept by the node that created it (its
*home*; every DURABLE_OPEN reply names it). The client talks to each home over a dedicated
session (:class:`~.sessions.Sessions` with that one endpoint as its only candidate: its own
DEALER, HELLO, heartbeats and reconnect backoff), independent of the primary that carries
pub/sub, requests and publishing. So when the primary fails over to another node the
durables do not follow it: their deliveries pause while the home is unreachable, the home
session keeps retrying it, and when it answers again every durable homed there is reopened
(what was delivered and not acknowledged comes again, flagged ``redelivered``; acks of a
lost session are dropped, so those come again too). Nothing opens a second durable of the
same name elsewhere.

A new durable is opened at the primary's node (the request goes over a home session to
that endpoint). A node that knows the name lives on another live node refuses with an
ERROR carrying ``home``: the client then reopens it there if that node is in its address
list (it learns broker IDs from HELLO replies, asking every listed node it has not met),
else the error reaches the caller.
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import Future
from typing import Any

import zmq

from .. import wire
from ..errors import BrokerUnreachable, ClientClosed, RequestError
from .credentials import Credentials
from .durables import Durables
from .locators import Locator, StaticLocator
from .requests import Requests
from .sessions import Session, Sessions, Settings

__all__ = ["DurableHomes"]

log = logging.getLogger("zbroker.client")

#: a durable request waiting for its home to answer: (name, op, body, future, deadline,
#: the refusal that redirected it, if one did: it is what the caller gets if the node it
#: names is not found)
_Waiting = tuple[str, int, dict[str, Any], "Future[Any]", float, BaseException | None]
#: seconds a shared durable whose member node was lost waits for one node to open it
#: (then the next node of the address list is asked)
_REOPEN_WAIT = 10.0
#: seconds between two such nodes
_RETRY_DELAY = 1.0


class _HomeEvents:
    """What one home session's :class:`Sessions` tells (SessionEvents)."""

    def __init__(self, homes: DurableHomes, endpoint: str) -> None:
        self._homes = homes
        self._endpoint = endpoint

    def session_up(self, session: Session) -> None:
        self._homes.met(session)

    def session_lost(self, session: Session, primary: bool) -> None:
        self._homes.lost(self._endpoint)

    def primary_changed(self, session: Session) -> None:
        self._homes.home_up(self._endpoint, session)

    def node_restarted(self, session: Session) -> None:
        self._homes.reopen(self._endpoint, session)

    def control_frame(self, session: Session, op: int, req_id: int, body: Any) -> None:
        self._homes.frame(op, req_id, body)


class DurableHomes:
    """The client thread's sessions to the home nodes of its durables."""

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        locator: Locator,
        credentials: Credentials,
        settings: Settings,
        poller: zmq.Poller,
        durables: Durables,
    ) -> None:
        self._ctx = ctx
        self._locator = locator
        self._credentials = credentials
        self._settings = settings
        self._poller = poller
        self._durables = durables
        self._requests = Requests(settings.timeout)
        self._homes: dict[str, Sessions] = {}  # endpoint -> its one-candidate sessions
        self._in_flight: dict[str, int] = {}  # endpoint -> requests sent, not answered
        self._waiting: dict[str, list[_Waiting]] = {}  # endpoint ("": the primary's)
        self.home_of: dict[str, str] = {}  # durable name -> its home's endpoint
        self._nodes: dict[str, str] = {}  # broker id -> endpoint (from HELLO replies)
        self._error_home: str | None = None  # the ``home`` of the ERROR being answered
        #: shared durables consumed through a node that is not their home (a member):
        #: when that node is lost they are opened again through the primary
        self._via_member: set[str] = set()
        #: re-opens to try again: (when, name, nodes, index of the next node)
        self._retries: list[tuple[float, str, list[str], int]] = []

    # -- the client thread's loop --------------------------------------------------------

    def owner(self, sock: zmq.Socket[bytes]) -> tuple[Sessions, Session] | None:
        for sessions in self._homes.values():  # (a few: one per home node)
            session = sessions.owner(sock)
            if session is not None:
                return sessions, session
        return None

    def tick(self, now: float, primary: Session | None) -> None:
        if self._retries:
            due = [r for r in self._retries if r[0] <= now]
            self._retries = [r for r in self._retries if r[0] > now]
            for _, name, nodes, i in due:
                self._reopen(name, nodes, i)
        for ep, sessions in list(self._homes.items()):
            sessions.tick(now)
            if not self._wanted(ep):
                self._drop(ep)
        if primary is not None and self._waiting.get(""):
            for w in self._waiting.pop(""):
                self._place(primary.endpoint, w)
        for waiting in list(self._waiting.values()):
            late = [w for w in waiting if w[4] < now]
            for w in late:
                waiting.remove(w)
                if not w[3].done():
                    w[3].set_exception(
                        w[5] or BrokerUnreachable(f"durable {w[0]!r}: its node did not answer")
                    )
        self._requests.expire(now)

    def fail(self, why: str) -> None:
        """The client thread stops: every durable request still waiting (sent, or for a
        node) fails with ClientClosed."""
        self._requests.fail(why)  # (their callbacks answer the callers' futures)
        waiting, self._waiting = self._waiting, {}
        for w in (w for ws in waiting.values() for w in ws):
            if not w[3].done():
                w[3].set_exception(ClientClosed(f"{why} before the node answered"))

    def close(self) -> None:
        for sessions in self._homes.values():
            sessions.close()
        self._homes.clear()

    def met(self, session: Session) -> None:
        """A node answered HELLO (a home, or the primary): remember where it is; requests
        redirected to it go there now."""
        broker_id = session.hello.get("broker_id")
        if not isinstance(broker_id, str):
            return
        self._nodes[broker_id] = session.endpoint
        for w in self._waiting.pop("@" + broker_id, []):
            self._place(session.endpoint, w)

    # -- requests (client thread) ----------------------------------------------------------

    def submit(self, name: str, op: int, body: dict[str, Any], fut: Future[Any]) -> None:
        """A durable request: to the durable's home if it has one, else at the primary."""
        w: _Waiting = (name, op, body, fut, time.monotonic() + self._settings.timeout, None)
        self._place(self.home_of.get(name, ""), w)

    def send(self, name: str, op: int, body: dict[str, Any]) -> None:
        """A one-way frame to the durable's home (dropped while it is unreachable: a
        DURABLE_CLOSE then is moot, the node detaches a consumer whose session is gone)."""
        ep = self.home_of.get(name)
        sessions = self._homes.get(ep) if ep is not None else None
        if sessions is not None and sessions.primary is not None:
            sessions.primary.send(wire.encode_control(op, 0, body))

    def _place(self, ep: str, w: _Waiting) -> None:
        sessions = self._home(ep) if ep and not ep.startswith("@") else None
        if sessions is None or sessions.primary is None:
            self._waiting.setdefault(ep, []).append(w)
            return
        op, body = w[1], w[2]
        inner: Future[Any] = Future()
        inner.add_done_callback(lambda f: self._answered(ep, w, f))
        self._in_flight[ep] = self._in_flight.get(ep, 0) + 1
        self._requests.submit(op, body, inner, sessions.primary)

    def _answered(self, ep: str, w: _Waiting, inner: Future[Any]) -> None:
        """A durable request's reply (runs in the client thread, from Requests.reply)."""
        name, op, body, outer, deadline, redirected = w
        home, self._error_home = self._error_home, None
        self._in_flight[ep] -= 1
        exc = inner.exception()
        if exc is None:
            if op == wire.DURABLE_OPEN:
                self.home_of[name] = ep
                self._durables.opened(name)
                self._member_or_home(name, ep, body, inner.result())
            elif op == wire.DURABLE_DELETE:
                self.home_of.pop(name, None)
            outer.set_result(inner.result())
        elif isinstance(exc, RequestError) and home is not None and redirected is None:
            log.info("durable %r lives on node %s: opening it there", name, home)
            self._redirect(home, (name, op, body, outer, deadline, exc))
        else:
            outer.set_exception(exc)

    def _redirect(self, home: str, w: _Waiting) -> None:
        ep = self._nodes.get(home)
        if ep is not None:
            self._place(ep, w)
            return
        # not met yet: ask every listed node we have not met who it is (met() sends it on)
        known = set(self._nodes.values())
        unknown = [c for c in self._locator.candidates() if c not in known]
        if not unknown:  # (not in the address list: the caller gets the refusal)
            assert w[5] is not None
            w[3].set_exception(w[5])
            return
        self._waiting.setdefault("@" + home, []).append(w)
        for candidate in unknown:
            self._home(candidate)

    def frame(self, op: int, req_id: int, body: Any) -> None:
        if req_id == 0:
            if op == wire.DELIVER:
                self._durables.deliver(body)
            return
        if op == wire.ERROR and isinstance(body, dict) and isinstance(body.get("home"), str):
            # (read by _answered, which Requests.reply runs right now, in this thread)
            self._error_home = body["home"]
        self._requests.reply(op, req_id, body)
        self._error_home = None

    def _member_or_home(self, name: str, ep: str, body: dict[str, Any], reply: Any) -> None:
        """Note a shared durable opened through a node other than its home."""
        node = next((b for b, e in self._nodes.items() if e == ep), None)
        home = reply.get("home") if isinstance(reply, dict) else None
        if body.get("shared") and node is not None and home is not None and home != node:
            self._via_member.add(name)
        else:
            self._via_member.discard(name)

    def lost(self, ep: str) -> None:
        """The session to ``ep`` is lost. A durable homed there waits for it (nothing
        opens a second one elsewhere); a shared durable consumed through ``ep`` as a
        member is opened again through the other nodes of the address list in turn,
        until one takes it (its home gives what ``ep`` held to other consumers, flagged)."""
        moving = [n for n, e in self.home_of.items() if e == ep and n in self._via_member]
        if len(moving) < sum(1 for e in self.home_of.values() if e == ep):
            log.warning("durables at %s paused: their home node is unreachable", ep)
        others = [c for c in self._locator.candidates() if c != ep] or [ep]
        for name in moving:
            del self.home_of[name]
            self._via_member.discard(name)
            log.info("durable %r: its node %s is unreachable, opening it through another", name, ep)
            self._reopen(name, others, 0)

    def _reopen(self, name: str, nodes: list[str], i: int) -> None:
        """Open shared durable ``name`` through ``nodes[i]`` (the next one if that
        fails), while the subscription is open and has no node."""
        body = self._durables.open_body(name)
        if body is None or name in self.home_of:
            return
        fut: Future[Any] = Future()
        fut.add_done_callback(functools.partial(self._reopened, name, nodes, i))
        w = (name, wire.DURABLE_OPEN, body, fut, time.monotonic() + _REOPEN_WAIT, None)
        self._place(nodes[i % len(nodes)], w)

    def _reopened(self, name: str, nodes: list[str], i: int, fut: Future[Any]) -> None:
        if fut.exception() is not None:
            log.warning("durable %r could not be opened again: %s", name, fut.exception())
            self._retries.append((time.monotonic() + _RETRY_DELAY, name, nodes, i + 1))

    # -- home sessions -----------------------------------------------------------------------

    def home_up(self, ep: str, session: Session) -> None:
        """The home at ``ep`` answers (first, or again): send what waited, reopen the
        durables that live there."""
        self.reopen(ep, session)
        for w in self._waiting.pop(ep, []):
            self._place(ep, w)

    def reopen(self, ep: str, session: Session) -> None:
        names = [n for n, e in self.home_of.items() if e == ep]
        if names:
            self._durables.reattach(session, names)

    def _home(self, ep: str) -> Sessions:
        sessions = self._homes.get(ep)
        if sessions is None:
            locator = StaticLocator([ep])
            sessions = Sessions(
                self._ctx,
                locator,
                self._credentials,
                self._settings,
                self._poller,
                _HomeEvents(self, ep),
            )
            self._homes[ep] = sessions
            sessions.tick(time.monotonic())  # opens the DEALER now
        return sessions

    def _wanted(self, ep: str) -> bool:
        """Does a home session to ``ep`` still serve anything?"""
        if ep in self.home_of.values() or self._waiting.get(ep) or self._in_flight.get(ep):
            return True
        # a node asked who it is while a redirect to a node not met yet waits
        return any(k.startswith("@") and v for k, v in self._waiting.items()) and (
            ep not in self._nodes.values()
        )

    def _drop(self, ep: str) -> None:
        self._homes.pop(ep).close()
