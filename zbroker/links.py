"""Link state: one object per inter-node link, either side, with its deadlines and counters.

A *dialer* link is configured on this node (``[[link]]`` or ``--peer``): it owns a DEALER
connected to the other node's well-known ROUTER, handshakes, heartbeats, and redials with
exponential backoff when the link fails. An *acceptor* link is the other end: it lives on
the node's ROUTER under the dialer's routing id (``broker_id/link_name``).

States::

    dialer:   WAITING --dial--> HANDSHAKING --WELCOME--> UP --timeout/BYE--> WAITING
                                     \\--REFUSE/timeout--> WAITING (backoff) or REFUSED
    acceptor: (LINK_HELLO accepted) UP --timeout/BYE/replaced--> gone
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import zmq

from .config import LinkConfig
from .routing import LinkOptions

__all__ = ["Link", "LinkKind", "LinkState"]


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


@dataclass(eq=False, slots=True)
class Link:
    name: str
    kind: LinkKind
    duplex: bool
    options: LinkOptions
    heartbeat_interval: float
    heartbeat_timeout: float
    config: LinkConfig | None = None  # dialers only
    socket: zmq.Socket[bytes] | None = None  # dialers only
    ident: bytes = b""  # acceptors: the dialer's routing id on our ROUTER
    peer: str = ""
    peer_incarnation: int = 0
    state: LinkState = LinkState.WAITING
    last_recv: float = 0.0
    last_sent: float = 0.0
    up_since: float = 0.0
    deadline: float = 0.0  # handshake deadline or next dial time
    attempts: int = 0
    last_error: str = ""
    outbox: list[list[Any]] = field(default_factory=list)
    msgs_in: int = 0
    msgs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    drops: int = 0
    ups: int = 0
    # what the peer accepts, stated in its handshake (set before the link is up): frames
    # we send it are cut to fit its limit, not ours
    peer_max_frame: int = 0
    frame_limit: int = 0  # the largest link frame it takes (its max_frame_bytes + slack)
    batch_bytes: int = 0  # payload bytes after which a frame to it is cut

    @property
    def dialer(self) -> bool:
        return self.kind is not LinkKind.ACCEPTED

    @property
    def engine_id(self) -> str:
        """The link's ID in the routing engine: unique per node ('/' never is in a name)."""
        return self.name if self.dialer else f"{self.peer}/{self.name}"

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
