"""Typed node events: what happened in a pass, for features that observe the node.

The kernel and features ``emit`` them; the kernel hands the pass's events, in order, to
every feature's ``on_events`` once per pass (the "events" phase). Link state changes that
other frames of the same link depend on (store-and-forward must resume before the link's
next frame) are not events but synchronous hooks (``Feature.link_up``/``link_down``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DurableAttached",
    "DurableDetached",
    "LinkWentDown",
    "LinkWentUp",
    "NodeEvent",
    "PeerFound",
    "PeerLost",
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
