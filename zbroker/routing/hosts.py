"""Topic-host routing: branches of the topic tree that publications reach through a host.

IBM MQ's publish/subscribe clusters offer *topic-host routing* beside direct routing: a
node that hosts a branch (``[[host]] pattern = "ORDERS.>"``, ``zbroker start
--host-topic PATTERN``) receives every publication of it and forwards it to the nodes with
subscribers, so that the other nodes need not know every subscriber. Rules (rule 8 of
:mod:`zbroker.routing.engine`):

* **Hosts are advertised like interest**: a host holds local interest under the key
  ``($ZB.HOST.<branch>, host)`` (:func:`host_key`; ``$ZB`` names are the node's, no client
  publishes there), which the path-vector rules 1-3 carry everywhere the branch's topics
  may cross (the link filters are checked against the branch), loop-free and withdrawn
  when the host goes down. Every node thus knows the live hosts of each branch, the
  distance and the next-hop link to each, and the path to it (:class:`HostTable`).
* **Interest goes only toward the hosts**: interest in a pattern that a branch with a live
  host covers is advertised only over the next-hop links toward the live hosts of the
  branches it overlaps (never toward ourselves), instead of everywhere. A node thus holds
  the interest of the nodes whose way to a host crosses it; a host holds all of it. A
  pattern wider than a branch that overlaps it adds its *hosted part* (the intersection),
  which goes the same way (:mod:`~zbroker.routing.hostward`), and the topics of a hosted
  branch are routed by interest inside hosted branches only (the router leaves the wider
  entries out of their plans): every target below is known through the ways.
* **Publications go to one host**: a node that is not a host sends a publication of a
  hosted topic to one live host — the nearest, ties broken by a stable hash of the
  publisher's ID (:func:`choose`), so one publisher's messages take one way and keep their
  order — in a copy whose targets are ``(MARK + host, *claimed)``. Every node on that way
  (the publisher included) delivers to its local subscribers and *claims* the targets it
  holds whose best path leaves the way (its path shares no node with the rest of the way
  to the host, nor with the message's path): it sends to them itself, and adds them to the
  claims the host copy carries. The host, or a relay that finds itself a host, serves
  every target of its table not on the path and not claimed. A relay whose named host is
  gone picks another live host; a copy for a host when none is known is routed directly.
* **Exactly once**: each target is claimed or served by exactly one node (claims travel
  with the copy, the host excludes them), so no subscriber is sent two copies. With one
  host, the ways of interest toward it form a tree (each node has one next hop toward the
  host), the way of a publication is one branch of it and every claimed target hangs off
  that branch: the copies of a message form a tree, each node sees one copy. The per-node
  dedupe of rule 5 remains the backstop while tables disagree.
* **Loop freedom**: every copy carries its path and is never sent to a node on it (rule
  5); the way to a host follows the path-vector next hops, whose paths are loop-free.

A publisher on a host, or subscribers only on the host, cost no extra hop: the host
serves directly, and a node whose only subscribers are on the host sends there anyway.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..const import RESERVED_PREFIX
from ..topics import match, patterns_overlap
from . import flood
from .events import Path
from .filters import pattern_covers

if TYPE_CHECKING:
    from .routes import Plan, Route, Router, Send

__all__ = [
    "HOST_PREFIX",
    "MARK",
    "HostTable",
    "branch_of",
    "choose",
    "filter_pattern",
    "host_key",
    "route",
]

#: the interest key pattern under which a host advertises a branch: prefix + branch
HOST_PREFIX = RESERVED_PREFIX + ".HOST."
#: patterns whose covered() answer is kept before the memo starts over
COVERED_LIMIT = 65_536
#: the first target of a copy on its way to a host: MARK + host ID (never a broker ID,
#: which starts with a letter or digit)
MARK = "^"

#: a host as one node sees it: (hops, next-hop link or None for ourselves, nodes of the
#: path to it, the host included)
HostRoute = tuple[int, str | None, frozenset[str]]


def host_key(branch: str) -> str:
    """The interest pattern a host of ``branch`` advertises."""
    return HOST_PREFIX + branch


def branch_of(pattern: str) -> str | None:
    """The branch of a host key pattern, None for ordinary interest."""
    return pattern[len(HOST_PREFIX) :] if pattern.startswith(HOST_PREFIX) else None


def filter_pattern(pattern: str) -> str:
    """The pattern a link filter judges an advertisement by: a host key by its branch."""
    return pattern[len(HOST_PREFIX) :] if pattern.startswith(HOST_PREFIX) else pattern


def choose(hosts: dict[str, HostRoute], publisher: str) -> str:
    """The host a publisher's messages go to: the nearest, ties by a stable hash of the
    publisher and host IDs (the same on every node and in every process)."""
    return min(hosts, key=lambda h: (hosts[h][0], zlib.crc32(f"{publisher}/{h}".encode()), h))


class HostTable:
    """The live hosts of every hosted branch, as this node's best entries say."""

    def __init__(self, broker_id: str) -> None:
        self.broker_id = broker_id
        self.local: set[str] = set()  # host key patterns of the branches we host
        self.branches: dict[str, dict[str, HostRoute]] = {}
        # covered() by pattern while the set of live branches stays the same (the router
        # asks it for every entry of a hosted topic's plan)
        self._covered: dict[str, bool] = {}

    def update(self, branch: str, host: str, best: tuple[str | None, Path] | None) -> bool:
        """Record the best entry of ``(host_key(branch), host)``; did the host's route
        change?"""
        hosts = self.branches.get(branch)
        old = hosts.get(host) if hosts else None
        new: HostRoute | None = None
        if best is not None:
            link, path = best
            new = (len(path), link, frozenset((*path, host)))
        if new == old:
            return False
        if new is None:
            assert hosts is not None
            del hosts[host]
            if not hosts:
                del self.branches[branch]
                self._covered.clear()
        else:
            if hosts is None:
                self._covered.clear()
            self.branches.setdefault(branch, {})[host] = new
        return True

    def for_topic(self, topic: str) -> dict[str, HostRoute] | None:
        """The live hosts of the hosted branches ``topic`` is in (None: not hosted)."""
        out: dict[str, HostRoute] | None = None
        for branch, hosts in self.branches.items():
            if match(branch, topic):
                if out is None:
                    out = {}
                out.update(hosts)
        return out

    def covered(self, pattern: str) -> bool:
        """Does a branch with a live host cover ``pattern``? (Its interest goes toward the
        hosts only.)"""
        hit = self._covered.get(pattern)
        if hit is None:
            if len(self._covered) >= COVERED_LIMIT:
                self._covered.clear()
            hit = self._covered[pattern] = any(pattern_covers(b, pattern) for b in self.branches)
        return hit

    def allowed(self, pattern: str) -> set[str] | None:
        """The links interest in ``pattern`` may be advertised over: None for all (no
        branch with a live host covers it), else the next hops toward the live hosts of
        every branch it overlaps (not ourselves: a host keeps the interest it receives)."""
        branches = self.branches
        if pattern.startswith(HOST_PREFIX) or not self.covered(pattern):
            return None  # (hosts themselves are advertised everywhere)
        links: set[str] = set()
        for branch, hosts in branches.items():
            if patterns_overlap(branch, pattern):
                links.update(h[1] for h in hosts.values() if h[1] is not None)
        return links

    def touching(self, branch: str, patterns: Iterable[str]) -> list[str]:
        """The patterns among ``patterns`` whose advertisement depends on ``branch``."""
        return [p for p in patterns if branch_of(p) is None and patterns_overlap(branch, p)]


def route(
    router: Router, plan: Plan, topic: str, path: Path, targets: tuple[str, ...] | None
) -> Route:
    """Rule 8 of the engine for a topic of a hosted branch (or a copy marked for a host):
    a copy from a host follows its targets; a publication, or a copy on its way to a
    host, is served here if we are a host (or none is known), else claims what leaves
    the way and goes on to one host."""
    if plan.flood or targets == flood.FLOOD_TARGETS:
        return flood.route(router, plan.local, topic, path)
    me = router.broker_id
    marked = targets is not None and bool(targets) and targets[0].startswith(MARK)
    if targets is not None and not marked:
        wanted = [o for o in targets if o != me and o in plan.next_hop]
        return router.deliver(plan, topic, path, wanted, assigned=True)
    claims = frozenset(targets[1:]) if targets is not None else frozenset()
    wanted = [o for o in plan.next_hop if o not in path and o not in claims]
    hosts = plan.hosts
    if not hosts or me in hosts:
        return router.deliver(plan, topic, path, wanted)
    named = targets[0][len(MARK) :] if targets is not None else None
    host = named if named in hosts else choose(hosts, path[0] if path else me)
    _hops, link_id, way = hosts[host]
    assert link_id is not None
    on_path = set(path)
    served = []
    for o in wanted:
        if plan.next_hop[o] != link_id:
            p = router.best_path(topic, o)
            if p is not None and on_path.isdisjoint(p) and way.isdisjoint(p):
                served.append(o)
    extra: tuple[Send, ...] = ()
    if router.may_send(router.links[link_id], topic, path, len(path) + 1):
        extra = ((link_id, (MARK + host, *sorted(claims.union(served))), 1),)
    return router.deliver(plan, topic, path, served, extra)
