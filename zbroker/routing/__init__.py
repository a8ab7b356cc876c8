"""The sans-IO routing core: events in, actions out. Nothing here touches a socket, a clock
or a thread (a test guards that), so the same engine runs inside a node and inside the
network simulator."""

from __future__ import annotations

from .engine import Action, Event, LocalSubscribe, LocalUnsubscribe, RoutingEngine

__all__ = ["Action", "Event", "LocalSubscribe", "LocalUnsubscribe", "RoutingEngine"]
