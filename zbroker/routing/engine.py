"""The routing engine of one node.

Theory of operation
-------------------
The engine holds a node's interest: the patterns its local clients subscribe to. It is fed
events (a pattern gained or lost its last local subscriber) and answers questions about
messages (which local patterns does topic ``t`` reach?). It never performs I/O; the node
(:mod:`zbroker.node`) turns its answers into socket sends.

Rules
-----
1. Local interest is a set: the delivery socket (XPUB) reports a pattern's first subscriber
   and its last unsubscribe, so the engine sees each pattern appear once and vanish once.
2. A message is delivered once per matching local pattern; the delivery frame carries the
   pattern, and each client dispatches it to its own subscriptions on that pattern.

Control-plane changes go through :meth:`RoutingEngine.handle`, which returns the actions the
node must carry out. The data plane (one call per message) is :meth:`RoutingEngine.local_matches`:
a pure lookup with no per-message allocation beyond the cached result.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sublist import Sublist

__all__ = ["Action", "Event", "LocalSubscribe", "LocalUnsubscribe", "RoutingEngine"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSubscribe:
    """A pattern gained its first local subscriber."""

    pattern: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalUnsubscribe:
    """A pattern lost its last local subscriber."""

    pattern: str


Event = LocalSubscribe | LocalUnsubscribe


@dataclass(frozen=True, slots=True, kw_only=True)
class InterestChanged:
    """Local interest changed; ``added`` tells which way (informational for the node)."""

    pattern: str
    added: bool


Action = InterestChanged


class RoutingEngine:
    """Interest and routing decisions for one node (sans-IO)."""

    def __init__(self, broker_id: str, *, cache_size: int | None = None) -> None:
        self.broker_id = broker_id
        self._local: Sublist[str] = Sublist() if cache_size is None else Sublist(cache_size)
        self._local_patterns: set[str] = set()

    @property
    def local_patterns(self) -> frozenset[str]:
        return frozenset(self._local_patterns)

    def handle(self, event: Event) -> list[Action]:
        """Apply a control-plane event; return what the node must do about it."""
        if isinstance(event, LocalSubscribe):
            if event.pattern in self._local_patterns:
                return []
            self._local_patterns.add(event.pattern)
            self._local.insert(event.pattern, event.pattern)
            return [InterestChanged(pattern=event.pattern, added=True)]
        if isinstance(event, LocalUnsubscribe):
            if event.pattern not in self._local_patterns:
                return []
            self._local_patterns.discard(event.pattern)
            self._local.remove(event.pattern, event.pattern)
            return [InterestChanged(pattern=event.pattern, added=False)]
        raise TypeError(f"unknown event {event!r}")

    def local_matches(self, topic: str) -> frozenset[str]:
        """The local patterns that ``topic`` (valid, literal) reaches."""
        return self._local.match(topic)
