"""The interest table of one node: what each link told us, what we last told it, and the
best entry of every key (rules 1, 2 and 6 of :mod:`zbroker.routing.engine`).

The table holds state and answers questions about it; it queues nothing and invalidates
nothing. The engine applies an event here, then reselects the keys the table reports as
touched (:meth:`InterestTable.select`), which is where routes and advertisements follow.
"""

from __future__ import annotations

from ..sublist import Sublist
from .branches import covers
from .events import Adv, AdvertIn, Key, LinkOptions, LinkUp, Path
from .filters import LinkFilter
from .hosts import HostTable
from .hostward import HostedParts
from .keys import judged_pattern, split_key
from .loops import path_holds, ttl_spent

__all__ = ["Best", "EngineLink", "InterestTable"]

#: the best entry of a key: (link id it was heard over, None = local interest; its path)
Best = tuple[str | None, Path]


class EngineLink:
    """A link as the engine sees it: its options, the entries heard over it (``adj_in``),
    what was last advertised over it (``adj_out``) and what waits for the next flush."""

    __slots__ = (
        "adj_in",
        "adj_out",
        "can_receive",
        "can_send",
        "filter",
        "full_pending",
        "held",
        "id",
        "options",
        "peer",
        "pending",
        "selectors",
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
        #: keys of adj_in the peer flagged held for a down link: ranked as a ghost (rule 6)
        self.held: set[Key] = set()
        #: keys of adj_in whose interest is only in what these selectors accept (rule 7)
        self.selectors: dict[Key, frozenset[str]] = {}
        self.up = True  # False: a ghost (rule 6)

    @classmethod
    def ghost(cls, link_id: str, peer: str, can_send: bool, options: LinkOptions) -> EngineLink:
        """A ghost of a link that is not up, to hold restored sticky entries (rule 6)."""
        link = cls(
            LinkUp(link=link_id, peer=peer, can_send=can_send, can_receive=False, options=options)
        )
        link.up = False
        link.full_pending = False
        return link

    def rank(self, key: Key, path: Path) -> tuple[bool, int, str, str]:
        """How an entry of ``key`` heard over this link ranks (lower is better): a live
        entry before one held on a ghost, here (a down link) or further on (the peer said
        so) (rule 6), then the shortest path, ties broken by (neighbour ID, link name)."""
        return (self.is_held(key), len(path), self.peer, self.id)

    def is_held(self, key: Key) -> bool:
        """Is this link's entry of ``key`` held on a ghost, here or further on (rule 6)?"""
        return not self.up or key in self.held

    def sticky_held(self) -> dict[Key, Path]:
        """The sticky entries heard over this link: what a ghost of it keeps (rule 6)."""
        return {k: self.adj_in[k] for k in self.sticky if k in self.adj_in}

    def become_ghost(self, kept: dict[Key, Path]) -> None:
        """Rule 6: the link went down; keep only ``kept``, at the lowest preference, and
        send it nothing until it is up again."""
        self.up = False
        self.adj_in = kept
        self.selectors = {k: v for k, v in self.selectors.items() if k in kept}
        self.held.clear()  # (all it keeps ranks as held now: the link is down)
        self.adj_out.clear()
        self.pending.clear()
        self.full_pending = False


class InterestTable:
    """Local interest, every link's entries, and the best entry of every key.

    ``links``, ``best``, ``local`` and ``remote`` are never rebound: the router
    (:mod:`zbroker.routing.routes`) holds them as its own attributes.
    """

    def __init__(self, broker_id: str, *, cache_size: int | None = None) -> None:
        self.broker_id = broker_id
        kw = {} if cache_size is None else {"cache_size": cache_size}
        self.local: Sublist[str] = Sublist(**kw)
        self.local_patterns: set[str] = set()
        self.local_sticky: set[str] = set()
        self.local_selectors: dict[str, frozenset[str]] = {}  # rule 7
        self.local_branches: tuple[str, ...] = ()  # topics that never leave (branches.py)
        self.flood: tuple[str, ...] = ()  # flooded branches (flood.py)
        self.hosts = HostTable(broker_id)  # hosted branches and their live hosts (hosts.py)
        self.parts = HostedParts()  # the hosted parts of wider local interest (hostward.py)
        self.remote: Sublist[Key] = Sublist(**kw)  # keys of remote best entries
        self.best: dict[Key, Best] = {}
        self.links: dict[str, EngineLink] = {}
        self.rejected: dict[str, int] = {}
        #: patterns of keys a plan consulted beyond their best entry (:mod:`.meets`): a
        #: change of any entry with such a pattern touches its key
        self.alternates: set[str] = set()

    # -- rule 1: accept ---------------------------------------------------------------------

    def _reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def accept(self, ev: AdvertIn) -> set[Key]:
        """Store what a link advertised (a rejected path withdraws the key); the keys whose
        best entry this may change."""
        touched: set[Key] = set()
        link = self.links.get(ev.link)
        if link is None or not link.up:
            self._reject("unknown_link")
            return touched
        adj_in = link.adj_in
        sticky_in, held_in = link.sticky, link.held
        selected_in, selectors = link.selectors, ev.selectors
        if ev.full:
            touched.update(adj_in)
            adj_in.clear()
            sticky_in.clear()
            held_in.clear()
            selected_in.clear()
        best_of = self.best.get
        for pattern, origin, path in ev.entries:
            key = (pattern, origin)
            if path is not None:
                path = self._checked(link, origin, path)
            best = best_of(key)
            if path is None:
                sticky_in.discard(key)
                held_in.discard(key)
                selected_in.pop(key, None)
                if adj_in.pop(key, None) is not None and (
                    best is None or best[0] == link.id or pattern in self.alternates
                ):
                    touched.add(key)  # withdrawing a non-best entry changes nothing
            else:
                adj_in[key] = path
                if key in ev.sticky:
                    sticky_in.add(key)
                else:
                    sticky_in.discard(key)
                if key in ev.held:
                    held_in.add(key)
                elif held_in:
                    held_in.discard(key)
                if key in selectors:
                    selected_in[key] = selectors[key]
                elif selected_in:
                    selected_in.pop(key, None)
                if (
                    best is None
                    or best[0] == link.id
                    or self.beats(link, key, path, best)
                    or pattern in self.alternates
                ):
                    touched.add(key)
        return touched

    def _checked(self, link: EngineLink, origin: str, path: Path) -> Path | None:
        """``path`` if rule 1 accepts it over ``link``, else None (counted)."""
        if path_holds(path, self.broker_id):
            self._reject("own_id_in_path")
        elif ttl_spent(len(path), link.options.ttl):
            self._reject("ttl_spent")
        elif not path or path[0] != origin or path[-1] != link.peer or len(set(path)) < len(path):
            self._reject("bad_path")  # (a node on a path twice: no advertisement goes so)
        else:
            return path
        return None

    # -- rule 2: select ---------------------------------------------------------------------

    def select(self, key: Key) -> Best | None:
        """The best entry of ``key`` as the table stands: local interest first; else any
        live entry before one held on a ghost (rule 6), then the shortest path, ties broken
        by the lowest (neighbour ID, link name)."""
        pattern, origin = key
        best: Best | None = None
        if origin == self.broker_id:
            if (
                pattern in self.local_patterns
                or pattern in self.hosts.local
                or pattern in self.parts.sources
            ):
                best = (None, ())
        else:
            rank: tuple[bool, int, str, str] | None = None
            for link in self.links.values():
                path = link.adj_in.get(key)
                if path is not None:
                    r = link.rank(key, path)
                    if rank is None or r < rank:
                        rank, best = r, (link.id, path)
        return best

    def beats(self, link: EngineLink, key: Key, path: Path, best: Best) -> bool:
        """Does ``path`` of ``key`` over ``link`` rank above the current best (held by
        another link)? Most entries in a mesh are alternatives that lose: those skip
        recomputing."""
        if best[0] is None:
            return False  # local interest always wins
        return link.rank(key, path) < self.links[best[0]].rank(key, best[1])

    def set_best(self, key: Key, old: Best | None, best: Best | None) -> None:
        """Record the selected entry of ``key`` (``old``: the one it replaces)."""
        if best is None:
            del self.best[key]
        else:
            self.best[key] = best
        if key[1] != self.broker_id:
            if old is None:
                self.remote.insert(key[0], key)
            elif best is None:
                self.remote.remove(key[0], key)

    def unadvertised(self, pattern: str) -> bool:
        """Is interest in ``pattern`` never advertised (a local or a flooded branch covers
        it)? One test for what is advertised and what is withdrawn. A queue group's key
        is judged by its pattern, a host's key by its branch (:mod:`.keys`): a node that
        keeps a hosted branch local must not relay its host's advert, or the nodes behind
        it would send the branch's publications to the host through a node that drops
        them all (they take another way to the host, if there is one)."""
        if self.local_branches and covers(self.local_branches, judged_pattern(pattern)):
            return True
        if not self.flood:
            return False
        # a flooded branch still lets a host's advert through: the node floods only what
        # it publishes itself, and the nodes behind it may route the branch to its host
        parts = split_key(pattern)
        return covers(self.flood, pattern if parts is None else parts[1])

    def is_sticky(self, key: Key, best: Best) -> bool:
        if best[0] is None:
            if key[0] in self.parts.sources:
                return self.parts.sticky(key[0], self.local_sticky)
            return key[0] in self.local_sticky
        return key in self.links[best[0]].sticky

    def is_held(self, key: Key, best: Best) -> bool:
        """Is the best entry of ``key`` held on a ghost, here or further on (rule 6)?"""
        if best[0] is None:
            return False
        return self.links[best[0]].is_held(key)

    def selectors_of(self, key: Key, best: Best) -> frozenset[str] | None:
        """The selectors behind the best entry of ``key`` (None: every message, rule 7)."""
        if best[0] is None:
            if key[0] in self.parts.sources:
                return self.parts.selectors(key[0], self.local_patterns, self.local_selectors)
            return self.local_selectors.get(key[0])
        return self.links[best[0]].selectors.get(key)

    # -- inspection -------------------------------------------------------------------------

    def interest(self) -> list[dict[str, object]]:
        """The best entry of every key: pattern, origin, path, next-hop link (None = local)."""
        out = []
        for (pattern, origin), (link, path) in sorted(self.best.items()):
            row: dict[str, object] = {
                "pattern": pattern,
                "origin": origin,
                "path": list(path),
                "hops": len(path),
                "link": link,
            }
            # flags only where set: rule 6 (sticky interest, kept while its link is down)
            if self.is_sticky((pattern, origin), (link, path)):
                row["sticky"] = True
                if link is not None and (pattern, origin) in self.links[link].held:
                    row["held"] = True  # on a ghost further on (here: link_down below)
            if self.local_branches and covers(self.local_branches, pattern):
                row["local_branch"] = True  # never advertised
            if link is None and pattern in self.parts.sources:
                row["hosted_part_of"] = sorted(self.parts.sources[pattern])  # rule 8
            selectors = self.selectors_of((pattern, origin), (link, path))
            if selectors is not None:
                row["selectors"] = sorted(selectors)
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
        return sorted((k[0], k[1], path) for k, path in link.sticky_held().items())

    def entry_count(self) -> int:
        """Interest entries held (every link's, not only the best)."""
        # every local source :meth:`select` makes a best entry of: subscriptions, the
        # branches hosted here (rule 8) and hosted parts, a pattern counted once
        local = self.local_patterns.union(self.hosts.local, self.parts.sources.keys())
        return sum(len(link.adj_in) for link in self.links.values()) + len(local)
