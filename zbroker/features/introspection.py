"""Introspection: the requests that tell a client what this node is and knows.

HELLO (identity, endpoints, frame limit; with security, the client's permissions),
STATUS (the whole status), PING (liveness, with the incarnation so a client notices a
restart its reconnect hid, and ``unknown`` for a connection that never said HELLO, so it
notices a reconnect that hid the loss of its old connection), ROUTES (the interest table,
optionally narrowed by pattern). With security on, STATUS and ROUTES are for clients
with ``monitor = true`` only.

It also knows the node's clients, each connection that said HELLO or PING within
``CLIENT_FORGET`` seconds: when the node is told to stop, each hears LEAVING (and so does
one that says HELLO during the drain), so it moves to another node at once, while this one
still takes what it sends on its way out (:mod:`zbroker.node.drain`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

import zmq

from .. import wire
from ..const import CLIENT_PROTOCOL, CLIENT_READS_RUNS, PROTOCOL_VERSION
from ..errors import InvalidTopic
from ..node import Feature, Op, Request, monitored
from ..node.context import Context
from ..topics import patterns_overlap, validate_pattern

__all__ = ["CLIENT_FORGET", "Introspection"]

log = logging.getLogger("zbroker.node")

LEAVING_FRAME = wire.encode_control(wire.LEAVING, 0, {})

#: clients (routing ids) already warned about their protocol: bounded, then no more warnings
_WARNED_MAX = 1024
#: a client connection not heard (HELLO, PING) for this long is no longer told LEAVING
CLIENT_FORGET = 30.0
#: connections that said HELLO, the most recently heard kept up to this many: a PING from
#: one not among them is answered ``unknown``
_GREETED_MAX = 65_536


class Introspection(Feature):
    name = "introspection"

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        self._warned: set[bytes] = set()
        self._clients: dict[bytes, float] = {}  # routing id -> when last heard
        self._greeted: OrderedDict[bytes, None] = OrderedDict()  # said HELLO (bounded)
        self._leaving = False
        self._next_prune = 0.0

    def ops(self) -> Sequence[Op]:
        return (
            Op(wire.HELLO, self._hello),
            Op(
                wire.STATUS,
                lambda req: self._ctx.reply(req, wire.STATUS, self._ctx.status()),
                monitored("status"),
            ),
            Op(wire.PING, self._ping),
            Op(wire.ROUTES, self._routes, monitored("routes")),
        )

    def _hello(self, req: Request) -> None:
        ctx = self._ctx
        said = req.body.get("client_protocol")
        if not (type(said) is int and said >= CLIENT_READS_RUNS):
            self._older_client(req.ident, said)
        hello = {
            "broker_id": ctx.broker_id,
            "incarnation": ctx.incarnation,
            "version": PROTOCOL_VERSION,
            "client_protocol": CLIENT_PROTOCOL,
            "endpoints": ctx.endpoints,
            "ports": ctx.ports,
            # this node reads publish batches of up to this many bytes (a client batches
            # only toward a node that says so, and never over its limit)
            "publish_batch": ctx.config.max_frame_bytes,
        }
        sec = ctx.security
        if sec is not None:
            # what this client may do: its library refuses the rest before sending
            hello["user"] = sec.user
            hello["permissions"] = sec.permissions(sec.user)
        ctx.reply(req, wire.HELLO, hello)
        self._heard(req.ident)
        self._greeted[req.ident] = None
        self._greeted.move_to_end(req.ident)
        if len(self._greeted) > _GREETED_MAX:
            self._greeted.popitem(last=False)

    def _older_client(self, ident: bytes, said: object) -> None:
        """A client that does not say it reads delivery runs: its subscriptions would
        drop (and count as missed) every message this node delivers to it. Said once per
        client, so an operator learns why, not only that messages go missing."""
        if ident in self._warned or len(self._warned) >= _WARNED_MAX:
            return
        self._warned.add(ident)
        log.warning(
            "a client said HELLO with client_protocol %r, this node's is %d: a client "
            "library below %d cannot read the runs it delivers messages in, and drops "
            "them; upgrade the client (routing id %r)",
            said, CLIENT_PROTOCOL, CLIENT_READS_RUNS, ident[:64],
        )  # fmt: skip

    def _ping(self, req: Request) -> None:
        body: dict[str, object] = {"incarnation": self._ctx.incarnation}
        if req.ident in self._greeted:
            self._greeted.move_to_end(req.ident)
        else:
            # a connection that never said HELLO: its client's libzmq reconnected under it
            # (this node had closed the old one: its heartbeat, a reset), so what this
            # node kept for that client (queue memberships, durables) went with the old
            # one, and the client must start afresh to have it again
            body["unknown"] = True
        self._ctx.reply(req, wire.PING, body)
        self._heard(req.ident)

    def _heard(self, ident: bytes) -> None:
        if self._leaving:  # (a client that came during the drain: it moves on too)
            self._tell_leaving(ident)
        else:
            self._clients[ident] = time.monotonic()

    def tick(self, now: float) -> None:
        if now < self._next_prune:  # (a scan of every client: not every 50 ms tick)
            return
        self._next_prune = now + CLIENT_FORGET / 3
        gone = [i for i, t in self._clients.items() if now - t > CLIENT_FORGET]
        for ident in gone:
            del self._clients[ident]

    def draining(self, now: float) -> bool:
        """The node is stopping: every client hears LEAVING; True if any did."""
        self._leaving = True
        told = [self._tell_leaving(ident) for ident in self._clients]
        self._clients.clear()
        return any(told)

    def _tell_leaving(self, ident: bytes) -> bool:
        try:
            return self._ctx.send_to(ident, LEAVING_FRAME)
        except zmq.Again:  # (its queue is full: it will find out by its heartbeat)
            return False

    def _routes(self, req: Request) -> None:
        pattern = req.body.get("pattern")
        routes = self._ctx.engine.interest()
        if isinstance(pattern, str) and pattern:
            try:
                validate_pattern(pattern)
            except InvalidTopic as exc:
                self._ctx.error(req, str(exc))
                return
            # a queue group's entry by the pattern its members subscribed (its own key,
            # $ZB.Q.<group>.<pattern>, is no topic a user names)
            routes = [
                r
                for r in routes
                if patterns_overlap(pattern, str(r.get("group_pattern", r["pattern"])))
            ]
        self._ctx.reply(req, wire.ROUTES, {"routes": routes})
