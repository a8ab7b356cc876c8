"""Typed node events: what happened in a pass, for features that observe the node.

The kernel and features ``emit`` them; the kernel hands the pass's events, in order, to
every feature's ``on_events`` once per pass (the "events" phase). Link state changes that
other frames of the same link depend on (store-and-forward must resume before the link's
next frame) are not events but synchronous hooks (``Feature.link_up``/``link_down``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AuthRefused",
    "DurableAttached",
    "DurableDeleted",
    "DurableDetached",
    "DurableOpened",
    "DurableOverflow",
    "HandshakeRefused",
    "InterestAdded",
    "InterestRemoved",
    "LinkWentDown",
    "LinkWentUp",
    "NodeEvent",
    "PeerFound",
    "PeerLost",
    "PermissionRefused",
    "QueueJoined",
    "QueueLeft",
    "SlowSubscriber",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEvent:
    """Base of every node event."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkWentUp(NodeEvent):
    link: str  # its name
    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkWentDown(NodeEvent):
    link: str
    peer: str
    reason: str
    #: the peer said goodbye (BYE): nothing it was sent was lost in a dead connection
    clean: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerFound(NodeEvent):
    peer: str
    endpoint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerLost(NodeEvent):
    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableAttached(NodeEvent):
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableDetached(NodeEvent):
    name: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableOpened(NodeEvent):
    """A durable subscription was created (its first open)."""

    name: str
    pattern: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableDeleted(NodeEvent):
    name: str
    messages: int  # what its queue still held


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableOverflow(NodeEvent):
    """A durable's bounds dropped (drop-oldest) or refused (reject-new) messages."""

    name: str
    policy: str
    messages: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InterestAdded(NodeEvent):
    """The first local source of ``pattern`` (a subscriber, a durable, a retain rule)."""

    pattern: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InterestRemoved(NodeEvent):
    """The last local source of ``pattern`` is gone."""

    pattern: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowSubscriber(NodeEvent):
    """A subscriber reported messages its full queue lost (GAPS)."""

    patterns: tuple[str, ...]
    missed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeRefused(NodeEvent):
    """A link handshake was refused, by this node or by the peer."""

    link: str  # the link's name, or how the refused sender is known
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthRefused(NodeEvent):
    """A connection's authentication failed (security on: an unknown CURVE key)."""

    address: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionRefused(NodeEvent):
    """Security on: an authenticated sender asked for what its permissions do not allow."""

    user: str  # the key's user id ("client:alice", "node:b"), "" if unidentified
    operation: str  # "publish to", "subscribe to", "link as", "send on link"
    subject: str  # the topic, pattern or link


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueJoined(NodeEvent):
    """A consumer joined queue group ``group`` on ``pattern`` here."""

    group: str
    pattern: str
    members: int  # members of the group on this node now


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueLeft(NodeEvent):
    """A consumer of queue group ``group`` here left (or its connection went away)."""

    group: str
    pattern: str
    members: int  # members left on this node (0: the node's interest in it goes)
