"""Control dispatch: the node's ROUTER, where client requests and peers' link frames
arrive.

A frame of an accepted link goes to the relay's shortcut first (:mod:`.shortcut`: with
security on, once its sender passed the check the acceptor makes); link frames it does
not take go to the link table's acceptor. A control request ``[op, req_id, body]`` is
looked up in the op table the features declared (:class:`~.feature.Op`); with security on,
the sender's key must be allowed every permission subject the op declares for the body
before the handler runs. There are no op-specific branches here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import zmq

from .. import wire
from ..const import DRAIN_BATCH
from ..errors import ProtocolError
from .delivery import raw_send
from .feature import Op, Request

if TYPE_CHECKING:
    from ..links.acceptor import Acceptor
    from ..links.table import LinkTable
    from ..security import Security
    from .counters import Counters

__all__ = ["ControlDispatch"]

_EVENTS = int(zmq.EVENTS)
#: the routing id of a request the node asks itself (:meth:`ControlDispatch.ask`): no
#: ROUTER peer has it (theirs are zmq's or a dialer's random ones, never empty)
_LOCAL = b""
_POLLIN = int(zmq.POLLIN)


class ControlDispatch:
    def __init__(
        self,
        sock: zmq.Socket[bytes],
        counters: Counters,
        links: LinkTable,
        acceptor: Acceptor,
        security: Security | None,
        max_frame_bytes: int,
    ) -> None:
        self.sock = sock
        self.raw_send = raw_send(sock)
        self._counters = counters
        self._links = links
        self._acceptor = acceptor
        self._security = security
        self._max = max_frame_bytes
        self._ops: dict[int, Op] = {}
        self._answer: dict[str, Any] | None = None
        self._recv: Callable[[int], list[bytes]] = sock.recv_multipart
        if security is not None:
            self._recv = lambda flags: security.recv_control(sock, flags)

    def add(self, ops: list[Op] | tuple[Op, ...]) -> None:
        for op in ops:
            if op.op in self._ops:
                raise ValueError(f"control op {op.op} served twice")
            self._ops[op.op] = op

    def op(self, number: int) -> Op | None:
        """The op a request of this number is served by (None: unknown)."""
        return self._ops.get(number)

    def source(self, ident: bytes) -> str:
        link = self._links.accepted.get(ident)
        if link is not None:
            return f"link {link.name} from {link.peer}"
        return f"control:{ident.hex()[:16]}"

    def ask(self, number: int, body: dict[str, Any]) -> dict[str, Any] | None:
        """Serve a request the node asks itself (in the loop, no permission check): the
        body its op replies, exactly as a client would get it (None: no such op, or no
        reply). The monitor reads STATUS, ROUTES and PEERS this way."""
        op = self._ops.get(number)
        if op is None:
            return None
        self._answer = None
        op.handler(Request(_LOCAL, number, 1, body))
        answer, self._answer = self._answer, None
        return answer

    def send(self, ident: bytes, op: int, req_id: int, body: dict[str, Any]) -> None:
        if not ident:  # the node asked itself (ask)
            self._answer = body
            return
        try:
            self.sock.send_multipart([ident, wire.encode_control(op, req_id, body)], zmq.NOBLOCK)
        except zmq.Again:
            self._counters.drop("control_queue_full")
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:  # the requester went away: nothing to do
                raise

    def on_frames(self) -> None:
        """Drain the ROUTER: link frames to the acceptor, requests to their op."""
        events = cast("Callable[[int], int]", self.sock.getsockopt)
        budget = DRAIN_BATCH  # messages: a link's MSGR frame counts for what it holds
        # a link frame whose head the node knows may go on as it came (.shortcut)
        links = self._links
        shortcut, accepted, sec = links.shortcut, links.accepted, self._security
        links.control_behind = False
        first = True
        while budget > 0:
            budget -= 1
            # after the frame poll() announced, ask the socket rather than end on
            # zmq.Again: an exception per pass is a relay's largest cost at low rates
            if not first and not events(_EVENTS) & _POLLIN:
                return
            first = False
            try:
                frames = self._recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            ident = frames[0]
            if shortcut is not None and len(frames) == 2:
                link = accepted.get(ident)
                if link is not None and (sec is None or sec.node_ok(sec.user, link.peer)):
                    n = shortcut(link, frames[1], time.monotonic())
                    if n >= 0:
                        budget -= n
                        continue
            try:
                req = self._decode(frames)
                if req is None:
                    continue
                if isinstance(req, list):
                    budget -= self._acceptor.on_frame(ident, req, len(frames[1]))
                    continue
            except ProtocolError as exc:
                self._counters.bad(self.source(ident), exc.reason, exc.detail)
                continue
            self._dispatch(req)
        # stopped on the budget: an accepted link's frames may be among those left unread
        links.control_behind = bool(events(_EVENTS) & _POLLIN)

    def _decode(self, frames: list[bytes]) -> Request | list[Any] | None:
        """A request, a link frame (the decoded value), or None (counted)."""
        ident = frames[0]
        if len(frames) != 2:
            self._counters.bad(
                self.source(ident),
                "bad_frame_count",
                f"{len(frames)} frames, expected 1 after the identity",
            )
            return None
        body = frames[1]
        if len(body) > self._links.frame_limit:
            raise ProtocolError("oversized", f"{len(body)} bytes")
        value = wire.decode_frame(body)
        if value[0] in wire.LINK_TYPES:
            return value
        if len(body) > self._max:
            # (only a link frame may carry the slack: a client's request may not)
            raise ProtocolError("oversized", f"{len(body)} bytes")
        if len(value) != 3 or type(value[1]) is not int or type(value[2]) is not dict:
            raise ProtocolError("bad_shape", "control frame must be [op, req_id, body]")
        return Request(ident, value[0], value[1], value[2])

    def _dispatch(self, req: Request) -> None:
        op = self._ops.get(req.op)
        if op is None:
            self._counters.bad(self.source(req.ident), "unknown_op", f"op {req.op}")
            self.send(
                req.ident, wire.ERROR, req.req_id, {"message": f"unknown request op {req.op}"}
            )
            return
        if self._security is not None and op.subjects is not None:
            refusal = self._refusal(op, req.body)
            if refusal is not None:
                self.send(req.ident, wire.ERROR, req.req_id, {"message": refusal})
                return
        op.handler(req)

    def _refusal(self, op: Op, body: dict[str, Any]) -> str | None:
        """With security on: the refusal message if the sender's key may not do this."""
        sec = self._security
        assert sec is not None and op.subjects is not None
        user = sec.user
        for kind, what in op.subjects(body):
            if kind == "publish" and not sec.may_publish(user, what):
                return sec.refuse("publish to", user, what)
            if kind == "subscribe" and not sec.may_subscribe(user, what):
                return sec.refuse("subscribe to", user, what)
            if kind == "monitor" and not sec.may_monitor(user):
                return sec.refuse("read", user, what)
        return None
