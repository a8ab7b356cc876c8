"""The records of the network simulator (:mod:`zbroker.sim`): a delivery, a link, and
the statistics of a run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .routing import LinkOptions

__all__ = ["Delivery", "MsgId", "SimLink", "SimStats"]

MsgId = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class Delivery:
    node: str
    subscriber: int
    pattern: str
    topic: str
    msg_id: MsgId
    hops: int
    path: tuple[str, ...]


@dataclass(slots=True)
class SimLink:
    name: str
    dialer: str
    acceptor: str
    duplex: bool
    options: LinkOptions
    up: bool = True
    # incremented each time the link comes up: frames of an earlier session that are still
    # in flight are discarded on arrival, as a closed TCP connection discards them
    epoch: int = 0
    # virtual time at which the last frame in each direction arrives (FIFO)
    last_arrival: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class SimStats:
    advert_frames: int = 0
    message_frames: int = 0
    duplicates_dropped: int = 0
    loops_dropped: int = 0
    last_advert_at: float = 0.0
    #: events the event loop processed (frames arriving, flushes), over every run()
    events: int = 0
    #: the longest chain of advertisement frames, each sent because of the one before it
    #: (a node's flush after adverts of depth k sends depth k + 1): the rounds of interest
    #: propagation; reset it to measure one phase
    advert_rounds: int = 0
    # (msg_id, link name, direction "A>B") -> frames
    crossings: Counter[tuple[MsgId, str, str]] = field(default_factory=Counter)

    def advert(self, depth: int) -> None:
        """An advertisement frame of ``depth`` (its round) is sent."""
        self.advert_frames += 1
        if depth > self.advert_rounds:
            self.advert_rounds = depth
