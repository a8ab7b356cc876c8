"""The link table: every link of a node, its sockets' I/O, heartbeats and redials.

It drives the sans-IO state machine (:mod:`.state`) with the clock and the sockets: the
dialer side (:mod:`.dialer`) owns a DEALER per configured or discovered link; the acceptor
side (:mod:`.acceptor`) shares the node's ROUTER; this module keeps the registry, takes
links up and down, handles the frames of established links, sends heartbeats and
goodbyes, and flushes each pass's outboxes and advertisements (:mod:`.flush`; those
that come in: :mod:`.adverts`).

What links do to the rest of the node goes through :class:`LinkHooks` (the kernel): a
MSGS frame to the pipeline, PMSGS/PACK to the feature that registered them, and link up,
down and advertisement notices to the features.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import zmq

from .. import wire
from ..config import NodeConfig
from ..const import LINK_FRAME_SLACK, SILENT_GRACE
from ..errors import ProtocolError
from ..routing import LinkDown, LinkUp, RoutingEngine
from .adverts import advert_in
from .handshake import Me, Repeats, rival
from .outbox import queued
from .state import Due, Link, LinkKind, LinkState, due

__all__ = ["LinkHooks", "LinkTable", "Sockets"]

log = logging.getLogger("zbroker.node")

_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_SEND_ERRORS = {"link_queue_full": "queue full", "link_peer_gone": "peer gone"}
_NO_ANSWER = "no answer to the handshake"  # (a dial that timed out: its last_error)


class LinkHooks(Protocol):
    """What the kernel does for links (implemented by the node)."""

    def link_msgs(self, link: Link, op: int, batch: list[Any], n: int) -> None: ...
    def link_frame(self, link: Link, value: list[Any]) -> int | None: ...
    def link_up(self, link: Link, now: float) -> None: ...
    def link_down(self, link: Link, reason: str, was_up: bool, now: float, clean: bool) -> None: ...
    def advert_in(self, link: Link) -> None: ...
    def handshake_refused(self, link: str, reason: str) -> None: ...


class Sockets(Protocol):
    """The kernel's poller: sockets with their handlers."""

    def add(self, sock: zmq.Socket[bytes], handler: Callable[[], None]) -> None: ...
    def remove(self, sock: zmq.Socket[bytes]) -> None: ...


class Counting(Protocol):
    handshakes_refused: int
    handshakes_refused_duplicate_id: int
    links_up: int
    links_down: int
    forwarded: int
    dropped: dict[str, int]

    def drop(self, reason: str, n: int = 1) -> None: ...
    def bad(self, source: str, reason: str, detail: str) -> None: ...


class LinkTable:
    def __init__(
        self,
        *,
        config: NodeConfig,
        me: Me,
        engine: RoutingEngine,
        counters: Counting,
        hooks: LinkHooks,
        sockets: Sockets,
    ) -> None:
        self.config = config
        self.me = me
        self.engine = engine
        self.counters = counters
        self.hooks = hooks
        self.sockets = sockets
        self.dialers: dict[str, Link] = {lc.name: Link.dialing(lc) for lc in config.links}
        self.accepted: dict[bytes, Link] = {}
        self.by_engine_id: dict[str, Link] = {}
        self.dirty: list[Link] = []  # links with a non-empty outbox
        self.send_error = ""  # why the last send failed: the drop counter's name
        #: link frames we accept (what we send is cut for each peer's own limit)
        self.frame_limit = config.max_frame_bytes + LINK_FRAME_SLACK
        self._control: zmq.Socket[bytes] | None = None
        #: the last drain of the ROUTER (node.control) stopped on its budget, input unread
        self.control_behind = False
        self._control_send: Callable[[bytes, int], Any] | None = None
        #: set by the node: takes a link frame read (bytes) before it is decoded, the
        #: messages it held, or -1 for the general way (:mod:`zbroker.node.shortcut`)
        self.shortcut: Callable[[Link, bytes | memoryview, float], int] | None = None

    def bind(self, control: zmq.Socket[bytes], control_send: Callable[[bytes, int], Any]) -> None:
        """The node's ROUTER, on which acceptor links live."""
        self._control = control
        self._control_send = control_send

    @property
    def control(self) -> zmq.Socket[bytes]:
        assert self._control is not None
        return self._control

    def all(self) -> list[Link]:
        return [*self.dialers.values(), *self.accepted.values()]

    def any(self) -> bool:
        return bool(self.dialers or self.accepted)

    def resolve(
        self, sends: list[tuple[str, tuple[str, ...] | None, int]]
    ) -> tuple[list[tuple[Link, list[str] | None, int]], int]:
        """route()'s sends as (link, targets list to forward, copies), links that are up
        only, and the copies routed to links that are not (each message loses them). The
        targets list is shared by the messages of one frame (never modified)."""
        by_id = self.by_engine_id
        resolved = [
            (link, None if targets is None else list(targets), copies)
            for link_id, targets, copies in sends
            if (link := by_id.get(link_id)) is not None
        ]
        missing = sum(copies for link_id, _, copies in sends if link_id not in by_id)
        return resolved, missing

    # -- sending --------------------------------------------------------------------------

    def send(self, link: Link, frame: bytes, now: float) -> bool:
        """Send a frame on a link; False (with :attr:`send_error`) if it could not go."""
        try:
            if link.dialer:
                assert link.socket is not None
                link.socket.send(frame, _NOBLOCK)
            else:
                # the Cython send twice: send_multipart's Python wrapper costs a
                # low-rate relay more than the sends (a ROUTER takes both or neither)
                send = self._control_send
                assert send is not None
                send(link.ident, _NOBLOCK_MORE)
                send(frame, _NOBLOCK)
        except zmq.Again:
            self.send_error = "link_queue_full"
            return False
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                # the ROUTER has no connection for this peer (it went away): not a full queue
                self.send_error = "link_peer_gone"
                return False
            raise
        link.last_sent = now
        link.bytes_out += len(frame)
        return True

    def send_failed_reason(self) -> str:
        return _SEND_ERRORS.get(self.send_error, self.send_error)

    # -- frames of established links --------------------------------------------------------

    def heard(self, link: Link, size: int, now: float) -> None:
        """A frame of ``size`` bytes came on ``link`` (the relay's shortcut tells it too)."""
        link.last_recv = now
        link.unheard = 0  # the peer is alive: what we sent before reached its socket
        link.bytes_in += size

    def on_frame(self, link: Link, value: list[Any], size: int, now: float) -> int:
        """A frame from a link that is up (either side). Returns the messages it held."""
        self.heard(link, size, now)
        op = value[0]
        if op == wire.MSGR or op == wire.MSGS:
            if len(value) != 2 or type(value[1]) is not list:
                name = "MSGR" if op == wire.MSGR else "MSGS"
                raise ProtocolError("bad_shape", f"{name} must be [{op}, messages]")
            batch = value[1]
            n = wire.held(batch) if op == wire.MSGR else len(batch)
            if not link.can_receive:
                link.drops += n
                self.counters.drop("wrong_direction", n)
                return 0
            self.hooks.link_msgs(link, op, batch, n)
            return n
        if op == wire.HEARTBEAT:
            return 0
        if op == wire.ADVERT:
            # counted for its entries against the read budget: a pass takes a bounded
            # amount of interest work however the peer cut its frames
            return self._on_advert(link, value)
        elif op == wire.BYE:
            reason = (
                value[1].get("reason", "") if len(value) > 1 and isinstance(value[1], dict) else ""
            )
            said = f"peer said goodbye ({reason})" if reason else "peer said goodbye"
            self.down(link, said, now, clean=True)
        elif op == wire.LINK_REFUSE:
            info = wire.check_link_map(value)
            self.down(link, f"peer dropped the link: {info.get('reason', '?')}", now)
        else:
            held = self.hooks.link_frame(link, value)
            if held is None:
                raise ProtocolError("unexpected", f"link frame type {op} on an established link")
            return held
        return 0

    def _on_advert(self, link: Link, value: list[Any]) -> int:
        n = advert_in(self.engine, link.engine_id, value)
        self.hooks.advert_in(link)
        return n

    # -- up and down ------------------------------------------------------------------------

    def up(self, link: Link, now: float) -> None:
        link.went_up(now)
        self.counters.links_up += 1
        self.by_engine_id[link.engine_id] = link
        if link.kind is not LinkKind.DISCOVERED:
            # a configured or inbound link to the same peer makes a discovered one redundant
            for other in list(self.dialers.values()):
                if other.kind is LinkKind.DISCOVERED and other.peer == link.peer:
                    self.remove_discovered(other, now, "superseded by link " + link.name)
        self.engine.handle(
            LinkUp(
                link=link.engine_id,
                peer=link.peer,
                can_send=link.can_send,
                can_receive=link.can_receive,
                options=link.options,
            )
        )
        self.hooks.link_up(link, now)
        log.info(
            "link %s %s %s (incarnation %d) is up",
            link.name,
            "to" if link.dialer else "from",
            link.peer,
            link.peer_incarnation,
        )

    def down(self, link: Link, reason: str, now: float, *, clean: bool = False) -> None:
        """Take ``link`` down for ``reason``; ``clean``: the peer said goodbye."""
        was_up = link.state is LinkState.UP
        if was_up:
            self.counters.links_down += 1
            # sticky (durable-backed) interest stays routed toward the down link, whose
            # queue holds persistent messages until it returns (engine rule 6)
            self.engine.handle(LinkDown(link=link.engine_id, keep_sticky=True))
            self.by_engine_id.pop(link.engine_id, None)
            log.warning(
                "link %s %s %s is down: %s",
                link.name,
                "to" if link.dialer else "from",
                link.peer,
                reason,
            )
        link.last_error = reason
        if link.unheard:
            # sent after the peer's last sign of life: nothing on a plain link says
            # whether they arrived, so they are counted as what this death may have lost
            link.drops += link.unheard
            self.counters.drop("link_died", link.unheard)
            link.unheard = 0
        if link.outbox:
            n = queued(link.outbox)
            link.drops += n
            self.counters.drop("link_down", n)
            link.outbox = []
        if link.kind is LinkKind.DISCOVERED:
            # mDNS cannot tell a crash from a pause: the link's heartbeats decide; a new
            # announcement (a restarted node re-announces) makes a new link
            self.close_dialer(link)
            self.dialers.pop(link.name, None)
        elif link.dialer:
            self.close_dialer(link)
            link.went_down(reason, was_up, now)
            if link.state is LinkState.FAILED:
                log.error("link %s: giving up after %d attempts", link.name, link.attempts)
        else:
            self.accepted.pop(link.ident, None)
        self.hooks.link_down(link, reason, was_up, now, clean)

    def unique(
        self,
        name: str,
        newcomer: str,
        peer: str,
        instance: str,
        starts: int,
        repeats: Repeats,
        now: float,
    ) -> str | None:
        """A peer completing a handshake as ``newcomer`` (``describe``d) on the link the
        node's events call ``name``: why it is refused if another process holds its broker
        ID on a link that is up (counted, and said at most once a minute per link), else
        None after the links of its own former process (it restarted) are taken down."""
        found = rival(self.all(), peer, instance, starts)
        trouble = found.problem(newcomer)
        if trouble is None:
            for old in found.stale:
                self.down(old, f"{peer} restarted (start {starts})", now)
            return None
        self.refused(name, trouble)
        # a refused handshake, not a drop: no message is lost
        self.counters.handshakes_refused_duplicate_id += 1
        unsaid = repeats.due(newcomer, now)
        if unsaid is not None:
            more = f" ({unsaid} more refused since last said)" if unsaid else ""
            log.error("%s%s", trouble, more)
        return trouble

    def refused(self, link: str, reason: str) -> None:
        """A link handshake refused, here or by the peer: counted, and told to the node."""
        self.counters.handshakes_refused += 1
        self.hooks.handshake_refused(link, reason)

    def remove_discovered(self, link: Link, now: float, reason: str = "peer gone") -> None:
        """Close a link to a discovered peer for good (it left, or another link replaces
        it); the peer's announcement record is kept."""
        link.retired = True
        if link.state is LinkState.UP:
            self.send(link, wire.encode_link(wire.BYE, {"reason": reason}), now)
        self.down(link, reason, now)

    def close_dialer(self, link: Link) -> None:
        if link.socket is not None:
            self.sockets.remove(link.socket)
            link.socket.close(linger=0)
            link.socket = None

    # -- time -----------------------------------------------------------------------------

    def tick(self, now: float, dial: Callable[[Link, float], None]) -> None:
        """Heartbeats, silent links, handshake timeouts and redials (state rules 2-5)."""
        hb = wire.encode_link(wire.HEARTBEAT)
        for link in self.all():
            what = due(link, now)
            if what is None:
                continue
            if what is Due.HEARTBEAT:
                self.send(link, hb, now)
            elif what is Due.SILENT:
                if not self._input_waiting(link, now):
                    self.down(link, f"no heartbeat for {link.heartbeat_timeout:g} s", now)
            elif what is Due.HANDSHAKE_TIMEOUT:
                self.close_dialer(link)
                bad = link.bad_answer  # (it answered, but not as a zbroker node does)
                delay = link.wait(f"malformed answer: {bad}" if bad else _NO_ANSWER, now)
                if link.attempts & (link.attempts - 1) == 0:
                    # attempts 1, 2, 4, 8...: a peer that is not there is said at once, and
                    # a long outage does not flood the log
                    uri = link.config.uri if link.config is not None else "?"
                    said = f"a malformed answer from {uri}" if bad else f"no answer from {uri}"
                    log.warning(
                        "link %s: %s to the handshake (attempt %d; %s); next attempt in %.1f s",
                        link.name, said, link.attempts,
                        bad or "nothing listening there, or not a zbroker node", delay,
                    )  # fmt: skip
            elif what is Due.GIVE_UP:
                link.state = LinkState.FAILED
                log.error("link %s: giving up after %d attempts", link.name, link.attempts)
                if link.kind is LinkKind.DISCOVERED:
                    self.down(link, "unreachable", now)
            else:
                dial(link, now)

    def _input_waiting(self, link: Link, now: float) -> bool:
        """Frames that may be the silent ``link``'s wait unread: we are behind (a long
        pass), so its silence is ours, not its. A dialer's socket is its own; the shared
        ROUTER counts only while its last drain stopped on the budget (input left unread,
        not a lone frame of a client or of junk), and not past SILENT_GRACE."""
        if link.dialer:
            sock = link.socket
        elif self.control_behind and now - link.last_recv <= SILENT_GRACE * link.heartbeat_timeout:
            sock = self._control
        else:
            return False
        return sock is not None and bool(int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN)

    def goodbye(self, now: float) -> None:
        """Tell every peer we are leaving, so it withdraws our interest at once."""
        bye = wire.encode_link(wire.BYE, {"reason": "node stopping"})
        for link in self.all():
            if link.state is LinkState.UP:
                self.send(link, bye, now)

    def close(self) -> None:
        for link in self.dialers.values():
            if link.socket is not None:
                link.socket.close(linger=0)
                link.socket = None
