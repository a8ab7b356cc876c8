"""The dialer side of links: a DEALER per configured or discovered link, connected to
the peer's ROUTER, its handshake, and the frames it receives.

Its routing id is ``broker_id/link_name/`` plus this process's instance mark (with
security, a random part per dial instead: with ROUTER_HANDOVER off nobody can take the
connection's place on the peer). A redial of this process takes over its old connection
on the peer's ROUTER; another node configured with our ID and link name cannot (before
the mark, each of the two took the routing id from the other in turn).

A WELCOME from a peer whose broker ID another process holds on a link that is up is
refused here as the acceptor refuses such a HELLO (:func:`~.handshake.rival`): the peer is
told with a REFUSE before the dial is closed.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, cast

import zmq

from .. import wire
from ..const import DRAIN_BATCH
from ..errors import ProtocolError
from ..wire.reading import FrameReader
from .handshake import (
    Repeats,
    describe,
    hello_body,
    incarnation_of,
    instance_of,
    peer_frame_max,
    problem,
    starts_of,
)
from .state import Link, LinkState

if TYPE_CHECKING:
    from ..security import Security
    from .table import LinkTable

__all__ = ["Dialer"]

log = logging.getLogger("zbroker.node")

_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


class Dialer:
    def __init__(
        self, table: LinkTable, zctx: zmq.Context[zmq.Socket[bytes]], security: Security | None
    ) -> None:
        self._table = table
        self._zctx = zctx
        self._security = security
        self._duplicates = Repeats()  # a refused duplicate is dialled again: said once a minute

    def dial(self, link: Link, now: float) -> None:
        cfg = link.config
        assert cfg is not None
        table = self._table
        sock = self._socket(link)
        if sock is None:
            return
        try:
            sock.connect(cfg.uri)
        except zmq.ZMQError as exc:
            sock.close()
            self._failed(link, f"cannot connect to {cfg.uri}: {exc}")
            return
        link.socket = sock
        sock.send(wire.encode_link(wire.LINK_HELLO, hello_body(table.me, link.name, cfg)))
        link.dialling(now)
        read = FrameReader(sock)  # (a flood's large frames are read as views)
        table.sockets.add(sock, lambda: self.on_frames(link, read))
        log.debug("link %s: dialling %s (attempt %d)", link.name, cfg.uri, link.attempts)

    def _socket(self, link: Link) -> zmq.Socket[bytes] | None:
        cfg = link.config
        assert cfg is not None
        sock = self._zctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        me = self._table.me
        ident = f"{me.broker_id}/{link.name}/"
        if self._security is not None:
            # unguessable per dial: with handover off, nobody can take this connection's
            # place on the peer's ROUTER
            ident += uuid.uuid4().hex[:16]
        else:
            ident += me.instance[:16]  # ours alone: a node sharing our ID cannot take it
        sock.setsockopt(zmq.ROUTING_ID, ident.encode())
        hwm = self._table.config.hwm
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.RCVHWM, hwm)
        if "[" in cfg.uri:
            sock.setsockopt(zmq.IPV6, 1)
        if self._security is not None:
            trouble = self._security.dial(sock, cfg.peer or link.peer or None)
            if trouble is not None:
                sock.close()
                self._failed(link, trouble)
                return None
        return sock

    @staticmethod
    def _failed(link: Link, why: str) -> None:
        link.last_error = why
        log.error("link %s: %s", link.name, why)
        link.state = LinkState.FAILED

    def on_frames(self, link: Link, read: FrameReader) -> None:
        """Drain a dialer's DEALER (``read`` reads it): the handshake's answer, then the
        link's frames."""
        sock = link.socket
        table = self._table
        shortcut = table.shortcut
        budget = DRAIN_BATCH  # messages, not frames: a MSGR frame holds up to LINK_BATCH
        first = True
        while budget > 0:
            budget -= 1
            if sock is None or link.socket is not sock:
                return  # the link was torn down while draining
            if not first and not cast(int, sock.getsockopt(_EVENTS)) & _POLLIN:
                return  # (no zmq.Again per pass: see the pipeline)
            first = False
            try:
                body = read(zmq.NOBLOCK)
            except zmq.Again:
                return
            now = time.monotonic()
            if shortcut is not None and link.state is LinkState.UP:
                n = shortcut(link, body, now)  # (a flood's view too: walked in place)
                if n >= 0:
                    budget -= n
                    continue
            try:
                if len(body) > table.frame_limit:
                    raise ProtocolError("oversized", f"{len(body)} bytes")
                value = wire.decode_frame(body)
                if link.state is LinkState.HANDSHAKING:
                    self._on_reply(link, value, now)
                elif link.state is LinkState.UP:
                    budget -= table.on_frame(link, value, len(body), now)
            except ProtocolError as exc:
                table.counters.bad(link.source, exc.reason, exc.detail)
                if link.state is LinkState.HANDSHAKING:
                    link.bad_answer = str(exc)

    def _on_reply(self, link: Link, value: list[Any], now: float) -> None:
        op = value[0]
        if op == wire.LINK_REFUSE:
            self._refused(link, wire.check_link_map(value), now)
            return
        if op != wire.LINK_WELCOME:
            if op in (wire.MSGS, wire.MSGR) and len(value) == 2 and type(value[1]) is list:
                # counted in messages: one bad frame may have held hundreds
                n = len(value[1]) if op == wire.MSGS else wire.held(value[1])
                link.drops += n
                self._table.counters.drop("link_not_ready", n)
            raise ProtocolError("unexpected", f"frame type {op} before the handshake finished")
        info = wire.check_link_map(value)
        peer = info.get("id")
        if not isinstance(peer, str):
            raise ProtocolError("bad_type", "LINK_WELCOME needs an id string")
        inc = incarnation_of(info, "LINK_WELCOME")
        trouble = problem(self._table.me, peer, info)
        peer_max = 0
        instance = ""
        starts = 0
        if trouble is None:
            try:
                peer_max = peer_frame_max(info, self._table.config.max_frame_bytes)
                instance = instance_of(info)
                starts = starts_of(info, inc)
            except ProtocolError as exc:
                trouble = f"malformed handshake from {peer}: {exc.detail}"
        expected = link.config.peer if link.config is not None else None
        if trouble is None and self._security is not None and expected and peer != expected:
            # CURVE proved the server holds `expected`'s key; a different ID is misconfigured
            trouble = f"refused peer {peer}: the key we dialled is {expected!r}'s"
        if trouble is not None:
            self._table.refused(link.name, trouble)
            self._table.close_dialer(link)
            link.wait(trouble, now)
            log.warning("link %s: %s", link.name, trouble)
            return
        if not self._unique(link, peer, instance, starts, now):
            return
        link.peer = peer
        link.peer_incarnation = inc
        link.peer_instance = instance
        link.peer_starts = starts
        link.set_peer_frame_max(peer_max)
        self._table.up(link, now)

    def _unique(self, link: Link, peer: str, instance: str, starts: int, now: float) -> bool:
        """False (refused, said, counted; the peer told) if another process holds
        ``peer``'s broker ID on a link that is up; the links of its own former process are
        taken down."""
        table = self._table
        newcomer = describe(link.name, True, peer, instance)
        trouble = table.unique(link.name, newcomer, peer, instance, starts, self._duplicates, now)
        if trouble is None:
            return True
        sock = link.socket
        if sock is not None:
            # the peer admitted the link on its side: tell it why it ends (a moment of
            # linger lets the REFUSE leave; the dial is closed either way)
            table.sockets.remove(sock)
            try:
                sock.send(wire.encode_link(wire.LINK_REFUSE, {"reason": trouble}), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            sock.close(linger=200)
            link.socket = None
        link.wait(trouble, now)
        return False

    def _refused(self, link: Link, info: dict[str, Any], now: float) -> None:
        reason = str(info.get("reason", "no reason given"))
        self._table.refused(link.name, f"refused by peer: {reason}")
        retry = info.get("retry", True) is not False
        self._table.close_dialer(link)
        uri = link.config and link.config.uri
        if retry:
            delay = link.wait(f"refused by peer: {reason}", now)
            log.warning(
                "link %s to %s refused: %s (retrying in %.1f s)", link.name, uri, reason, delay
            )
        else:
            link.last_error = f"refused by peer: {reason}"
            link.state = LinkState.REFUSED
            log.error("link %s to %s refused: %s (not retrying)", link.name, uri, reason)
