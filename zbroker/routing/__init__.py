"""The sans-IO routing core: events in, actions out. Nothing here touches a socket, a clock
or a thread (a test guards that), so the same engine runs inside a node and inside the
network simulator."""

from __future__ import annotations

from .dedupe import DedupeWindow
from .engine import RoutingEngine
from .events import (
    DEFAULT_TTL,
    Action,
    AdvertIn,
    Event,
    LinkDown,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    SendAdvert,
)

__all__ = [
    "DEFAULT_TTL",
    "Action",
    "AdvertIn",
    "DedupeWindow",
    "Event",
    "LinkDown",
    "LinkOptions",
    "LinkUp",
    "LocalSubscribe",
    "LocalUnsubscribe",
    "RoutingEngine",
    "SendAdvert",
]
