"""A subscription trie: patterns in, the set of matching entries out for a literal topic.

Modelled on nats-server's sublist: one trie level per segment, ``*`` and ``>`` children in
their own slots, and a bounded cache of results keyed by literal topic. A change evicts
only the cached topics the changed pattern matches (selective eviction), so a busy node
with stable subscriptions matches each hot topic once. The cached topics are indexed by
segment (:class:`TopicIndex`), so finding them follows the pattern's literal prefix and
costs what the matching topics cost, not a scan of the whole cache: a client that
subscribes 50,000 patterns against a warm cache does not stall the node's loop.

Values are any hashable items; the same item may be stored under several patterns and a
pattern may hold several items. :meth:`Sublist.match` returns a frozenset of items.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from .const import INTERNAL_BRANCHES, MATCH_CACHE_SIZE, RESERVED_PREFIX

__all__ = ["Sublist", "TopicIndex", "TopicTrie"]

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


#: the key under which a trie node holds the topic ending there (no segment is empty, so it
#: never clashes with a child)
_END = ""


class TopicTrie:
    """Literal topics as a trie of segments, to find those a pattern matches by walking
    the pattern: its literal segments pick one child, ``*`` every child, ``>`` the whole
    subtree below (one segment at least)."""

    __slots__ = ("_root", "count")

    def __init__(self) -> None:
        self._root: dict[str, Any] = {}  # segment -> child node; _END -> the topic
        self.count = 0

    def add(self, topic: str) -> None:
        node = self._root
        for seg in topic.split("."):
            nxt = node.get(seg)
            if nxt is None:
                nxt = node[seg] = {}
            node = nxt
        if _END not in node:
            node[_END] = topic
            self.count += 1

    def discard(self, topic: str) -> None:
        trail: list[tuple[dict[str, Any], str]] = []
        node = self._root
        for seg in topic.split("."):
            nxt = node.get(seg)
            if nxt is None:
                return
            trail.append((node, seg))
            node = nxt
        if node.pop(_END, None) is None:
            return
        self.count -= 1
        while trail and not node:  # prune the nodes the topic leaves empty
            parent, seg = trail.pop()
            del parent[seg]
            node = parent

    def match(self, pattern: str) -> list[str]:
        """Every topic ``pattern`` matches (``*`` one segment, ``>`` one or more)."""
        return list(self.iter_match(pattern))

    def any_match(self, pattern: str) -> bool:
        return next(self.iter_match(pattern), None) is not None

    def iter_match(self, pattern: str) -> Iterator[str]:
        stack: list[tuple[dict[str, Any], int]] = [(self._root, 0)]
        segs = pattern.split(".")
        while stack:
            node, i = stack.pop()
            if i == len(segs):
                if _END in node:
                    yield node[_END]
                continue
            seg = segs[i]
            if seg == ">":
                below = [c for k, c in node.items() if k]
                while below:
                    n = below.pop()
                    for k, c in n.items():
                        if k:
                            below.append(c)
                        else:
                            yield c
            elif seg == "*":
                stack.extend((c, i + 1) for k, c in node.items() if k)
            else:
                child = node.get(seg)
                if child is not None:
                    stack.append((child, i + 1))


class TopicIndex:
    """The topics of a cache (a dict keyed by literal topic) in a :class:`TopicTrie`, so
    match caches (here, and the router's plan cache) evict selectively: the topics a
    pattern matches are found by walking the pattern, not by scanning the cache.

    Lazy, so that a cache miss on a message's path pays one list append and no more:
    :meth:`note` queues a topic the cache gained; :meth:`evict` first indexes what was
    queued (and is still cached). Topics the cache drops on its own (its size limit)
    stay in the trie until an eviction walks over them or the trie is rebuilt; a trie
    nobody asks for is dropped and rebuilt from the cache when next needed.
    """

    __slots__ = ("_cache", "_pending", "_trie", "_valid")

    def __init__(self, cache: Mapping[str, object]) -> None:
        self._cache = cache  # never rebound by its owner
        self._trie = TopicTrie()  # (some of its topics may have left the cache since)
        self._pending: list[str] = []
        self._valid = True  # False: the trie must be rebuilt from the cache

    def note(self, topic: str) -> None:
        """The cache gained ``topic`` (on the message path: O(1))."""
        if self._valid:
            pending = self._pending
            pending.append(topic)
            if len(pending) > len(self._cache) + 64:
                # many misses and no eviction: rebuilding later costs less than keeping up
                self.clear(valid=False)

    def clear(self, *, valid: bool = True) -> None:
        """Forget every topic (``valid``: the cache is empty too)."""
        self._trie = TopicTrie()
        self._pending.clear()
        self._valid = valid

    def evict(self, pattern: str) -> list[str]:
        """Take out of the index every topic ``pattern`` matches and return them: the
        caller drops those still in its cache."""
        self._sync()
        out = self._trie.match(pattern)
        for topic in out:
            self._trie.discard(topic)
        return out

    def _sync(self) -> None:
        """Index what the cache gained since the last eviction."""
        cache = self._cache
        trie = self._trie
        if self._valid and trie.count <= 2 * len(cache) + 64:
            pending = self._pending
            if pending:
                for topic in pending:
                    if topic in cache:  # else dropped by the cache's size limit since
                        trie.add(topic)
                pending.clear()
            return
        # dropped, or holding too many topics the cache has dropped since: rebuild
        self.clear()
        trie = self._trie  # (a new one)
        for topic in cache:
            trie.add(topic)


class Sublist(Generic[T]):
    """Wildcard trie with a literal-topic match cache (``cache_size=0`` disables the cache).

    Items are reference-counted per pattern: inserting the same (pattern, item) twice
    needs two removals. Patterns must already be valid (see :mod:`zbroker.topics`).
    """

    def __init__(self, cache_size: int = MATCH_CACHE_SIZE) -> None:
        self._root: _Level[T] = _Level()
        self._cache: dict[str, frozenset[T]] = {}
        self._cached = TopicIndex(self._cache)
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
        segs = topic.split(".")
        if segs[0] == RESERVED_PREFIX:
            # reserved topics match only patterns that name them: no leading wildcard
            # (topics.match has the same rule)
            nxt = self._root.literal.get(RESERVED_PREFIX)
            if nxt is not None and len(segs) > 1 and segs[1] in INTERNAL_BRANCHES:
                # nor, in the nodes' internal branches, a wildcard in the second segment
                nxt = nxt.literal.get(segs[1])
                if nxt is not None:
                    self._match(nxt, segs, 2, out)
            elif nxt is not None:
                self._match(nxt, segs, 1, out)
        else:
            self._match(self._root, segs, 0, out)
        result = frozenset(out)
        if self._cache_size:
            cache = self._cache
            if len(cache) >= self._cache_size:
                # drop the oldest entry (dicts keep insertion order): cheap and bounded
                del cache[next(iter(cache))]
            cache[topic] = result
            self._cached.note(topic)
        return result

    def patterns(self) -> Iterator[tuple[str, T]]:
        """Every (pattern, item) held, each once regardless of its reference count."""
        yield from self._walk(self._root, [])

    def clear_cache(self) -> None:
        self._cache.clear()
        self._cached.clear()

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
        cache = self._cache
        if not cache:
            return
        if pattern == ">":
            self.clear_cache()  # it matches every topic
            return
        # only the cached topics the pattern matches, found through the index
        for t in self._cached.evict(pattern):
            cache.pop(t, None)

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
