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
   node is reached once, by a shortest path. A copy pushed by a ``static`` pattern carries
   no targets; its receiver computes them from its own table (minus the message's path).
5. **Never** send to a neighbour on the message's path, over a link that cannot send, past
   a link's ttl, or against its include/exclude filters. Each node drops a message whose ID
   it has seen (:class:`~zbroker.routing.dedupe.DedupeWindow`) before delivering or
   forwarding, so transient disagreement between nodes cannot duplicate a delivery.

6. **Sticky interest** (store-and-forward of persistent messages): an entry backed by a
   durable subscription is flagged sticky, locally (``LocalSubscribe(sticky=True)``) and in
   every advertisement derived from it. When a link goes down with
   ``LinkDown(keep_sticky=True)``, its sticky entries stay, on a *ghost* of the link, at
   the lowest preference (any live path wins): the node keeps routing toward the down link,
   where the node queues persistent messages until it returns, and keeps advertising the
   entries to its other neighbours. A ghost is never advertised to; ``LinkUp`` of the same
   link turns it live again with its entries (until the peer's full table replaces them);
   ``LinkDown`` without ``keep_sticky`` (the node does it when a ghost expires) forgets it.

Propagation policy (link kind x event -> action):

==================  =================================  ================================
link kind           advertise our interest over it?    send messages over it?
==================  =================================  ================================
duplex              yes                                yes
one-way, dialer     no (peer cannot send to us)        yes
one-way, acceptor   yes                                no
==================  =================================  ================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..sublist import Sublist
from .filters import LinkFilter
from .loops import path_holds, ttl_spent

__all__ = [
    "DEFAULT_TTL",
    "Action",
    "AdvertIn",
    "Event",
    "LinkDown",
    "LinkOptions",
    "LinkUp",
    "LocalSubscribe",
    "LocalUnsubscribe",
    "RoutingEngine",
    "SendAdvert",
]

#: hops. Paths already prevent loops, so the ttl only bounds diameter: 32 crosses any
#: network of sensible size (the seed system's default of 1 silently breaks multi-hop).
DEFAULT_TTL = 32

Path = tuple[str, ...]
Key = tuple[str, str]  # (pattern, origin)
Entry = tuple[str, str, Path | None]  # (pattern, origin, path or None = withdraw)
Adv = tuple[Path, bool]  # what was (or is to be) advertised for a key: path, sticky


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkOptions:
    ttl: int = DEFAULT_TTL
    conduit: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    static: tuple[str, ...] = ()


# -- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSubscribe:
    """A pattern gained its first local subscriber; sent again when its stickiness changes
    (``sticky``: a durable subscription backs it)."""

    pattern: str
    sticky: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalUnsubscribe:
    """A pattern lost its last local subscriber."""

    pattern: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkUp:
    """A link finished its handshake. ``can_send``: messages may flow to the peer;
    ``can_receive``: messages may flow from it (so we advertise our interest over it)."""

    link: str
    peer: str
    can_send: bool = True
    can_receive: bool = True
    options: LinkOptions = field(default_factory=LinkOptions)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkDown:
    """A link is gone (closed, heartbeats missed, replaced). ``keep_sticky``: keep its
    sticky entries on a ghost of the link (rule 6)."""

    link: str
    keep_sticky: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvertIn:
    """Interest entries from a link. ``full``: this is the peer's whole table for us."""

    link: str
    full: bool
    entries: tuple[Entry, ...]
    sticky: frozenset[Key] = frozenset()


Event = LocalSubscribe | LocalUnsubscribe | LinkUp | LinkDown | AdvertIn


# -- actions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAdvert:
    """Send these interest entries over ``link`` (``path=None`` withdraws)."""

    link: str
    full: bool
    entries: tuple[Entry, ...]
    sticky: frozenset[Key] = frozenset()


Action = SendAdvert


class _Link:
    __slots__ = (
        "adj_in",
        "adj_out",
        "can_receive",
        "can_send",
        "filter",
        "full_pending",
        "id",
        "options",
        "peer",
        "pending",
        "sticky",
        "up",
    )

    def __init__(self, ev: LinkUp) -> None:
        self.id = ev.link
        self.peer = ev.peer
        self.can_send = ev.can_send
        self.can_receive = ev.can_receive
        self.options = ev.options
        self.filter = LinkFilter(ev.options.include, ev.options.exclude, ev.options.static)
        self.adj_in: dict[Key, Path] = {}
        self.adj_out: dict[Key, Adv] = {}
        self.pending: dict[Key, Adv | None] = {}
        self.full_pending = True
        self.sticky: set[Key] = set()  # keys of adj_in the peer flagged sticky
        self.up = True  # False: a ghost (rule 6)


class _Plan:
    """Everything about one literal topic that does not depend on a message's path."""

    __slots__ = ("counts", "local", "next_hop", "static")

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


Send = tuple[str, tuple[str, ...] | None, int]  # (link id, targets or None, copies)


class RoutingEngine:
    """Interest tables and routing decisions for one node."""

    def __init__(self, broker_id: str, *, cache_size: int | None = None) -> None:
        self.broker_id = broker_id
        kw = {} if cache_size is None else {"cache_size": cache_size}
        self._local: Sublist[str] = Sublist(**kw)
        self._local_patterns: set[str] = set()
        self._local_sticky: set[str] = set()
        self._remote: Sublist[Key] = Sublist(**kw)
        self._best: dict[Key, tuple[str | None, Path]] = {}
        self.links: dict[str, _Link] = {}
        self._plans: dict[str, _Plan] = {}
        # route() results by (topic, path, targets): a relay sees the same few keys again
        # and again; cleared with the plans on any change
        self._routes: dict[
            tuple[str, Path, tuple[str, ...] | None], tuple[frozenset[str], list[Send]]
        ] = {}
        self._plan_limit = 4096 if cache_size is None else cache_size
        self.rejected: dict[str, int] = {}
        self.adverts_sent = 0

    # -- inspection -------------------------------------------------------------------------

    @property
    def local_patterns(self) -> frozenset[str]:
        return frozenset(self._local_patterns)

    def interest(self) -> list[dict[str, object]]:
        """The best entry of every key: pattern, origin, path, next-hop link (None = local)."""
        out = []
        for (pattern, origin), (link, path) in sorted(self._best.items()):
            row: dict[str, object] = {
                "pattern": pattern,
                "origin": origin,
                "path": list(path),
                "hops": len(path),
                "link": link,
            }
            # flags only where set: rule 6 (sticky interest, kept while its link is down)
            if self._is_sticky((pattern, origin), (link, path)):
                row["sticky"] = True
            if link is not None and not self.links[link].up:
                row["link_down"] = True
            out.append(row)
        return out

    def ghosts(self) -> list[str]:
        """Links that are down but whose sticky entries are kept (rule 6)."""
        return [ln.id for ln in self.links.values() if not ln.up]

    def sticky_entries(self, link_id: str) -> list[tuple[str, str, Path]]:
        """The sticky entries held from ``link_id`` (to restore a ghost after a restart)."""
        link = self.links.get(link_id)
        if link is None:
            return []
        return sorted((k[0], k[1], link.adj_in[k]) for k in link.sticky if k in link.adj_in)

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
        ev = LinkUp(
            link=link_id,
            peer=peer,
            can_send=can_send,
            can_receive=False,
            options=options or LinkOptions(),
        )
        link = self.links[link_id] = _Link(ev)
        link.up = False
        link.full_pending = False
        self._invalidate()
        for pattern, origin, path in entries:
            key = (pattern, origin)
            if origin == self.broker_id or path_holds(path, self.broker_id):
                continue
            link.adj_in[key] = path
            link.sticky.add(key)
            self._recompute(key)

    def entry_count(self) -> int:
        """Interest entries held (every link's, not only the best)."""
        return sum(len(link.adj_in) for link in self.links.values()) + len(self._local_patterns)

    # -- control plane ------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Apply a control-plane event. Advertisements it causes wait for :meth:`flush`."""
        if isinstance(event, LocalSubscribe):
            pattern = event.pattern
            changed = event.sticky != (pattern in self._local_sticky)
            if event.sticky:
                self._local_sticky.add(pattern)
            else:
                self._local_sticky.discard(pattern)
            if pattern not in self._local_patterns:
                self._local_patterns.add(pattern)
                self._local.insert(pattern, pattern)
                self._recompute((pattern, self.broker_id))
            elif changed:
                self._recompute((pattern, self.broker_id), force=True)
        elif isinstance(event, LocalUnsubscribe):
            self._local_sticky.discard(event.pattern)
            if event.pattern in self._local_patterns:
                self._local_patterns.discard(event.pattern)
                self._local.remove(event.pattern, event.pattern)
                self._recompute((event.pattern, self.broker_id))
        elif isinstance(event, AdvertIn):
            self._advert_in(event)
        elif isinstance(event, LinkUp):
            self._link_up(event)
        elif isinstance(event, LinkDown):
            self._link_down(event.link, keep_sticky=event.keep_sticky)
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"unknown event {event!r}")

    def flush(self) -> list[SendAdvert]:
        """The batched advertisement changes since the last flush, one action per link."""
        out: list[SendAdvert] = []
        for link in self.links.values():
            if not link.pending and not link.full_pending:
                continue
            entries: list[Entry] = []
            sticky: set[Key] = set()
            adj_out = link.adj_out
            for key, adv in link.pending.items():
                if adj_out.get(key) == adv:
                    continue  # never repeat what was last sent
                if adv is None:
                    if key not in adj_out:
                        continue
                    del adj_out[key]
                    entries.append((key[0], key[1], None))
                else:
                    adj_out[key] = adv
                    entries.append((key[0], key[1], adv[0]))
                    if adv[1]:
                        sticky.add(key)
            link.pending.clear()
            if entries or link.full_pending:
                out.append(
                    SendAdvert(
                        link=link.id,
                        full=link.full_pending,
                        entries=tuple(entries),
                        sticky=frozenset(sticky),
                    )
                )
                self.adverts_sent += 1
            link.full_pending = False
        return out

    def _reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def _link_up(self, ev: LinkUp) -> None:
        old = self.links.get(ev.link)
        carried: dict[Key, Path] = {}
        if old is not None and not old.up:
            # a ghost comes back: its sticky entries hold until the peer's full table
            carried = old.adj_in
            del self.links[ev.link]
        elif old is not None:
            self._link_down(ev.link)
        link = self.links[ev.link] = _Link(ev)
        link.adj_in.update(carried)
        link.sticky.update(carried)
        self._invalidate()
        for key in carried:
            self._recompute(key, force=True)
        for key, best in self._best.items():
            desired = self._advert_for(link, key, best)
            if desired is not None:
                link.pending[key] = (desired, self._is_sticky(key, best))

    def _link_down(self, link_id: str, *, keep_sticky: bool = False) -> None:
        link = self.links.get(link_id)
        if link is None:
            return
        self._invalidate()
        keys = list(link.adj_in)
        kept = {k: link.adj_in[k] for k in link.sticky if k in link.adj_in}
        if keep_sticky and kept and link.can_send:
            # rule 6: a ghost keeps the sticky entries at the lowest preference
            link.up = False
            link.adj_in = kept
            link.adj_out.clear()
            link.pending.clear()
            link.full_pending = False
        else:
            del self.links[link_id]
        for key in keys:
            self._recompute(key, force=key in kept)

    def _advert_in(self, ev: AdvertIn) -> None:
        link = self.links.get(ev.link)
        if link is None or not link.up:
            self._reject("unknown_link")
            return
        touched: set[Key] = set()
        adj_in = link.adj_in
        sticky_in = link.sticky
        if ev.full:
            touched.update(adj_in)
            adj_in.clear()
            sticky_in.clear()
        me = self.broker_id
        ttl = link.options.ttl
        best_of = self._best.get
        for pattern, origin, path in ev.entries:
            key = (pattern, origin)
            if path is not None:
                if path_holds(path, me):
                    self._reject("own_id_in_path")
                    path = None
                elif ttl_spent(len(path), ttl):
                    self._reject("ttl_spent")
                    path = None
                elif not path or path[0] != origin or path[-1] != link.peer:
                    self._reject("bad_path")
                    path = None
            best = best_of(key)
            if path is None:
                sticky_in.discard(key)
                if adj_in.pop(key, None) is not None and (best is None or best[0] == link.id):
                    touched.add(key)  # withdrawing a non-best entry changes nothing
            else:
                adj_in[key] = path
                if key in ev.sticky:
                    sticky_in.add(key)
                else:
                    sticky_in.discard(key)
                if best is None or best[0] == link.id or self._beats(link, path, best):
                    touched.add(key)
        for key in touched:
            self._recompute(key, force=True)

    def _beats(self, link: _Link, path: Path, best: tuple[str | None, Path]) -> bool:
        """Does ``path`` over ``link`` rank above the current best (held by another link)?
        Most entries in a mesh are alternatives that lose: those skip recomputing."""
        if best[0] is None:
            return False  # local interest always wins
        other = self.links[best[0]]
        return (not link.up, len(path), link.peer, link.id) < (
            not other.up,
            len(best[1]),
            other.peer,
            other.id,
        )

    def _is_sticky(self, key: Key, best: tuple[str | None, Path]) -> bool:
        if best[0] is None:
            return key[0] in self._local_sticky
        return key in self.links[best[0]].sticky

    def _recompute(self, key: Key, *, force: bool = False) -> None:
        """Select the best entry of ``key`` and queue the advertisements it changes.
        ``force``: re-advertise even if the best entry is the same (its stickiness may have
        changed; flush() drops what repeats the last advertisement)."""
        pattern, origin = key
        best: tuple[str | None, Path] | None = None
        if origin == self.broker_id:
            if pattern in self._local_patterns:
                best = (None, ())
        else:
            rank: tuple[bool, int, str, str] | None = None
            for link in self.links.values():
                path = link.adj_in.get(key)
                if path is not None:
                    # a ghost (down link) ranks below every live path (rule 6)
                    r = (not link.up, len(path), link.peer, link.id)
                    if rank is None or r < rank:
                        rank, best = r, (link.id, path)
        old = self._best.get(key)
        if best == old and not force:
            return
        self._invalidate()
        if best is None:
            del self._best[key]
        else:
            self._best[key] = best
        if origin != self.broker_id:
            if old is None:
                self._remote.insert(pattern, key)
            elif best is None:
                self._remote.remove(pattern, key)
        if best is None:
            for link in self.links.values():
                if key in link.adj_out or key in link.pending:
                    link.pending[key] = None
            return
        # rule 3, for every link at once: the advertised path is the same for all
        via, path = best
        new_path = (*path, self.broker_id)
        adv = (new_path, self._is_sticky(key, best))
        hops = len(new_path)
        for link in self.links.values():
            if not link.up:
                continue  # nothing is sent to a ghost
            if (
                link.can_receive
                and via != link.id  # split horizon
                and not path_holds(new_path, link.peer)
                and not ttl_spent(hops, link.options.ttl)
                and link.filter.allows_pattern(pattern)
            ):
                link.pending[key] = adv
            elif key in link.adj_out or key in link.pending:
                link.pending[key] = None

    def _advert_for(self, link: _Link, key: Key, best: tuple[str | None, Path]) -> Path | None:
        via, path = best
        if not link.up or not link.can_receive or via == link.id:
            return None  # a ghost, the peer cannot send to us, or split horizon
        new_path = (*path, self.broker_id)
        if path_holds(new_path, link.peer) or ttl_spent(len(new_path), link.options.ttl):
            return None
        if not link.filter.allows_pattern(key[0]):
            return None
        return new_path

    # -- data plane ---------------------------------------------------------------------

    def local_matches(self, topic: str) -> frozenset[str]:
        """The local patterns that ``topic`` (valid, literal) reaches."""
        return self._local.match(topic)

    def _plan(self, topic: str) -> _Plan:
        plan = self._plans.get(topic)
        if plan is not None:
            return plan
        ranks: dict[str, tuple[int, str, str]] = {}
        counts: dict[str, dict[str, int]] = {}
        for key in self._remote.match(topic):
            link_id, path = self._best[key]
            assert link_id is not None
            origin = key[1]
            link = self.links[link_id]
            r = (len(path), link.peer, link_id)
            if origin not in ranks or r < ranks[origin]:
                ranks[origin] = r
            per = counts.setdefault(link_id, {})
            per[origin] = per.get(origin, 0) + 1
        static = tuple(
            ln.id for ln in self.links.values() if ln.filter.static and ln.filter.is_static(topic)
        )
        plan = _Plan(self._local.match(topic), {o: r[2] for o, r in ranks.items()}, counts, static)
        if len(self._plans) >= self._plan_limit:
            self._invalidate()
        self._plans[topic] = plan
        return plan

    def _invalidate(self) -> None:
        self._plans.clear()
        self._routes.clear()

    def route(
        self, topic: str, path: Path, targets: tuple[str, ...] | None
    ) -> tuple[frozenset[str], list[Send]]:
        """Where a message goes from here: (local patterns, sends). The result is cached
        and shared: callers must not modify it. See :meth:`_route`."""
        key = (topic, path, targets)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        result = self._route(topic, path, targets)
        if len(self._routes) >= self._plan_limit:
            self._routes.clear()
        self._routes[key] = result
        return result

    def _route(
        self, topic: str, path: Path, targets: tuple[str, ...] | None
    ) -> tuple[frozenset[str], list[Send]]:
        """Where a message goes from here: (local patterns, sends).

        ``path``: brokers it crossed, origin first (empty for a local publish).
        ``targets``: origins its branch serves, or None to compute them here (a local
        publish, or a copy pushed by a static pattern). Each send is ``(link, targets of
        that branch or None, copies)``; the caller appends our ID to the path.
        """
        plan = self._plan(topic)
        hops = len(path) + 1
        me = self.broker_id
        if targets is None:
            wanted = [o for o in plan.next_hop if o not in path]
        else:
            wanted = [o for o in targets if o != me and o in plan.next_hop]
        groups: dict[str, list[str]] = {}
        links = self.links
        for origin in wanted:
            link_id = plan.next_hop[origin]
            group = groups.get(link_id)
            if group is None:
                group = groups[link_id] = []
            group.append(origin)
        sends: list[Send] = []
        for link_id, origins in groups.items():
            link = links[link_id]
            if not self._may_send(link, topic, path, hops):
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
            if self._may_send(link, topic, path, hops):
                sends.append((link_id, None, 1))
        return plan.local, sends

    @staticmethod
    def _may_send(link: _Link, topic: str, path: Path, hops: int) -> bool:
        return (
            link.can_send
            and not path_holds(path, link.peer)
            and not ttl_spent(hops, link.options.ttl)
            and link.filter.allows_topic(topic)
        )
