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
    """A pattern gained its first local subscriber."""

    pattern: str


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
    """A link is gone (closed, heartbeats missed, replaced)."""

    link: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvertIn:
    """Interest entries from a link. ``full``: this is the peer's whole table for us."""

    link: str
    full: bool
    entries: tuple[Entry, ...]


Event = LocalSubscribe | LocalUnsubscribe | LinkUp | LinkDown | AdvertIn


# -- actions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAdvert:
    """Send these interest entries over ``link`` (``path=None`` withdraws)."""

    link: str
    full: bool
    entries: tuple[Entry, ...]


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
    )

    def __init__(self, ev: LinkUp) -> None:
        self.id = ev.link
        self.peer = ev.peer
        self.can_send = ev.can_send
        self.can_receive = ev.can_receive
        self.options = ev.options
        self.filter = LinkFilter(ev.options.include, ev.options.exclude, ev.options.static)
        self.adj_in: dict[Key, Path] = {}
        self.adj_out: dict[Key, Path] = {}
        self.pending: dict[Key, Path | None] = {}
        self.full_pending = True


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
            out.append(
                {
                    "pattern": pattern,
                    "origin": origin,
                    "path": list(path),
                    "hops": len(path),
                    "link": link,
                }
            )
        return out

    def entry_count(self) -> int:
        """Interest entries held (every link's, not only the best)."""
        return sum(len(link.adj_in) for link in self.links.values()) + len(self._local_patterns)

    # -- control plane ------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Apply a control-plane event. Advertisements it causes wait for :meth:`flush`."""
        if isinstance(event, LocalSubscribe):
            if event.pattern not in self._local_patterns:
                self._local_patterns.add(event.pattern)
                self._local.insert(event.pattern, event.pattern)
                self._recompute((event.pattern, self.broker_id))
        elif isinstance(event, LocalUnsubscribe):
            if event.pattern in self._local_patterns:
                self._local_patterns.discard(event.pattern)
                self._local.remove(event.pattern, event.pattern)
                self._recompute((event.pattern, self.broker_id))
        elif isinstance(event, AdvertIn):
            self._advert_in(event)
        elif isinstance(event, LinkUp):
            self._link_up(event)
        elif isinstance(event, LinkDown):
            self._link_down(event.link)
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"unknown event {event!r}")

    def flush(self) -> list[SendAdvert]:
        """The batched advertisement changes since the last flush, one action per link."""
        out: list[SendAdvert] = []
        for link in self.links.values():
            if not link.pending and not link.full_pending:
                continue
            entries: list[Entry] = []
            adj_out = link.adj_out
            for key, path in link.pending.items():
                if adj_out.get(key) == path:
                    continue  # never repeat what was last sent
                if path is None:
                    del adj_out[key]
                else:
                    adj_out[key] = path
                entries.append((key[0], key[1], path))
            link.pending.clear()
            if entries or link.full_pending:
                out.append(SendAdvert(link=link.id, full=link.full_pending, entries=tuple(entries)))
                self.adverts_sent += 1
            link.full_pending = False
        return out

    def _reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def _link_up(self, ev: LinkUp) -> None:
        if ev.link in self.links:
            self._link_down(ev.link)
        link = self.links[ev.link] = _Link(ev)
        self._invalidate()
        for key, best in self._best.items():
            desired = self._advert_for(link, key, best)
            if desired is not None:
                link.pending[key] = desired

    def _link_down(self, link_id: str) -> None:
        link = self.links.pop(link_id, None)
        if link is None:
            return
        self._invalidate()
        for key in list(link.adj_in):
            self._recompute(key)

    def _advert_in(self, ev: AdvertIn) -> None:
        link = self.links.get(ev.link)
        if link is None:
            self._reject("unknown_link")
            return
        touched: set[Key] = set()
        adj_in = link.adj_in
        if ev.full:
            touched.update(adj_in)
            adj_in.clear()
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
                if adj_in.pop(key, None) is not None and (best is None or best[0] == link.id):
                    touched.add(key)  # withdrawing a non-best entry changes nothing
            else:
                adj_in[key] = path
                if best is None or best[0] == link.id or self._beats(link, path, best):
                    touched.add(key)
        for key in touched:
            self._recompute(key)

    def _beats(self, link: _Link, path: Path, best: tuple[str | None, Path]) -> bool:
        """Does ``path`` over ``link`` rank above the current best (held by another link)?
        Most entries in a mesh are alternatives that lose: those skip recomputing."""
        if best[0] is None:
            return False  # local interest always wins
        other = self.links[best[0]]
        return (len(path), link.peer, link.id) < (len(best[1]), other.peer, other.id)

    def _recompute(self, key: Key) -> None:
        pattern, origin = key
        best: tuple[str | None, Path] | None = None
        if origin == self.broker_id:
            if pattern in self._local_patterns:
                best = (None, ())
        else:
            rank: tuple[int, str, str] | None = None
            for link in self.links.values():
                path = link.adj_in.get(key)
                if path is not None:
                    r = (len(path), link.peer, link.id)
                    if rank is None or r < rank:
                        rank, best = r, (link.id, path)
        old = self._best.get(key)
        if best == old:
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
        hops = len(new_path)
        for link in self.links.values():
            if (
                link.can_receive
                and via != link.id  # split horizon
                and not path_holds(new_path, link.peer)
                and not ttl_spent(hops, link.options.ttl)
                and link.filter.allows_pattern(pattern)
            ):
                link.pending[key] = new_path
            elif key in link.adj_out or key in link.pending:
                link.pending[key] = None

    def _advert_for(self, link: _Link, key: Key, best: tuple[str | None, Path]) -> Path | None:
        via, path = best
        if not link.can_receive or via == link.id:
            return None  # the peer cannot send to us, or split horizon
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
