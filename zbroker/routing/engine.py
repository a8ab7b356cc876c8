"""The routing engine of one node: path-vector interest, shortest-path trees, dedupe.

Sans-IO: fed events, returns actions; never touches a socket, a clock or a thread. The
node (:mod:`zbroker.node`) and the simulator (:mod:`zbroker.sim`) drive the same engine.

Theory of operation
-------------------
*Interest* is a set of entries keyed by ``(pattern, origin)``: "broker ``origin`` has local
subscribers on ``pattern``". Each entry a node hears over a link carries the *path* of
broker IDs the advertisement crossed, origin first, the advertising neighbour last; its
length is the number of hops a message needs to reach the origin that way.

Rules (each loop rule is a named function in :mod:`zbroker.routing.loops`):

1. **Accept** an advertisement over link L unless its path holds our own ID
   (``path_holds``) or is longer than L's ttl (``ttl_spent``); a rejected path also
   withdraws what L told us earlier for that key.
2. **Select** per key the *best* entry: local interest first; else the shortest path, ties
   broken by the lowest (neighbour ID, link name). Every entry heard is kept per link, so
   the next-best is at hand the moment a link dies.
3. **Advertise** the best entry of every key, with our ID appended, to every link that can
   carry messages *to* us, except: the link it came from (split horizon), a neighbour
   already on its path, a link whose ttl the path would exceed, a link whose filters reject
   every topic of the pattern. Only changes are sent (refcount-style: what was last sent
   per link is remembered and repeats are skipped); they are batched until :meth:`flush`;
   a new link first receives the full table.
4. **Route** a message published here: its *targets* are the origins of all best entries
   matching its topic. Group the targets by the next-hop link of their best entry and send
   one copy per link (conduit), carrying the targets of that branch; a node that receives
   a copy delivers locally and forwards only toward the targets it was given. Because the
   tie-break is the same for every origin, the best paths from a node form a tree: each
   node is reached once, by a shortest path. Where neighbours hear different entries (a
   link's ttl below the mesh's diameter), two branches could cross a node and the second
   copy be dropped there with its targets: a plan moves one origin of such a crossing to
   the other's first hop when that neighbour has an entry of it as short (:mod:`.meets`).
   A copy pushed by a ``static`` pattern carries no targets; its receiver computes them
   from its own table (minus the message's path).
5. **Never** send to a neighbour on the message's path, over a link that cannot send, past
   a link's ttl, or against its include/exclude filters. Each node drops a message whose ID
   it has seen (:class:`~zbroker.routing.dedupe.DedupeWindow`) before delivering or
   forwarding, so transient disagreement between nodes cannot duplicate a delivery. A
   target a copy was sent here for, whose best entry leads back along the copy's path
   (the sender and this node disagree), takes the best other entry that avoids the path
   (:mod:`.detours`).

6. **Sticky interest** (store-and-forward of persistent messages): an entry backed by a
   durable subscription is flagged sticky, locally (``LocalSubscribe(sticky=True)``) and in
   every advertisement derived from it. When a link goes down with
   ``LinkDown(keep_sticky=True)``, its sticky entries stay, on a *ghost* of the link, at
   the lowest preference (any live path wins): the node keeps routing toward the down link,
   where the node queues persistent messages until it returns, and keeps advertising the
   entries to its other neighbours, flagged *held* (``SendAdvert.held``): whoever hears a
   held entry ranks it below every live one as well, and passes the flag on while its own
   best entry of the key is held, so a node with a live path elsewhere takes that path
   (the durable's node is reached) rather than the ghost's queue. A ghost is never
   advertised to; ``LinkUp`` of the same
   link turns it live again with its entries (until the peer's full table replaces them);
   ``LinkDown`` without ``keep_sticky`` (the node does it when a ghost expires) forgets it.

7. **Selectors** travel with interest (:mod:`~zbroker.routing.selection`): local interest
   whose every subscriber has a selector (``LocalSubscribe(selectors=...)``) is advertised
   with those selectors, and every advertisement derived from the entry carries them
   unchanged (entries are per origin, so nothing merges on the way). Routing a message,
   an origin all of whose matching entries are selected is a target only if one of its
   selectors accepts the message's headers: the route's sends come as a
   :class:`~zbroker.routing.selection.Selective` whose ``pick(headers)`` drops the other
   targets and the sends left without any. A relay thus ORs the selectors of everything
   behind a link, and sends nothing over a link no selector behind it accepts; the tree
   of rule 4 is only pruned, so exactly-once and loop freedom are untouched.

8. **Topic hosts and flooded branches** (:mod:`~zbroker.routing.hosts`,
   :mod:`~zbroker.routing.flood`): a host advertises itself as the interest
   ``($ZB.HOST.<branch>, host)``; interest a hosted branch covers goes only toward the
   live hosts, and so does the hosted part of a wider pattern that overlaps it
   (:mod:`~zbroker.routing.hostward`); a hosted topic is routed by that interest only: a
   publication of it goes to one host, the nodes on its way claiming the targets that
   hang off it. A flooded branch's interest is never
   advertised and its publications go over every link. Both only choose among the sends
   of rules 4 and 5 (paths and dedupe unchanged).

Propagation policy (link kind x event -> action):

==================  =================================  ================================
link kind           advertise our interest over it?    send messages over it?
==================  =================================  ================================
duplex              yes                                yes
one-way, dialer     no (peer cannot send to us)        yes
one-way, acceptor   yes                                no
==================  =================================  ================================

Where each part lives
---------------------
:mod:`~zbroker.routing.events` (the events and actions), :mod:`~zbroker.routing.table`
(rules 1, 2 and 6: entries per link, best-entry selection, ghosts),
:mod:`~zbroker.routing.selection` (rule 7), :mod:`~zbroker.routing.branches` (local
branches: topics that never leave the node),
:mod:`~zbroker.routing.propagation` (rule 3), :mod:`~zbroker.routing.routes` (rules 4 and
5, with the plan and route caches), :mod:`~zbroker.routing.loops` and
:mod:`~zbroker.routing.filters` (the checks rules 1, 3 and 5 share),
:mod:`~zbroker.routing.groups` (queue groups: one member node per message per group, over
the same entries), :mod:`~zbroker.routing.hosts` and :mod:`~zbroker.routing.hostward`
(rule 8: hosts, and the hosted parts of wider interest). This module feeds the
events to the table, reselects the keys they touch, and keeps the caches and the queued
advertisements in step with the selection.
"""

from __future__ import annotations

from . import hosts as hosting
from . import propagation, selection
from .branches import covers
from .durable_homes import HOME_PREFIX, DurableHomes
from .events import (
    AdvertIn,
    Event,
    Key,
    LinkDown,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    Path,
    SendAdvert,
)
from .groups import GROUP_PREFIX, GroupTable
from .loops import path_holds
from .routes import PLAN_LIMIT, Router
from .table import EngineLink, InterestTable

__all__ = ["RoutingEngine"]


class RoutingEngine:
    """Interest tables and routing decisions for one node.

    The data plane, :meth:`route` and :meth:`local_matches`, is the :class:`Router`'s,
    bound onto the engine: a call costs what a method of the engine would, and no more.
    """

    def __init__(
        self,
        broker_id: str,
        *,
        cache_size: int | None = None,
        local_branches: tuple[str, ...] = (),
        host_branches: tuple[str, ...] = (),
        flood_branches: tuple[str, ...] = (),
    ) -> None:
        self.broker_id = broker_id
        self._table = table = InterestTable(broker_id, cache_size=cache_size)
        #: patterns whose topics never leave this node (:mod:`~zbroker.routing.branches`)
        self.local_branches = table.local_branches = tuple(local_branches)
        #: branches every node gets every message of, unasked (:mod:`~.flood`)
        self.flood_branches = table.flood = tuple(flood_branches)
        self.links = table.links
        self.rejected = table.rejected  # advertisement entries rejected, by reason
        self.adverts_sent = 0
        self._router = router = Router(
            table, plan_limit=PLAN_LIMIT if cache_size is None else cache_size
        )
        self.route = router.route
        self.local_matches = router.local_matches
        #: queue groups: which origins hold members of which group key, and the pick
        self.groups = GroupTable(table)
        #: durable subscriptions: which live nodes hold which durable name
        self.durable_homes = DurableHomes()
        #: branches this node hosts (rule 8, :mod:`~zbroker.routing.hosts`)
        self.host_branches = tuple(host_branches)
        for branch in self.host_branches:
            self.add_host(branch)

    def add_host(self, branch: str) -> None:
        """Host ``branch`` from now on (rule 8); advertised at the next :meth:`flush`."""
        if branch not in self.host_branches:
            self.host_branches = (*self.host_branches, branch)
        self._table.hosts.local.add(hosting.host_key(branch))
        self._recompute((hosting.host_key(branch), self.broker_id))

    # -- inspection -------------------------------------------------------------------------

    @property
    def local_patterns(self) -> frozenset[str]:
        return frozenset(self._table.local_patterns)

    def interest(self) -> list[dict[str, object]]:
        """The best entry of every key: pattern, origin, path, next-hop link (None = local);
        a queue group's entries also name the group and the capacity behind them."""
        return self.groups.annotate(self._table.interest())

    def hosts_for(self, topic: str) -> dict[str, tuple[int, str | None, frozenset[str]]]:
        """The live hosts of the hosted branches ``topic`` is in (rule 8): per host, its
        distance, the next-hop link (None: ourselves) and the nodes on the way to it."""
        return self._table.hosts.for_topic(topic) or {}

    def ghosts(self) -> list[str]:
        """Links that are down but whose sticky entries are kept (rule 6)."""
        return self._table.ghosts()

    def sticky_entries(self, link_id: str) -> list[tuple[str, str, Path]]:
        """The sticky entries held from ``link_id`` (to restore a ghost after a restart)."""
        return self._table.sticky_entries(link_id)

    def has_route(self, pattern: str, origin: str) -> bool:
        """Does this node route messages on ``pattern`` toward ``origin`` (a best entry)?"""
        return (pattern, origin) in self._table.best

    def entry_count(self) -> int:
        """Interest entries held (every link's, not only the best)."""
        return self._table.entry_count()

    # -- control plane ------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Apply a control-plane event. Advertisements it causes wait for :meth:`flush`."""
        if isinstance(event, LocalSubscribe):
            self._local_subscribe(event.pattern, event.sticky, event.selectors)
        elif isinstance(event, LocalUnsubscribe):
            self._local_unsubscribe(event.pattern)
        elif isinstance(event, AdvertIn):
            for key in self._table.accept(event):
                self._recompute(key, force=True)
        elif isinstance(event, LinkUp):
            self._link_up(event)
        elif isinstance(event, LinkDown):
            self._link_down(event.link, keep_sticky=event.keep_sticky)
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"unknown event {event!r}")

    def flush(self) -> list[SendAdvert]:
        """The batched advertisement changes since the last flush, one action per link."""
        out = propagation.flush(self.links)
        self.adverts_sent += len(out)
        return out

    def restore_ghost(
        self,
        link_id: str,
        peer: str,
        entries: list[tuple[str, str, Path]],
        *,
        can_send: bool = True,
        options: LinkOptions | None = None,
    ) -> None:
        """Install a ghost of a link that is not up (after a restart of this node: the
        sticky entries it held are kept in the store). Ignored if the link exists."""
        if link_id in self.links or not entries:
            return
        link = EngineLink.ghost(link_id, peer, can_send, options or LinkOptions())
        self.links[link_id] = link
        self._router.invalidate()
        self.groups.invalidate()
        for pattern, origin, path in entries:
            key = (pattern, origin)
            if origin == self.broker_id or path_holds(path, self.broker_id):
                continue
            link.adj_in[key] = path
            link.sticky.add(key)
            self._recompute(key)

    def _local_subscribe(
        self, pattern: str, sticky: bool, selectors: frozenset[str] | None = None
    ) -> None:
        table = self._table
        changed = sticky != (pattern in table.local_sticky)
        changed |= selection.set_local(table.local_selectors, pattern, selectors)
        if sticky:
            table.local_sticky.add(pattern)
        else:
            table.local_sticky.discard(pattern)
        if pattern not in table.local_patterns:
            table.local_patterns.add(pattern)
            table.local.insert(pattern, pattern)
            self._recompute((pattern, self.broker_id))
        elif changed:
            self._recompute((pattern, self.broker_id), force=True)
        if table.hosts.branches or table.parts.parts:
            self._refresh_parts(pattern)

    def _local_unsubscribe(self, pattern: str) -> None:
        table = self._table
        table.local_sticky.discard(pattern)
        table.local_selectors.pop(pattern, None)
        if pattern in table.local_patterns:
            table.local_patterns.discard(pattern)
            table.local.remove(pattern, pattern)
            self._recompute((pattern, self.broker_id))
            self._refresh_parts(pattern)

    def _link_up(self, ev: LinkUp) -> None:
        old = self.links.get(ev.link)
        carried: dict[Key, Path] = {}
        if old is not None and not old.up:
            # a ghost comes back: its sticky entries hold until the peer's full table
            carried = old.adj_in
            del self.links[ev.link]
        elif old is not None:
            self._link_down(ev.link)
        link = self.links[ev.link] = EngineLink(ev)
        link.adj_in.update(carried)
        link.sticky.update(carried)
        self._router.invalidate()
        self.groups.invalidate()
        for key in carried:
            self._recompute(key, force=True)
        propagation.offer_table(link, self._table)

    def _link_down(self, link_id: str, *, keep_sticky: bool = False) -> None:
        link = self.links.get(link_id)
        if link is None:
            return
        self._router.invalidate()
        self.groups.invalidate()
        keys = list(link.adj_in)
        kept = link.sticky_held()
        if keep_sticky and kept and link.can_send:
            link.become_ghost(kept)  # rule 6: kept at the lowest preference
        else:
            del self.links[link_id]
        for key in keys:
            self._recompute(key, force=key in kept)

    def _recompute(self, key: Key, *, force: bool = False) -> None:
        """Select the best entry of ``key`` and queue the advertisements it changes.
        ``force``: re-advertise even if the best entry is the same (its stickiness may have
        changed; flush() drops what repeats the last advertisement)."""
        table = self._table
        best = table.select(key)
        old = table.best.get(key)
        if best == old and (not force or best is None):
            # nothing selected before or now (e.g. one frame advertised and withdrew the
            # key): nothing was advertised for it, so there is nothing to withdraw; but a
            # plan may have routed by another entry of the key (routing/meets.py)
            if key[0] in table.alternates:
                self._router.evict(key[0])
            return
        # only the plans of the topics this pattern matches depend on this key
        self._router.evict(key[0])
        table.set_best(key, old, best)
        if key[0].startswith(GROUP_PREFIX):
            self.groups.changed(key, best is not None)
        elif key[0].startswith(HOME_PREFIX):
            self.durable_homes.changed(key, best is not None)
        if best is None or table.unadvertised(key[0]):
            propagation.withdraw(self.links, key)  # (a local or flooded branch: never)
        else:
            # rule 3, for every link at once: the advertised path is the same for all
            path = (*best[1], self.broker_id)
            sticky, selectors = table.is_sticky(key, best), table.selectors_of(key, best)
            allowed = table.hosts.allowed(key[0]) if table.hosts.branches else None
            held = sticky and table.is_held(key, best)  # (rule 6: ranked below live ones)
            propagation.advertise(self.links, key, best, path, sticky, selectors, allowed, held)
        branch = hosting.branch_of(key[0])
        if branch is not None:
            had = branch in table.hosts.branches
            if table.hosts.update(branch, key[1], best):
                self._hosts_changed(branch, had != (branch in table.hosts.branches))

    def add_flood(self, branch: str) -> None:
        """Flood ``branch`` from now on: its interest is withdrawn, its topics flooded."""
        table = self._table
        if branch in table.flood:
            return
        self.flood_branches = table.flood = (*table.flood, branch)
        self._router.invalidate()
        for key in [k for k in table.best if covers((branch,), k[0])]:
            self._recompute(key, force=True)

    def _hosts_changed(self, branch: str, live: bool) -> None:
        """Rule 8: a host of ``branch`` came, went or moved: the plans of its topics and
        the links its interest goes over follow. ``live``: the branch got its first live
        host or lost its last, so the hosted parts of wider interest change
        (:mod:`~zbroker.routing.hostward`)."""
        table = self._table
        self._router.evict(branch)
        if live:
            for pattern in table.hosts.touching(branch, sorted(table.local_patterns)):
                self._refresh_parts(pattern)
        for pattern, origin in [k for k in table.best if hosting.branch_of(k[0]) is None]:
            if table.hosts.touching(branch, (pattern,)):
                self._recompute((pattern, origin), force=True)

    def _refresh_parts(self, pattern: str) -> None:
        """Make the hosted parts of local ``pattern`` again and select their entries
        (rule 8: the part of wider interest that a hosted branch holds goes toward its
        hosts, :mod:`~zbroker.routing.hostward`)."""
        table = self._table
        present = pattern in table.local_patterns
        for part in sorted(table.parts.refresh(pattern, present, table.hosts)):
            self._recompute((part, self.broker_id), force=True)
        if pattern in table.parts.sources:
            # a subscription on a part's own pattern came or went: one key stands for
            # both, whose selectors and stickiness are merged
            self._recompute((pattern, self.broker_id), force=True)
