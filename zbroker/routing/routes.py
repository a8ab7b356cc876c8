"""Rules 4 and 5 of :mod:`zbroker.routing.engine`: where a message goes from here, with
the two caches that make it cheap on every message's path.

A *plan* is everything about one literal topic that does not depend on a message's path:
the local patterns it reaches, the next-hop link toward each origin that wants it, and the
links whose static patterns match. A *route* is the answer for one (topic, path, targets):
a relay sees the same few keys again and again. A change of the best entry of a key
evicts only the plans of the topics its pattern matches, with their routes
(:meth:`Router.evict`, through a :class:`~zbroker.sublist.TopicIndex`); a link coming or
going clears both caches (:meth:`Router.invalidate`), and so does reaching the size limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..sublist import TopicIndex
from . import hosts as hosting
from .branches import holds
from .detours import crossings, detour
from .events import Key, Path
from .flood import FLOOD
from .loops import path_holds, ttl_spent
from .meets import Chosen, untangle
from .selection import Conditions, Selective, conditions
from .table import EngineLink, InterestTable

__all__ = ["PLAN_LIMIT", "Plan", "Route", "Router", "Send"]

#: plans (and, separately, routes) cached before the cache starts over
PLAN_LIMIT = 4096

Send = tuple[str, tuple[str, ...] | None, int]  # (link id, targets or None, copies)
Route = tuple[frozenset[str], list[Send]]  # (local patterns, sends)


class Plan:
    """Everything about one literal topic that does not depend on a message's path."""

    __slots__ = (
        "cond",
        "counts",
        "flood",
        "hosts",
        "kept",
        "local",
        "moved",
        "next_hop",
        "routes",
        "static",
    )

    def __init__(
        self,
        local: frozenset[str],
        next_hop: dict[str, str],
        counts: dict[str, dict[str, int]],
        static: tuple[str, ...],
    ) -> None:
        self.local = local
        self.next_hop = next_hop  # origin -> link id of its best entry
        self.counts = counts  # link id -> origin -> matching keys (for conduit off)
        self.static = static  # link ids whose static patterns match
        self.cond: Conditions = {}  # selected origins and their selectors (rule 7)
        self.hosts: dict[str, hosting.HostRoute] | None = None  # a hosted topic (rule 8)
        self.flood = False  # a topic of a flooded branch (flood.py)
        self.kept = False  # a topic of a local branch: never leaves this node (branches.py)
        #: origins moved off their best entry's link (meets.py) -> that link: where they go
        #: when a copy's path or ttl keeps it from the link they were moved to
        self.moved: dict[str, str] | None = None
        # the keys of the cached routes computed from this plan: evicted with it
        self.routes: list[tuple[str, Path, tuple[str, ...] | None]] = []


class Router:
    """The data plane of the engine: routes over an :class:`InterestTable`."""

    def __init__(self, table: InterestTable, *, plan_limit: int = PLAN_LIMIT) -> None:
        # the table's containers as attributes of the router (the table never rebinds
        # them): route() and its helpers read them with one attribute lookup, as before
        self.broker_id = table.broker_id
        self.links = table.links
        self._best = table.best
        self._local = table.local
        self._remote = table.remote
        self._table = table  # (its local branches)
        self._plans: dict[str, Plan] = {}
        self._planned = TopicIndex(self._plans)
        # route() results by (topic, path, targets)
        self._routes: dict[tuple[str, Path, tuple[str, ...] | None], Route] = {}
        self._plan_limit = plan_limit

    def local_matches(self, topic: str) -> frozenset[str]:
        """The local patterns that ``topic`` (valid, literal) reaches."""
        return self._local.match(topic)

    def _plan(self, topic: str) -> Plan:
        plan = self._plans.get(topic)
        if plan is not None:
            return plan
        branches = self._table.local_branches
        if branches and holds(branches, topic):
            plan = Plan(self._local.match(topic), {}, {}, ())  # never leaves this node
            plan.kept = True
        else:
            plan = self._build(topic)
        if len(self._plans) >= self._plan_limit:
            self.invalidate()
        self._plans[topic] = plan
        self._planned.note(topic)
        return plan

    def _build(self, topic: str) -> Plan:
        ranks: dict[str, tuple[int, str, str]] = {}
        chosen: Chosen = {}  # origin -> (first hop, path) of its best entry
        counts: dict[str, dict[str, int]] = {}
        selected: dict[str, set[str]] = {}  # origin -> selectors of its entries (rule 7)
        unconditional: set[str] = set()  # origins with an entry that wants everything
        hosts = self._table.hosts
        hosted = hosts.for_topic(topic) if hosts.branches else None
        keys: Iterable[Key] = self._remote.match(topic)
        if hosted is not None:
            # rule 8: a hosted topic is routed by interest inside hosted branches, which
            # went toward the hosts (wider interest adds its hosted part); an origin with
            # no such entry (it has not heard of a live host yet, or never makes parts)
            # keeps its wider entry, so its subscribers are not left out meanwhile
            covered = hosts.covered
            inside = {k[1] for k in keys if covered(k[0])}
            keys = [k for k in keys if covered(k[0]) or k[1] not in inside]
        for key in keys:
            link_id, path = self._best[key]
            assert link_id is not None
            origin = key[1]
            link = self.links[link_id]
            r = (len(path), link.peer, link_id)
            if origin not in ranks or r < ranks[origin]:
                ranks[origin] = r
                chosen[origin] = (link_id, path)
            per = counts.setdefault(link_id, {})
            per[origin] = per.get(origin, 0) + 1
            texts = link.selectors.get(key) if link.selectors else None
            if texts is None:
                unconditional.add(origin)
            else:
                selected.setdefault(origin, set()).update(texts)
        static = tuple(
            ln.id for ln in self.links.values() if ln.filter.static and ln.filter.is_static(topic)
        )
        moved = None
        if hosted is None and len(chosen) > 1:
            moved = untangle(chosen, keys, self.links, self._table.alternates)
            for origin in moved:
                _recount(counts, origin, ranks[origin][2], chosen[origin][0])
        plan = Plan(self._local.match(topic), {o: c[0] for o, c in chosen.items()}, counts, static)
        if moved:
            plan.moved = {o: ranks[o][2] for o in moved}
        if selected:
            plan.cond = conditions(selected, unconditional)
        plan.hosts = hosted
        if self._table.flood and holds(self._table.flood, topic):
            plan.flood = True
        return plan

    def best_path(self, topic: str, origin: str) -> Path | None:
        """The path of the best entry of ``origin`` that ``topic`` matches among those a
        hosted branch covers (their advertisements went toward a host, rule 8); None if
        there is none."""
        covered = self._table.hosts.covered
        paths = [
            self._best[k][1] for k in self._remote.match(topic) if k[1] == origin and covered(k[0])
        ]
        return min(paths, key=len) if paths else None

    def invalidate(self) -> None:
        """Forget every plan and route: a link came, went or changed."""
        self._plans.clear()
        self._routes.clear()
        self._planned.clear()
        self._table.alternates.clear()  # (what the plans consulted: no plan is left)

    def evict(self, pattern: str) -> None:
        """Forget the plans and routes of the topics ``pattern`` matches: the best entry
        of a key with this pattern changed (nothing else in a plan depends on it)."""
        plans = self._plans
        if not plans:
            return
        routes = self._routes
        for topic in self._planned.evict(pattern):
            plan = plans.pop(topic, None)
            if plan is not None:
                for key in plan.routes:
                    routes.pop(key, None)

    def route(self, topic: str, path: Path, targets: tuple[str, ...] | None) -> Route:
        """Where a message goes from here: (local patterns, sends). The result is cached
        and shared: callers must not modify it. See :meth:`_route`."""
        key = (topic, path, targets)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        plan = self._plan(topic)
        result = self._route(plan, topic, path, targets)
        routes = self._routes
        if len(routes) >= self._plan_limit:
            routes.clear()
            for p in self._plans.values():
                p.routes.clear()
        routes[key] = result
        plan.routes.append(key)
        return result

    def _route(self, plan: Plan, topic: str, path: Path, targets: tuple[str, ...] | None) -> Route:
        """Where a message goes from here: (local patterns, sends).

        ``path``: brokers it crossed, origin first (empty for a local publish).
        ``targets``: origins its branch serves, or None to compute them here (a local
        publish, or a copy pushed by a static pattern). Each send is ``(link, targets of
        that branch or None, copies)``; the caller appends our ID to the path.
        """
        if plan.kept:
            # a local branch's topic goes no further, whatever the copy's marks say (a
            # flood copy or one on its way to a host would otherwise be relayed)
            return plan.local, []
        if (
            plan.hosts is not None
            or plan.flood
            or (targets and targets[0][:1] in (hosting.MARK, FLOOD))
        ):
            return hosting.route(self, plan, topic, path, targets)  # hosted or flooded
        me = self.broker_id
        if targets is None:
            wanted = [o for o in plan.next_hop if o not in path]
        else:
            wanted = [o for o in targets if o != me and o in plan.next_hop]
        return self.deliver(plan, topic, path, wanted, assigned=targets is not None)

    def deliver(
        self,
        plan: Plan,
        topic: str,
        path: Path,
        wanted: list[str],
        extra: tuple[Send, ...] = (),
        *,
        assigned: bool = False,
    ) -> Route:
        """The sends toward the origins ``wanted``, one copy per next-hop link (conduit),
        with the static pushes and the ``extra`` sends; selected targets make it a
        :class:`Selective`. ``assigned``: ``wanted`` are targets the copy's sender chose
        this node for: one whose best link leads back along the path takes a detour."""
        hops = len(path) + 1
        groups: dict[str, list[str]] = {}
        links = self.links
        for origin in wanted:
            link_id = plan.next_hop[origin]
            group = groups.get(link_id)
            if group is None:
                group = groups[link_id] = []
            group.append(origin)
        if plan.moved:
            self._fall_back(plan, groups, topic, path, hops)
        if assigned and path:
            self._detours(groups, topic, path, hops)
        sends: list[Send] = []
        for link_id, origins in groups.items():
            if not origins:
                continue  # (every origin of it took a detour)
            link = links[link_id]
            if not self.may_send(link, topic, path, hops):
                continue
            copies = 1
            if not link.options.conduit:
                per = plan.counts.get(link_id, {})
                copies = max(1, sum(per.get(o, 0) for o in origins))
            sends.append((link_id, tuple(origins), copies))
        for link_id in plan.static:
            if link_id in groups:
                # a static push is not narrowed by interest: the receiver computes the
                # targets from its own table, which covers this branch's targets too
                sends = [(li, None if li == link_id else t, c) for li, t, c in sends]
                continue
            link = links[link_id]
            if self.may_send(link, topic, path, hops):
                sends.append((link_id, None, 1))
        sends.extend(extra)
        if plan.cond:
            cond = {o: plan.cond[o] for o in wanted if o in plan.cond}
            if cond:  # rule 7: the pipeline picks the sends per message
                return plan.local, Selective(sends, cond)
        return plan.local, sends

    def _detours(self, groups: dict[str, list[str]], topic: str, path: Path, hops: int) -> None:
        """A copy's targets where this node disagrees with its sender for now: a best link
        back along the path, or a best entry that crosses it further on (detours.py)."""
        links = self.links
        blocked = [li for li in groups if path_holds(path, links[li].peer)]
        keys = self._remote.match(topic)
        crossing = crossings(groups, keys, links, path)
        if blocked or crossing:
            detour(
                groups, blocked, keys, links, path,
                lambda ln: self.may_send(ln, topic, path, hops), self._table.alternates,
                crossing,
            )  # fmt: skip

    def _fall_back(
        self, plan: Plan, groups: dict[str, list[str]], topic: str, path: Path, hops: int
    ) -> None:
        """Origins moved to a link this copy may not take (its path holds the peer, or
        its ttl is spent) go by their own best entry's link instead (:mod:`.meets`)."""
        assert plan.moved is not None
        for link_id in list(groups):
            if self.may_send(self.links[link_id], topic, path, hops):
                continue
            for origin in [o for o in groups[link_id] if o in plan.moved]:
                groups[link_id].remove(origin)
                groups.setdefault(plan.moved[origin], []).append(origin)

    @staticmethod
    def may_send(link: EngineLink, topic: str, path: Path, hops: int) -> bool:
        return (
            link.can_send
            and not path_holds(path, link.peer)
            and not ttl_spent(hops, link.options.ttl)
            and link.filter.allows_topic(topic)
        )


def _recount(counts: dict[str, dict[str, int]], origin: str, old: str, new: str) -> None:
    """An origin moved from link ``old`` to ``new`` (:mod:`.meets`): its matching keys are
    counted behind ``new`` now (conduit off sends one copy per key)."""
    n = counts[old].pop(origin, 0)
    if not counts[old]:
        del counts[old]
    per = counts.setdefault(new, {})
    per[origin] = per.get(origin, 0) + max(n, 1)
