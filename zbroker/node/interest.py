"""Local interest: which patterns this node wants, and on whose behalf.

Interest has *sources*: ``clients`` (subscribers on the XPUB), and what features add
(``retain``, ``durable:NAME``...). The routing engine hears a pattern's first source
(LocalSubscribe) and its last (LocalUnsubscribe); interest backed by a durable source is
*sticky* (it stays routed while links toward it are down), and interest whose every
source is a subscription with a selector (``select:TEXT``) carries those selectors, so a
change of either is said again.

Interest in an internal branch of ``$ZB`` (:func:`~zbroker.topics.is_internal`) is taken
only from the source that makes it (:data:`INTERNAL_SOURCES`): its key is what makes a
queue group's member, a durable's home or a shared durable's listener, so interest there
from anything else (a durable or selected subscription on such a pattern that got past
the client and subscription checks) is refused, never routed.

It also answers the pipeline's one per-message question about features: which sinks take
a message whose local patterns are ``patterns`` (the engine's cached frozenset per
topic). The answer is resolved once per distinct pattern set and cached until interest
changes, so a message costs one dict lookup, and nothing while no sink has interest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..routing import LocalSubscribe, LocalUnsubscribe, RoutingEngine
from ..routing.selection import local_selectors
from ..topics import is_internal
from .events import InterestAdded, InterestRemoved, NodeEvent

if TYPE_CHECKING:
    from .feature import Feature

__all__ = ["LocalInterest"]

log = logging.getLogger("zbroker.node")

#: sources whose interest stays routed while links toward it are down
STICKY_SOURCE = "durable"
#: internal branch -> the sources that may hold interest in it (a name, or a prefix
#: ending in ':'): the queue feature's group keys, the durables feature's home keys and
#: its shared durables' topics (topic hosts are the engine's own, never local interest)
INTERNAL_SOURCES: dict[str, tuple[str, ...]] = {
    "$ZB.Q.": ("queue",),
    "$ZB.DURABLE.": ("durable-home:",),
    "$ZB.SD.": ("sdr", "sdr:"),
    "$ZB.HOST.": (),
}


class LocalInterest:
    def __init__(
        self, engine: RoutingEngine, emit: Callable[[NodeEvent], None] | None = None
    ) -> None:
        self._engine = engine
        self._emit = emit  # a pattern's first source and its last are node events
        self._sources: dict[str, set[str]] = {}  # pattern -> sources
        self._sink_owner: dict[str, Feature] = {}  # source name -> its sink
        self._sinks: dict[frozenset[str], tuple[Feature, ...]] = {}
        self._sink_refs = 0  # (pattern, source) pairs whose source has a sink
        #: some sink has interest: the pipeline looks sinks up only then
        self.has_sinks = False
        #: moves at every change of any pattern's sources (what the relay's shortcut
        #: decided for a head is decided again then: the engine hears only some changes)
        self.version = 0

    def register_sink(self, feature: Feature) -> None:
        for name in feature.sink_sources:
            self._sink_owner[name] = feature

    def add(self, pattern: str, source: str) -> None:
        if is_internal(pattern) and not _owns(source, pattern):
            log.warning("interest in internal %r from %r refused (not its maker)", pattern, source)
            return
        sources = self._sources.setdefault(pattern, set())
        was = _said(sources)
        first = not sources
        if source not in sources:
            sources.add(source)
            self._counted(source, 1)
            self.version += 1
        now = _said(sources)
        if first or now != was:
            self._engine.handle(LocalSubscribe(pattern=pattern, sticky=now[0], selectors=now[1]))
        if first and self._emit is not None:
            self._emit(InterestAdded(pattern=pattern, source=source))

    def drop(self, pattern: str, source: str) -> None:
        sources = self._sources.get(pattern)
        if sources is None or source not in sources:
            return
        was = _said(sources)
        sources.discard(source)
        self._counted(source, -1)
        self.version += 1
        if not sources:
            del self._sources[pattern]
            self._engine.handle(LocalUnsubscribe(pattern=pattern))
            if self._emit is not None:
                self._emit(InterestRemoved(pattern=pattern, source=source))
        elif (now := _said(sources)) != was:
            self._engine.handle(LocalSubscribe(pattern=pattern, sticky=now[0], selectors=now[1]))

    def sinks_for(self, patterns: frozenset[str]) -> tuple[Feature, ...]:
        """The features whose sinks take a message matching ``patterns`` (cached)."""
        hit = self._sinks.get(patterns)
        if hit is not None:
            return hit
        owners: list[Feature] = []
        for pattern in patterns:
            for source in self._sources.get(pattern, ()):
                f = self._sink_owner.get(source.split(":", 1)[0])
                if f is not None and f not in owners:
                    owners.append(f)
        result = tuple(owners)
        if len(self._sinks) >= 4096:
            self._sinks.clear()
        self._sinks[patterns] = result
        return result

    def _counted(self, source: str, delta: int) -> None:
        """A source came or went: the sink cache changes only if it has a sink."""
        if source.split(":", 1)[0] in self._sink_owner:
            self._sink_refs += delta
            self.has_sinks = self._sink_refs > 0
            self._sinks.clear()


def _owns(source: str, pattern: str) -> bool:
    """May ``source`` hold interest in ``pattern`` (internal)?"""
    for prefix, owners in INTERNAL_SOURCES.items():
        if pattern.startswith(prefix):
            return any(source == o or (o.endswith(":") and source.startswith(o)) for o in owners)
    return False


def _sticky(sources: set[str]) -> bool:
    """Is local interest with these sources backed by a durable subscription?"""
    return any(s.startswith(STICKY_SOURCE + ":") for s in sources)


def _said(sources: set[str]) -> tuple[bool, frozenset[str] | None]:
    """What the engine is told of local interest with these sources: sticky, and the
    selectors behind it (None: some source wants every message)."""
    return _sticky(sources), local_selectors(sources)
