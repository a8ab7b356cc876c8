"""A subscription trie: patterns in, the set of matching entries out for a literal topic.

Modelled on nats-server's sublist: one trie level per segment, ``*`` and ``>`` children in
their own slots, and a bounded cache of results keyed by literal topic. A change evicts
only the cached topics the changed pattern matches (selective eviction), so a busy node
with stable subscriptions matches each hot topic once.

Values are any hashable items; the same item may be stored under several patterns and a
pattern may hold several items. :meth:`Sublist.match` returns a frozenset of items.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from .const import MATCH_CACHE_SIZE
from .topics import match as topic_match

__all__ = ["Sublist"]

T = TypeVar("T", bound=Hashable)


class _Level(Generic[T]):
    __slots__ = ("gt", "items", "literal", "star")

    def __init__(self) -> None:
        self.literal: dict[str, _Level[T]] = {}
        self.star: _Level[T] | None = None
        # items of patterns that end with '>' at this level
        self.gt: dict[T, int] = {}
        # items of patterns that end exactly at this level
        self.items: dict[T, int] = {}

    def empty(self) -> bool:
        return not (self.literal or self.star or self.gt or self.items)


class Sublist(Generic[T]):
    """Wildcard trie with a literal-topic match cache (``cache_size=0`` disables the cache).

    Items are reference-counted per pattern: inserting the same (pattern, item) twice
    needs two removals. Patterns must already be valid (see :mod:`zbroker.topics`).
    """

    def __init__(self, cache_size: int = MATCH_CACHE_SIZE) -> None:
        self._root: _Level[T] = _Level()
        self._cache: dict[str, frozenset[T]] = {}
        self._cache_size = cache_size
        self._count = 0
        self.cache_hits = 0
        self.cache_misses = 0

    def __len__(self) -> int:
        """Number of (pattern, item) insertions currently held."""
        return self._count

    def insert(self, pattern: str, item: T) -> bool:
        """Add ``item`` under ``pattern``; True if this (pattern, item) was new."""
        level = self._root
        segs = pattern.split(".")
        for seg in segs[:-1]:
            level = self._child(level, seg)
        last = segs[-1]
        if last == ">":
            bucket = level.gt
        else:
            bucket = self._child(level, last).items
        n = bucket.get(item, 0)
        bucket[item] = n + 1
        self._count += 1
        self._evict(pattern)
        return n == 0

    def remove(self, pattern: str, item: T) -> bool:
        """Remove one insertion of ``item`` under ``pattern``; True if it was the last one.

        Removing something not present is a no-op that returns False.
        """
        path: list[tuple[_Level[T], str]] = []
        level: _Level[T] | None = self._root
        segs = pattern.split(".")
        for seg in segs[:-1]:
            assert level is not None
            nxt = level.star if seg == "*" else level.literal.get(seg)
            if nxt is None:
                return False
            path.append((level, seg))
            level = nxt
        assert level is not None
        last = segs[-1]
        if last == ">":
            bucket = level.gt
        else:
            leaf = level.star if last == "*" else level.literal.get(last)
            if leaf is None:
                return False
            path.append((level, last))
            level = leaf
            bucket = leaf.items
        n = bucket.get(item)
        if n is None:
            return False
        self._count -= 1
        self._evict(pattern)
        if n > 1:
            bucket[item] = n - 1
            return False
        del bucket[item]
        # prune empty levels bottom-up so the trie does not keep ghosts of old patterns
        while path and level is not None and level.empty():
            parent, seg = path.pop()
            if seg == "*":
                parent.star = None
            else:
                del parent.literal[seg]
            level = parent
        return True

    def match(self, topic: str) -> frozenset[T]:
        """All items whose pattern matches literal ``topic`` (each item once)."""
        cached = self._cache.get(topic)
        if cached is not None:
            self.cache_hits += 1
            return cached
        self.cache_misses += 1
        out: set[T] = set()
        self._match(self._root, topic.split("."), 0, out)
        result = frozenset(out)
        if self._cache_size:
            if len(self._cache) >= self._cache_size:
                # drop the oldest entry (dicts keep insertion order): cheap and bounded
                del self._cache[next(iter(self._cache))]
            self._cache[topic] = result
        return result

    def patterns(self) -> Iterator[tuple[str, T]]:
        """Every (pattern, item) held, each once regardless of its reference count."""
        yield from self._walk(self._root, [])

    def clear_cache(self) -> None:
        self._cache.clear()

    # -- internals ---------------------------------------------------------------------

    @staticmethod
    def _child(level: _Level[T], seg: str) -> _Level[T]:
        if seg == "*":
            if level.star is None:
                level.star = _Level()
            return level.star
        nxt = level.literal.get(seg)
        if nxt is None:
            nxt = level.literal[seg] = _Level()
        return nxt

    def _evict(self, pattern: str) -> None:
        if not self._cache:
            return
        stale = [t for t in self._cache if topic_match(pattern, t)]
        for t in stale:
            del self._cache[t]

    def _match(self, level: _Level[T], segs: list[str], i: int, out: set[T]) -> None:
        if i == len(segs):
            out.update(level.items)
            return
        if level.gt:
            out.update(level.gt)
        nxt = level.literal.get(segs[i])
        if nxt is not None:
            self._match(nxt, segs, i + 1, out)
        if level.star is not None:
            self._match(level.star, segs, i + 1, out)

    def _walk(self, level: _Level[T], prefix: list[str]) -> Iterator[tuple[str, T]]:
        for item in level.items:
            yield ".".join(prefix), item
        for item in level.gt:
            yield ".".join([*prefix, ">"]), item
        for seg, child in level.literal.items():
            yield from self._walk(child, [*prefix, seg])
        if level.star is not None:
            yield from self._walk(level.star, [*prefix, "*"])
