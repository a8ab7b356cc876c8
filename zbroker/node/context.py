"""The context: everything a feature may use of the node, and nothing else.

A feature gets one at ``attach``. It reaches the node's identity and config, the routing
engine (read it; change it only through interest), the store, counters, replies to
control requests, its own sockets in the loop, local interest, origination, events, a view
of the links, and the other features' admission checks (without knowing who they are).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq

from .. import wire
from ..config import NodeConfig
from ..errors import InvalidTopic, ProtocolError
from ..routing import RoutingEngine
from .counters import Counters
from .events import NodeEvent
from .feature import Refusal, Request
from .pipeline import Pipeline

if TYPE_CHECKING:
    from ..links.state import Link
    from ..links.table import LinkTable
    from ..security import Security
    from ..store import Store
    from .kernel import Node

__all__ = ["Context"]

_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)


class Context:
    def __init__(self, node: Node) -> None:
        self._node = node
        self.config: NodeConfig = node.config
        self.broker_id: str = node.broker_id
        self.incarnation: int = node.incarnation
        self.data_dir: Path = node.identity.data_dir
        self.engine: RoutingEngine = node.engine
        self.counters: Counters = node.counters
        self.pipeline: Pipeline = node.pipeline
        self.links: LinkTable = node.links
        self.zmq_context: zmq.Context[zmq.Socket[bytes]] = node.zmq_context

    @property
    def store(self) -> Store | None:
        return self._node.store

    @property
    def security(self) -> Security | None:
        return self._node.security

    @property
    def endpoints(self) -> dict[str, str]:
        return self._node.endpoints

    @property
    def ports(self) -> dict[str, int]:
        return self._node.ports

    def status(self) -> dict[str, Any]:
        """The whole node status (every feature's section)."""
        return self._node.status()

    def ask(self, op: int, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The reply body of control op ``op`` asked by the node itself (None: no such
        op): what a client's request would get, whichever feature serves it."""
        return self._node.control.ask(op, body or {})

    # -- accounting -------------------------------------------------------------------------

    def drop(self, reason: str, n: int = 1) -> None:
        self.counters.drop(reason, n)

    def bad(self, source: str, reason: str, detail: str) -> None:
        self.counters.bad(source, reason, detail)

    def source(self, ident: bytes) -> str:
        """How logs name the sender of a control frame."""
        return self._node.control.source(ident)

    # -- replies ----------------------------------------------------------------------------

    def reply(self, req: Request, op: int, body: dict[str, Any]) -> None:
        self._node.control.send(req.ident, op, req.req_id, body)

    def error(self, req: Request, message: str) -> None:
        self._node.control.send(req.ident, wire.ERROR, req.req_id, {"message": message})

    def refuse(self, req: Request, exc: ProtocolError | InvalidTopic) -> None:
        """A request whose content is bad input: counted under its reason (an invalid
        topic's is ``bad_topic``) and answered with ERROR."""
        # (the log line says the reason before the detail: the detail alone, not twice)
        detail = exc.detail if isinstance(exc, ProtocolError) else str(exc)
        self.bad(self.source(req.ident), getattr(exc, "reason", "bad_topic"), detail)
        self.error(req, str(exc))

    def confirm(self, req: Request, op: int, body: dict[str, Any]) -> None:
        """Reply after the pass's store commit: what the reply confirms is stored then."""
        self._node.confirms.append((req.ident, req.req_id, op, body))

    def unread(self) -> bool:
        """Does a frame wait to be read on the control socket? A queue probe that finds a
        member's connection gone leaves it for the next probe then (once): the client may
        have sent its leave (with its acknowledgements) just before it closed, and that is
        read first, rather than what was in flight to it being taken for lost."""
        events = self._node.control.sock.getsockopt(zmq.EVENTS)
        return bool(int(events) & zmq.POLLIN)

    def send_to(self, ident: bytes, frame: bytes) -> bool:
        """A frame to a client's connection on the ROUTER: False if the connection is
        gone (ROUTER_MANDATORY tells at once); zmq.Again propagates (its queue is full)."""
        send = self._node.control.raw_send
        try:
            send(ident, _NOBLOCK_MORE)
            send(frame, _NOBLOCK)
        except zmq.Again:
            raise
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            return False
        return True

    # -- the loop -----------------------------------------------------------------------------

    def add_socket(self, sock: zmq.Socket[bytes], handler: Callable[[], None]) -> None:
        self._node.poller.add(sock, handler)

    def remove_socket(self, sock: zmq.Socket[bytes]) -> None:
        self._node.poller.remove(sock)

    def dial(self, link: Link, now: float) -> None:
        """Dial a link (a discovered one the caller added to the link table)."""
        self._node.dialer.dial(link, now)

    def emit(self, event: NodeEvent) -> None:
        self._node.emit(event)

    # -- interest and messages ----------------------------------------------------------------

    def add_interest(self, pattern: str, source: str) -> None:
        self._node.interest.add(pattern, source)

    def drop_interest(self, pattern: str, source: str) -> None:
        self._node.interest.drop(pattern, source)

    def notify_subscribers(self, allows: Callable[[str], bool], info: dict[str, Any]) -> int:
        """A gap notice to the local subscribers of every pattern ``allows`` accepts;
        returns how many patterns were told."""
        return self._node.delivery.notice(allows, info)

    def admit(self, topics: dict[str, list[int]], *, batch: bool) -> Refusal | None:
        """Can persistent messages on ``topics`` (topic -> [messages, bytes]) be taken?
        Every feature is asked, in the node's order; the first refusal answers."""
        for f in self._node.features:
            refusal = f.admit(topics, batch=batch)
            if refusal is not None:
                return refusal
        return None
