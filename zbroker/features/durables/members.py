"""Consumers of a shared durable whose home is another node: this node is its network
consumer (see :mod:`.remote` for the design and the messages).

A DURABLE_OPEN with ``shared=True`` for a durable another live node holds is served here:
the client becomes a local consumer of a :class:`Member` (one per durable name), which
attaches to the home with the summed credit of its consumers and hands what the home
delivers to them, least served first, under each one's credit. The open is answered when
the home accepts (or refuses) the attachment. Acknowledgements go to the home once per
pass; a consumer that detaches or dies (the probe) hands what it had not acknowledged back
(``release``: the home gives it to another consumer anywhere, flagged); the last one to
leave detaches the node. When the home's advertisement goes (it died, or every way to it
is cut) the session ends: what arrives for it later is dropped, acknowledgements for it
are not sent, and the member attaches afresh (a new session) once the home is back; the
home gives what the old session held to consumers again, flagged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from ... import wire
from ...node import Request
from .remote import SOURCE, Home, decode, qs_of, sd_topic, send
from .report import member_rows
from .shared import SharedConsumer

if TYPE_CHECKING:
    from ...node.context import Context
    from .adoption import Adoption
    from .feature import Durables

__all__ = ["Member", "Members"]

#: seconds between attach requests the home has not answered
ATTACH_RETRY = 1.0
#: a node asks its home for this many times its consumers' summed credit: the rest waits
#: here, handed out the moment a consumer acknowledges (not a round trip to the home later)
PREFETCH = 2
#: seconds between attaches repeated while attached: a home that restarted (and so forgot
#: the session) without this node seeing its advertisement go learns it again
KEEPALIVE = 5.0
#: seconds a DURABLE_OPEN waits for the home's answer
OPEN_TIMEOUT = 5.0
#: seconds between checks that local consumers are still connected (as durables do)
PROBE_INTERVAL = 1.0
#: messages about a durable's home moving (.moves, .adoption)
MOVE_OPS = ("adopt", "adopt_ok", "adopt_refused", "abandon", "rows", "rows_ok", "done", "moved")


class Member:
    """This node's consumers of one shared durable homed elsewhere."""

    __slots__ = (
        "acks",
        "adopting",
        "attached",
        "buffer",
        "consumers",
        "delivered",
        "home",
        "name",
        "next_try",
        "pattern",
        "redelivered",
        "releases",
        "selector",
        "session",
        "stored",
        "waiting",
    )

    def __init__(self, name: str, pattern: str, home: str, selector: str | None = None) -> None:
        self.name = name
        self.pattern = pattern
        self.selector = selector  # (canonical text; the home checks it against its own)
        self.home = home
        self.session: str | None = None  # the attachment in force (None: none)
        self.attached = False  # the home accepted ``session``
        self.consumers: dict[bytes, SharedConsumer] = {}
        #: delivered by the home beyond the local consumers' room (the prefetch): handed
        #: out as they acknowledge; the home counts them in flight to this node
        self.buffer: list[tuple[int, bool, list[Any]]] = []
        self.waiting: list[tuple[Request, float]] = []  # opens the home has not answered
        self.next_try = 0.0
        self.acks: list[int] = []  # to send to the home at the end of the pass
        self.releases: list[int] = []
        self.stored = 0
        self.delivered = 0
        self.redelivered = 0
        #: the durable is moving here (.adoption): consumers become the local durable's
        self.adopting = False


class Members:
    """The shared durables this node is a network consumer of."""

    def __init__(self, f: Durables, ctx: Context, home: Home) -> None:
        self._f = f
        self._ctx = ctx
        self._home = home
        self.members: dict[str, Member] = {}
        self._sessions = 0
        self._listening = False
        self._next_probe = 0.0
        #: move messages (.moves: a durable's home moving; set by the feature)
        self.on_move: Callable[[str, dict[str, Any]], None] = lambda node, body: None
        self.adoption: Adoption | None = None  # (set with on_move)

    # -- client requests ------------------------------------------------------------------

    def open(self, req: Request, name: str, opts: dict[str, Any], home: str) -> None:
        m = self.members.get(name)
        if m is not None and m.pattern != opts["pattern"]:
            self._f.refuse(req, f"durable subscription {name!r} exists with pattern {m.pattern!r}")
            return
        if m is not None and m.selector != opts["selector"]:
            self._f.refuse(
                req, f"durable subscription {name!r} is consumed here with selector {m.selector!r}"
            )
            return
        if m is None:
            m = self.members[name] = Member(name, opts["pattern"], home, opts["selector"])
            self.listen()
        old = m.consumers.pop(req.ident, None)
        if old is not None:  # the same connection opening again starts afresh
            m.releases.extend(old.inflight)
        share = min((c.share for c in m.consumers.values()), default=0)
        m.consumers[req.ident] = SharedConsumer(req.ident, opts["credit"], share)
        if m.attached and m.buffer:
            self._drain(m)  # what waits here (the prefetch) goes to the newcomer too
        if req.req_id:
            if m.attached:
                self._reply(m, req)
            else:
                m.waiting.append((req, time.monotonic() + OPEN_TIMEOUT))
        self._attach(m)

    def holds(self, name: str, ident: bytes) -> bool:
        """Is connection ``ident`` a consumer here of durable ``name`` homed elsewhere?"""
        m = self.members.get(name)
        return m is not None and ident in m.consumers

    def ack(self, req: Request, name: str) -> None:
        m = self.members.get(name)
        c = m.consumers.get(req.ident) if m is not None else None
        qs = qs_of(req.body)
        if m is None or c is None or qs is None:
            return
        done = [q for q in dict.fromkeys(c.current(qs)) if q in c.inflight]  # (twice: once)
        for q in done:
            del c.inflight[q]
        if m.attached:  # (an ended session's: the home gives them again, flagged)
            m.acks.extend(done)
            if m.buffer:
                self._drain(m)
        if m.adopting and self.adoption is not None:  # (c may be a consumer here now)
            self.adoption.take_over(name, final=False)

    def close(self, req: Request, name: str) -> None:
        m = self.members.get(name)
        if m is not None and req.ident in m.consumers:
            self._gone(m, req.ident)

    def _reply(self, m: Member, req: Request) -> None:
        body = {
            "name": m.name,
            "pattern": m.pattern,
            "stored": m.stored,  # (at the home, when it accepted the attachment)
            "dropped": 0,
            "created": False,
            "home": m.home,
        }
        self._ctx.reply(req, wire.DURABLE_OPEN, body)

    def _gone(self, m: Member, ident: bytes) -> None:
        """A local consumer left: what it held goes back to the home for others."""
        c = m.consumers.pop(ident)
        m.waiting = [w for w in m.waiting if w[0].ident != ident]
        if m.consumers:
            if m.attached:
                m.releases.extend(c.inflight)
                self._drain(m)
            self._attach(m)  # (the credit went down)
            return
        self.end(m, detach=True)

    def end(self, m: Member, *, detach: bool) -> None:
        """This node consumes ``m`` no more (``detach``: the home gives what it held here
        to others)."""
        if detach and m.session is not None:  # (after its acks: what it holds is acked)
            out = [*self._outgoing(m), {"op": "detach", "name": m.name, "session": m.session}]
            send(self._ctx, m.home, out)
        del self.members[m.name]

    def rehome(self, name: str, session: str, to: Any) -> None:
        """The home of ``name`` moved to ``to`` (:mod:`.moves`): attach there afresh."""
        m = self.members.get(name)
        if m is None or m.session != session or not isinstance(to, str):
            self._ctx.drop("shared_durable_stale")
            return
        m.home = to
        self._end_session(m)

    def _attach(self, m: Member) -> None:
        if m.session is None:
            self._sessions += 1
            m.session = f"{self._ctx.incarnation}.{self._sessions}"
        body = {
            "op": "attach",
            "name": m.name,
            "session": m.session,
            "pattern": m.pattern,
            "selector": m.selector,
            "credit": PREFETCH * sum(c.credit for c in m.consumers.values()),
            "members": len(m.consumers),
            # (False once accepted: a home that does not know the session then forgot it,
            # and answers gone, so this node drops what it holds of it and starts afresh)
            "fresh": not m.attached,
        }
        send(self._ctx, m.home, [body])
        m.next_try = time.monotonic() + ATTACH_RETRY

    def _end_session(self, m: Member) -> None:
        """The session ended (the home went, or forgot it): what the consumers hold now
        the home gives again; their acknowledgements of it are not sent."""
        m.session, m.attached = None, False
        m.acks, m.releases, m.buffer = [], [], []
        for c in m.consumers.values():
            c.forget()
        m.next_try = 0.0

    # -- messages from homes ----------------------------------------------------------------

    def take(self, m: list[Any]) -> None:
        """An internal message on ``$ZB.SD.<this node>``: to the home part, or a member."""
        body = decode(self._ctx, m)
        if body is not None and body["op"] in ("attach", "ack", "release", "detach"):
            self._home.handle(m[4], body)
        elif body is not None and body["op"] in MOVE_OPS:
            body["sent_at"] = m[7]  # (when the origin sent it: an offer can be stale)
            self.on_move(m[4], body)
        elif body is not None:
            self.handle(body)

    def handle(self, body: dict[str, Any]) -> None:
        m = self.members.get(body["name"])
        if m is None or body["session"] != m.session:
            self._ctx.drop("shared_durable_stale")  # an ended session's
            return
        op = body["op"]
        if op == "attached":
            m.attached = True
            stored = body.get("stored")
            m.stored = stored if type(stored) is int else 0
            for req, _ in m.waiting:
                self._reply(m, req)
            m.waiting = []
        elif op == "refused":
            message = str(body.get("message"))
            for req, _ in m.waiting:
                self._f.refuse(req, message)
                m.consumers.pop(req.ident, None)
            m.waiting = []
            if not m.consumers:
                m.session = None  # (nothing to detach)
                del self.members[m.name]
        elif op == "gone":
            self._end_session(m)
        elif op == "deliver":
            m.attached = True  # (its "attached" went before it: the home sent it first)
            self._deliver(m, body.get("rows"))

    def _deliver(self, m: Member, rows: Any) -> None:
        if type(rows) is not list:
            self._ctx.bad(m.home, "shared durable message", "deliver without rows")
            return
        if m.adopting and self.adoption is not None:  # (the durable is here now)
            self.adoption.keep(m, rows)
            return
        if m.buffer:
            self._drain(m)  # older ones first: the home sent them before these
        for row in rows:
            if not (
                type(row) is list
                and len(row) == 3
                and type(row[0]) is int
                and type(row[2]) is list
                and len(row[2]) == 8
            ):
                self._ctx.bad(m.home, "shared durable message", "a malformed delivery row")
                if type(row) is list and row and type(row[0]) is int:
                    m.releases.append(row[0])  # (the home's credit for it comes back)
                continue
            if m.buffer:  # (nobody has room: behind what waits already, in order)
                m.buffer.append((row[0], bool(row[1]), row[2]))
                continue
            self._deliver_one(m, row[0], bool(row[1]), row[2])

    def _drain(self, m: Member) -> None:
        """Hand buffered messages to consumers that have room again."""
        buffered, m.buffer = m.buffer, []
        for i, (q, redelivered, msg) in enumerate(buffered):
            if not self._deliver_one(m, q, redelivered, msg):
                m.buffer.extend(buffered[i + 1 :])
                break

    def _deliver_one(self, m: Member, q: int, redelivered: bool, msg: list[Any]) -> bool:
        """Hand one message to the least served consumer with room; False: none has room
        (buffered, for the next acknowledgement)."""
        best = None
        for c in m.consumers.values():
            if c.room() > 0 and (best is None or c.share < best.share):
                best = c
        if best is None:
            m.buffer.append((q, redelivered, msg))
            return False
        body = {"name": m.name, "q": q, "redelivered": redelivered, "msg": msg}
        try:
            ok = self._ctx.send_to(best.ident, wire.encode_control(wire.DELIVER, 0, body))
        except zmq.ZMQError:
            ok = False
        if not ok:
            m.releases.append(q)
            self._gone(m, best.ident)
            return True
        best.inflight[q] = None
        best.share += 1
        m.delivered += 1
        m.redelivered += redelivered
        return True

    # -- the pass ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Before the pass's commit: acknowledgements and releases to the homes."""
        for m in self.members.values():
            if m.session is not None and (m.acks or m.releases):
                send(self._ctx, m.home, self._outgoing(m))

    def _outgoing(self, m: Member) -> list[dict[str, Any]]:
        """The acknowledgements and releases ``m`` has to send (taken)."""
        out = []
        if m.acks:
            out.append({"op": "ack", "name": m.name, "session": m.session, "qs": m.acks})
        if m.releases:
            out.append({"op": "release", "name": m.name, "session": m.session, "qs": m.releases})
        m.acks, m.releases = [], []
        return out

    def listen(self) -> None:
        """What homes and network consumers send this node comes on its own topic: its
        interest is held while the node holds a durable (a home) or consumes one homed
        elsewhere (a node with neither adds no interest key). A home sees a network
        consumer's node gone when its route to that key goes."""
        want = bool(self.members or self._f.durables)
        if want != self._listening:
            self._listening = want
            change = self._ctx.add_interest if want else self._ctx.drop_interest
            change(sd_topic(self._ctx.broker_id), SOURCE + ":" + self._ctx.broker_id)

    def tick(self, now: float) -> None:
        self.listen()  # (a durable created or deleted here: within a tick)
        homes = self._ctx.engine.durable_homes.homes
        probe = now >= self._next_probe
        if probe:
            self._next_probe = now + PROBE_INTERVAL
        for m in list(self.members.values()):
            if probe:
                for ident in [i for i in m.consumers if not self._f.alive(i)]:
                    self._gone(m, ident)
                if m.name not in self.members:
                    continue
            late = [w for w in m.waiting if w[1] < now]
            for req, _ in late:
                self._f.refuse(req, f"node {m.home} holding durable {m.name!r} did not answer")
                if (req, _) in m.waiting:  # (_gone below may have taken it already)
                    m.waiting.remove((req, _))
                if req.ident in m.consumers:
                    self._gone(m, req.ident)
            if m.name not in self.members:
                continue
            if m.adopting and not m.consumers:  # (its consumers are the durable's here)
                if m.home not in homes.get(m.name, ()) or m.name not in self._f.durables:
                    self.end(m, detach=m.name not in self._f.durables)  # (the move ended)
                continue
            if m.home not in homes.get(m.name, ()):
                others = sorted(homes.get(m.name, set()) - {self._ctx.broker_id})
                if others and not m.adopting:  # (it moved, or it is two: the lowest)
                    m.home = others[0]
                if m.session is not None:
                    self._end_session(m)
            elif now >= m.next_try + (KEEPALIVE if m.attached else 0.0):
                self._attach(m)

    def status(self) -> list[dict[str, Any]]:
        return member_rows(self.members.values(), self._ctx.broker_id)
