"""The link state machine (sans-IO): one :class:`Link` per inter-node link, either side,
with its deadlines, counters and the rules that move it between states.

Rules (the theory of operation; the code below is written to them, and
``tests/test_link_state.py`` checks each):

1. A *dialer* link is configured on this node (``[[link]]``, ``--peer``) or made for a
   discovered peer; it owns a DEALER connected to the other node's ROUTER. An *acceptor*
   link is the other end: it lives on our ROUTER under the dialer's routing id.
2. A dialer starts WAITING with its deadline now. At its deadline it dials: one attempt
   more, HANDSHAKING until ``heartbeat_timeout`` later.
3. HANDSHAKING ends UP on a valid WELCOME; on a REFUSE that allows retrying, on a
   handshake problem (wrong group, version, duplicate ID), or at the deadline, WAITING
   for :meth:`Link.backoff` (exponential, capped); on a REFUSE that says "do not retry",
   REFUSED for good.
4. UP sends a heartbeat when nothing went out for ``heartbeat_interval``; it goes down
   when nothing came in for ``heartbeat_timeout`` (unless frames wait unread: then the
   silence is ours), on BYE, or when the peer refuses the link.
5. A dialer that goes down from UP redials at once (deadline now); from anything else
   after its backoff. After ``reconnect_max_attempts`` dials without success (0: no
   limit) it is FAILED. A discovered dialer that goes down or fails is removed (the
   peer's next announcement makes a new one); an acceptor that goes down is removed.

States::

    dialer:   WAITING --dial--> HANDSHAKING --WELCOME--> UP --timeout/BYE--> WAITING
                                     \\--REFUSE/timeout--> WAITING (backoff) or REFUSED
              WAITING --max attempts--> FAILED
    acceptor: (LINK_HELLO accepted) UP --timeout/BYE/replaced--> gone

Nothing here touches a socket or a clock: callers pass ``now`` and act on what the
functions return (:class:`Due`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..const import LINK_BATCH_BYTES, LINK_FRAME_SLACK
from ..routing import LinkOptions

if TYPE_CHECKING:
    from ..config import LinkConfig

__all__ = ["Due", "Link", "LinkKind", "LinkState", "due", "link_key"]


class LinkKind(enum.Enum):
    STATIC = "static"  # dialled from this node's configuration (or --peer)
    ACCEPTED = "accepted"  # dialled by the peer
    DISCOVERED = "discovered"  # dialled because discovery found the peer


class LinkState(enum.Enum):
    WAITING = "waiting"
    HANDSHAKING = "handshaking"
    UP = "up"
    REFUSED = "refused"
    FAILED = "failed"


class Due(enum.Enum):
    """What a link needs from its owner at a tick (rule numbers in the module docstring)."""

    HEARTBEAT = "heartbeat"  # 4: send one
    SILENT = "silent"  # 4: take it down (unless input waits unread)
    HANDSHAKE_TIMEOUT = "handshake timeout"  # 3: close the dial, wait the backoff
    DIAL = "dial"  # 2
    GIVE_UP = "give up"  # 5: FAILED


@dataclass(eq=False, slots=True)
class Link:
    name: str
    kind: LinkKind
    duplex: bool
    options: LinkOptions
    heartbeat_interval: float
    heartbeat_timeout: float
    config: LinkConfig | None = None  # dialers only
    socket: Any = None  # dialers only: the DEALER (owned by the link table)
    ident: bytes = b""  # acceptors: the dialer's routing id on our ROUTER
    peer: str = ""
    peer_incarnation: int = 0
    peer_instance: str = ""  # the peer's process mark (its handshake's); "": not said
    peer_starts: int = 0  # the peer's starts on its data directory (handshake.starts_of)
    state: LinkState = LinkState.WAITING
    last_recv: float = 0.0
    last_sent: float = 0.0
    up_since: float = 0.0
    deadline: float = 0.0  # handshake deadline or next dial time
    attempts: int = 0
    last_error: str = ""
    bad_answer: str = ""  # a dial's malformed answer (it then times out: said so)
    retired: bool = False  # closed for good by this node (its peer stays known)
    outbox: list[list[Any]] = field(default_factory=list)
    msgs_in: int = 0
    msgs_out: int = 0
    #: MSGR messages sent since the last frame heard from the peer: if the link dies
    #: without a goodbye, these may be lost (counted then: ``dropped.link_died``)
    unheard: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    drops: int = 0
    ups: int = 0
    # what the peer accepts, stated in its handshake (set before the link is up): frames
    # we send it are cut to fit its limit, not ours
    peer_max_frame: int = 0
    frame_limit: int = 0  # the largest link frame it takes (its max_frame_bytes + slack)
    batch_bytes: int = 0  # payload bytes after which a frame to it is cut

    @classmethod
    def dialing(cls, cfg: LinkConfig, kind: LinkKind = LinkKind.STATIC, peer: str = "") -> Link:
        """A link this node dials, as ``cfg`` says (STATIC: configured; DISCOVERED)."""
        return cls(
            name=cfg.name,
            kind=kind,
            duplex=cfg.duplex,
            options=cfg.options,
            heartbeat_interval=cfg.heartbeat_interval,
            heartbeat_timeout=cfg.heartbeat_timeout,
            config=cfg,
            peer=peer,
        )

    @property
    def dialer(self) -> bool:
        return self.kind is not LinkKind.ACCEPTED

    @property
    def engine_id(self) -> str:
        """The link's ID in the routing engine: unique per node ('/' never is in a name)."""
        return self.name if self.dialer else f"{self.peer}/{self.name}"

    @property
    def source(self) -> str:
        """How logs and bad-input reports name the link."""
        return f"link {self.name} ({self.peer or self.engine_id})"

    @property
    def can_send(self) -> bool:
        """Messages may flow from us to the peer: always for the dialer (duplex or
        one-way), only when duplex for the acceptor."""
        return self.dialer or self.duplex

    @property
    def can_receive(self) -> bool:
        return self.duplex or not self.dialer

    def backoff(self) -> float:
        """Delay before the next dial attempt (exponential, capped)."""
        cfg = self.config
        assert cfg is not None
        delay = cfg.reconnect_initial_delay * cfg.reconnect_multiplier ** max(0, self.attempts - 1)
        return float(min(delay, cfg.reconnect_max_delay))

    def out_of_attempts(self) -> bool:
        cfg = self.config
        return bool(
            cfg and cfg.reconnect_max_attempts and self.attempts >= cfg.reconnect_max_attempts
        )

    # -- transitions (rules 2-5) ---------------------------------------------------------

    def dialling(self, now: float) -> None:
        """Rule 2: a dial went out; the handshake must finish by the deadline."""
        self.attempts += 1
        self.bad_answer = ""
        self.state = LinkState.HANDSHAKING
        self.deadline = now + self.heartbeat_timeout

    def wait(self, reason: str, now: float) -> float:
        """Rule 3: the dial failed; WAITING for the backoff, which is returned."""
        self.last_error = reason
        self.state = LinkState.WAITING
        delay = self.backoff()
        self.deadline = now + delay
        return delay

    def set_peer_frame_max(self, peer_max: int) -> None:
        """Frames to this peer are cut for its limit: what it accepts on a link (its
        max_frame_bytes plus LINK_FRAME_SLACK) and how many payload bytes one frame gathers."""
        self.peer_max_frame = peer_max
        self.frame_limit = peer_max + LINK_FRAME_SLACK
        self.batch_bytes = min(LINK_BATCH_BYTES, peer_max)

    def went_up(self, now: float) -> None:
        self.state = LinkState.UP
        self.up_since = self.last_recv = self.last_sent = now
        self.attempts = 0
        self.last_error = ""
        self.ups += 1

    def went_down(self, reason: str, was_up: bool, now: float) -> None:
        """Rule 5, for a dialer that stays (configured): redial now, after the backoff,
        or give up."""
        self.last_error = reason
        if self.out_of_attempts():
            self.state = LinkState.FAILED
        else:
            self.state = LinkState.WAITING
            self.deadline = now + (0.0 if was_up else self.backoff())

    def describe(self, now: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "peer": self.peer or None,
            "kind": self.kind.value,
            "direction": ("duplex" if self.duplex else "out")
            if self.dialer
            else ("duplex" if self.duplex else "in"),
            "state": self.state.value,
            "uri": self.config.uri if self.config else None,
            "uptime": round(now - self.up_since, 3) if self.state is LinkState.UP else 0.0,
            "msgs_in": self.msgs_in,
            "msgs_out": self.msgs_out,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "drops": self.drops,
            "peer_max_frame_bytes": self.peer_max_frame or None,
            "ttl": self.options.ttl,
            "last_error": self.last_error or None,
            "attempts": self.attempts,  # dials since the link was last up
        }


def due(link: Link, now: float) -> Due | None:
    """What ``link`` needs at ``now`` (rules 2-5), or None."""
    state = link.state
    if state is LinkState.UP:
        if now - link.last_recv > link.heartbeat_timeout:
            return Due.SILENT
        if now - link.last_sent >= link.heartbeat_interval:
            return Due.HEARTBEAT
    elif state is LinkState.HANDSHAKING:
        if now >= link.deadline:
            return Due.HANDSHAKE_TIMEOUT
    elif state is LinkState.WAITING and link.dialer and now >= link.deadline:
        return Due.GIVE_UP if link.out_of_attempts() else Due.DIAL
    return None


def link_key(link: Link) -> str:
    """A link's name in the store's link queues and positions, stable across restarts:
    peer, link name and which side dialled (A may dial B as "x" while B dials A as "x")."""
    return f"{link.peer}/{link.name}/{'dialed' if link.dialer else 'accepted'}"
