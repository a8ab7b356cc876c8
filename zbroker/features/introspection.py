"""Introspection: the requests that tell a client what this node is and knows.

HELLO (identity, endpoints, frame limit; with security, the client's permissions),
STATUS (the whole status), PING (liveness, with the incarnation so a client notices a
restart its reconnect hid), ROUTES (the interest table, optionally narrowed by pattern).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import wire
from ..const import PROTOCOL_VERSION
from ..errors import InvalidTopic
from ..node import Feature, Op, Request
from ..node.context import Context
from ..topics import patterns_overlap, validate_pattern

__all__ = ["Introspection"]


class Introspection(Feature):
    name = "introspection"

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx

    def ops(self) -> Sequence[Op]:
        return (
            Op(wire.HELLO, self._hello),
            Op(wire.STATUS, lambda req: self._ctx.reply(req, wire.STATUS, self._ctx.status())),
            Op(wire.PING, self._ping),
            Op(wire.ROUTES, self._routes),
        )

    def _hello(self, req: Request) -> None:
        ctx = self._ctx
        hello = {
            "broker_id": ctx.broker_id,
            "incarnation": ctx.incarnation,
            "version": PROTOCOL_VERSION,
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

    def _ping(self, req: Request) -> None:
        self._ctx.reply(req, wire.PING, {"incarnation": self._ctx.incarnation})

    def _routes(self, req: Request) -> None:
        pattern = req.body.get("pattern")
        routes = self._ctx.engine.interest()
        if isinstance(pattern, str) and pattern:
            try:
                validate_pattern(pattern)
            except InvalidTopic as exc:
                self._ctx.error(req, str(exc))
                return
            routes = [r for r in routes if patterns_overlap(pattern, str(r["pattern"]))]
        self._ctx.reply(req, wire.ROUTES, {"routes": routes})
