"""Local branches: branches of the topic tree whose messages never leave this node.

IBM MQ's clusters tell *clustered* branches from *local* ones; here every branch is
routed across the network unless the node names it local (``[routing] local``, ``zbroker
start --local PATTERN``). For a local branch ``L`` the engine:

* never advertises an interest entry whose pattern ``L`` covers (every topic of it is in
  the branch), whoever's it is, over any link — configured or discovered, whatever the
  link's filters say (it is checked before them, at the one place rule 3 queues an
  entry);
* never sends a message whose topic ``L`` matches over any link (the plan of such a topic
  has no next hop and no static push: zero cost per message, it is cached per topic).

Interest in a wider pattern (``>`` beside ``CACHE.>``) is still advertised, for its other
topics, and a message of the branch that arrives from another node is delivered here but
goes no further, whatever its copy's marks say (a flood copy, or one on its way to a
host: the router answers a local branch's plan before it reads them). Nothing a node
already does is changed for other topics, so the rules of the engine (exactly-once by
the tree and dedupe, loop-free paths) hold unchanged: a local branch only removes edges
from the trees of its topics.
"""

from __future__ import annotations

from ..topics import match
from .filters import pattern_covers

__all__ = ["KeptTopics", "covers", "holds"]


def covers(branches: tuple[str, ...], pattern: str) -> bool:
    """Is every topic of ``pattern`` in a local branch? (Its interest is never advertised.)"""
    return any(pattern_covers(b, pattern) for b in branches)


def holds(branches: tuple[str, ...], topic: str) -> bool:
    """Is ``topic`` in a local branch? (It is never sent over a link.)"""
    return any(match(b, topic) for b in branches)


class KeptTopics:
    """:func:`holds` for a node's local branches (fixed for its life), cached per topic:
    asked per message by queue groups, which route apart from the engine's plans."""

    __slots__ = ("_branches", "_cache")

    def __init__(self, branches: tuple[str, ...]) -> None:
        self._branches = branches
        self._cache: dict[str, bool] = {}

    def __call__(self, topic: str) -> bool:
        if not self._branches:
            return False  # (most nodes: no lookup at all)
        hit = self._cache.get(topic)
        if hit is None:
            if len(self._cache) >= 4096:
                self._cache.clear()
            hit = self._cache[topic] = holds(self._branches, topic)
        return hit
