"""The acceptor side of links: peers that dial us arrive on the node's ROUTER, under
their routing id; a LINK_HELLO that passes the checks makes an acceptor link.

A second HELLO of the same peer and link name replaces the link (a restarted or
redialling peer), unless it comes from an older incarnation; a frame from a routing id we
have no link for is answered with a REFUSE that asks for a new handshake (we restarted,
or the link timed out here). A HELLO whose broker ID another process holds on a link that
is up (:func:`~.handshake.rival`) is refused, counted (``handshakes_refused_duplicate_id``,
besides ``handshakes_refused``) and logged as an error naming both links; one from a later
incarnation of that peer takes down the links of its former process instead.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import zmq

from .. import wire
from .handshake import (
    HELLO_ERRORS,
    Hello,
    Repeats,
    describe,
    parse_hello,
    problem,
    welcome_body,
)
from .state import Link, LinkKind

if TYPE_CHECKING:
    from ..node.counters import BadInputLog
    from ..security import Security
    from .table import LinkTable

__all__ = ["Acceptor"]

log = logging.getLogger("zbroker.node")


class Acceptor:
    def __init__(self, table: LinkTable, security: Security | None, refusals: BadInputLog) -> None:
        self._table = table
        self._security = security
        # handshake refusals: an unauthenticated peer must not be able to flood the log
        self._refusals = refusals
        self._duplicates = Repeats()  # a refused duplicate retries: said once a minute

    def on_frame(self, ident: bytes, value: list[Any], size: int) -> int:
        """A link frame on the ROUTER. Returns the messages it held."""
        now = time.monotonic()
        table = self._table
        if value[0] == wire.LINK_HELLO:
            self._hello(ident, wire.check_link_map(value), now)
            return 0
        link = table.accepted.get(ident)
        sec = self._security
        if link is not None and sec is not None and not sec.node_ok(sec.user, link.peer):
            # another connection took over this routing id (not that peer's key), or the
            # peer left the allowlist at a reload (its connection authenticated before)
            sec.refuse("send on link", sec.user, f"{link.name} of {link.peer}")
            return 0
        if link is None:
            if value[0] != wire.BYE:
                self._refuse(ident, "unknown link: handshake again", retry=True)
            return 0
        return table.on_frame(link, value, size, now)

    def _refuse(self, ident: bytes, reason: str, *, retry: bool) -> None:
        frame = wire.encode_link(wire.LINK_REFUSE, {"reason": reason, "retry": retry})
        self._send_raw(ident, frame)

    def _send_raw(self, ident: bytes, frame: bytes) -> None:
        """A frame to a connection on our ROUTER that is not (or no longer) a link."""
        try:
            self._table.control.send_multipart([ident, frame], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def _hello(self, ident: bytes, info: dict[str, Any], now: float) -> None:
        table = self._table
        try:
            hello = parse_hello(info, table.config.max_frame_bytes)
        except HELLO_ERRORS as exc:
            table.refused(repr(ident[:64]), f"malformed handshake: {exc}")
            self._refusals.report(repr(ident[:64]), "malformed", str(exc), now)
            self._refuse(ident, f"malformed handshake: {exc}", retry=False)
            return
        peer = hello.peer
        trouble = problem(table.me, peer, info)
        retry = not table.me.is_self(peer, info)  # a duplicate ID may be fixed: keep trying
        sec = self._security
        if trouble is None and sec is not None and not sec.node_ok(sec.user, peer):
            retry = False  # its key will not change by retrying
            # the broker ID is bound to the key the connection authenticated with
            trouble = (
                f"refused peer {peer}: it authenticated as {sec.user or 'nobody'}, "
                f"not as node:{peer}"
                if sec.user != "node:" + peer
                else f"refused peer {peer}: no longer in the allowlist"
            )
            sec.refuse("link as", sec.user, peer)
        if trouble is not None:
            table.refused(f"{peer}/{hello.name}", trouble)
            self._refusals.report(f"{peer}/{hello.name}", "refused", trouble, now)
            self._refuse(ident, trouble, retry=retry)
            return
        if self._unique(ident, hello, now) and self._replace(ident, hello, now):
            self._admit(ident, hello, now)

    def _unique(self, ident: bytes, hello: Hello, now: float) -> bool:
        """False (refused, said and counted) if another process holds the peer's broker
        ID on a link that is up; the links of its own former process are taken down."""
        newcomer = describe(hello.name, False, hello.peer, hello.instance)
        trouble = self._table.unique(
            f"{hello.peer}/{hello.name}",
            newcomer,
            hello.peer,
            hello.instance,
            hello.starts,
            self._duplicates,
            now,
        )
        if trouble is None:
            return True
        self._refuse(ident, trouble, retry=True)  # it may be fixed: keep trying
        return False

    def _replace(self, ident: bytes, hello: Hello, now: float) -> bool:
        """Take down what this HELLO replaces; False if it is stale (refused)."""
        table = self._table
        previous = table.accepted.get(ident)
        if previous is not None:
            # a new handshake on the same connection supersedes whatever link it carried
            table.down(previous, "replaced by a new handshake on its connection", now)
        for old in list(table.accepted.values()):
            if old.peer == hello.peer and old.name == hello.name:
                if old.peer_incarnation > hello.incarnation:
                    self._refuse(ident, "stale incarnation", retry=False)
                    return False
                # a restarted (or redialling) peer replaces its stale link
                table.down(old, f"replaced by incarnation {hello.incarnation} of {hello.peer}", now)
        return True

    def _admit(self, ident: bytes, hello: Hello, now: float) -> None:
        table = self._table
        link = Link(
            name=hello.name,
            kind=LinkKind.ACCEPTED,
            duplex=hello.duplex,
            options=hello.options,
            heartbeat_interval=hello.heartbeat_interval,
            heartbeat_timeout=hello.heartbeat_timeout,
            ident=ident,
            peer=hello.peer,
            peer_incarnation=hello.incarnation,
            peer_instance=hello.instance,
            peer_starts=hello.starts,
        )
        link.set_peer_frame_max(hello.peer_max_frame)
        table.accepted[ident] = link
        self._send_raw(ident, wire.encode_link(wire.LINK_WELCOME, welcome_body(table.me)))
        table.up(link, now)
