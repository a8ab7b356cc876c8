"""Queue groups in the routing engine: one member node per message per group.

Sans-IO, like the rest of :mod:`zbroker.routing`. A queue group ``G`` on pattern ``P``
is ordinary path-vector interest under a *group key*, the pattern ``$ZB.Q.<G>.<P>``
(:func:`group_key`): a node with a member holds it as local interest, so advertisement,
withdrawal, link failure, ttl, split horizon and the loop rules are exactly those of
plain interest, and every node learns, per group key, the origins that have members and
the next hop toward each. No client can publish under ``$ZB``, so a group key never
matches a topic and the plain routing of rule 4 never sends a message for it.

What this module adds is the choice. :meth:`GroupTable.pick` takes a message's topic
where it enters the network and names, for every group key whose pattern matches, ONE
origin (a node with members) according to the group's policy:

* ``local_first`` (default): this node if it has a member, unless messages wait here
  that no member here has room for (:attr:`GroupTable.saturated`, kept by the queue
  feature) and another origin advertises free credit; else the nearest origins (fewest
  hops, among those with free credit when this node is saturated), shared among them in
  proportion to their members;
* ``round_robin``: every origin in proportion to its members, so each *member*
  network-wide gets an equal share (smooth weighted round robin: exact shares, no
  randomness);
* ``weighted``: in proportion to the free credit the origins advertise.

The message then travels to that origin alone, hop by hop along the best entry of
``(group key, origin)`` (:meth:`next_hop`): one copy, on the same loop-free tree as plain
interest, so it cannot be doubled. A node on the way that lost the route (or the origin
that lost its last member meanwhile) picks again among the origins not on the
message's path (:meth:`pick` with ``path``), so a retry does not revisit a node while
another member is left; with none left off the path, it goes back to one on it (the
node where it entered, when the member it was sent to left on the way), at most once per
node (:func:`revisit_refused`), so every path stays bounded. Every link refuses a topic
a local branch of this node holds (:mod:`.branches`), as a filter: only members here get it.

Capacity (members, free credit) per origin reaches every node by flooding with a stamp
per origin (newer replaces older); an origin with no capacity heard counts as one member
with one credit. A node keeps (and floods) capacity only for the origins it has an entry
of: the entry's withdrawal, not a "0 members" capacity, says a group is gone there, and it
takes the capacity with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..sublist import Sublist
from .branches import KeptTopics
from .events import Key, Path
from .keys import GROUP_PREFIX, group_key, split_key
from .loops import path_holds, ttl_spent
from .table import InterestTable

__all__ = [
    "DEFAULT_POLICY",
    "GROUP_PREFIX",
    "POLICIES",
    "Capacity",
    "GroupTable",
    "group_key",
    "revisit_refused",
    "split_key",
]

POLICIES = ("local_first", "round_robin", "weighted")
DEFAULT_POLICY = "local_first"
#: (stamp, members, free credit) of one origin's members of one group key
Capacity = tuple[int, int, int]
Held = list[str]  # group keys a local branch keeps a topic from (GroupTable.pick)


def revisit_refused(path: Path, target: str, me: str) -> bool:
    """Must a group message whose ``path`` holds ``me`` be dropped here (a loop)? A
    message never comes back to a node it crossed, but one: the message whose target
    (the node it is sent to) is on its path, sent back there because no member off its
    path was left to reach (:meth:`GroupTable.step`), and only once: a node is on a path
    at most twice, so every path is bounded (and by the links' ttl)."""
    return me in path and (target not in path or path.count(me) > 1)


class GroupTable:
    """Which origins hold members of which group, their capacity, and the pick."""

    def __init__(self, table: InterestTable) -> None:
        self._table = table
        self.broker_id = table.broker_id
        self._match: Sublist[str] = Sublist()  # real pattern -> group keys with origins
        self.origins: dict[str, set[str]] = {}  # group key -> origins with a best entry
        self.capacity: dict[Key, Capacity] = {}
        self.policies: dict[str, str] = {}  # group name -> policy (default local_first)
        self._current: dict[str, dict[str, float]] = {}  # smooth round robin state
        self.changed_capacity: set[Key] = set()  # to flood at the next chance
        #: some group has members somewhere: only then does a message ask for a pick
        self.active = False
        #: group keys with messages waiting here that no member here has room for (the
        #: queue feature says so after each pass): ``local_first`` sends elsewhere then,
        #: where free credit is advertised
        self.saturated: set[str] = set()
        # candidates of a message that starts here, by (group key, topic): a pick per
        # message must not rebuild them; any change of routes or links clears it
        self._cands: dict[tuple[str, str], dict[str, int]] = {}
        self._keys: dict[str, list[str]] = {}  # topic -> matching group keys, sorted
        # step() of a relay on the usual path, by (group key, target, topic, path)
        self._steps: dict[tuple[str, str, str, Path], tuple[str | None, str, bool]] = {}
        self.keeps = KeptTopics(table.local_branches)  # topic -> no link may take it?

    def invalidate(self) -> None:
        """Routes changed (a link came or went, a group key's best entry changed)."""
        self._cands.clear()
        self._keys.clear()
        self._steps.clear()

    # -- fed by the engine -------------------------------------------------------------------

    def changed(self, key: Key, present: bool) -> None:
        """The best entry of ``key`` (a group key) changed: it is there (``present``) or
        went."""
        gkey, origin = key
        parts = split_key(gkey)
        if parts is None:
            return
        self.invalidate()
        origins = self.origins.get(gkey)
        if present:
            if origins is None:
                origins = self.origins[gkey] = set()
                self._match.insert(parts[1], gkey)
            origins.add(origin)
        elif origins is not None and origin in origins:
            origins.discard(origin)
            self.capacity.pop(key, None)
            self._current.get(gkey, {}).pop(origin, None)
            if not origins:
                del self.origins[gkey]
                self._current.pop(gkey, None)
                self._match.remove(parts[1], gkey)
        self.active = bool(self.origins)

    # -- capacity ------------------------------------------------------------------------------

    def set_capacity(self, gkey: str, origin: str, cap: Capacity) -> bool:
        """Capacity heard (or, for this node, measured); False if not newer than held, or
        if ``origin`` has no entry of ``gkey`` here (its group is gone, or out of reach):
        only the withdrawal of that entry removes a capacity entry (:meth:`changed`), so
        one kept without it would stay for ever, and be flooded and sent on every link
        that comes up. Nothing is lost by refusing it: a picker only weighs origins it
        has an entry of, and capacity travels behind the interest it is about (the
        engine's adverts leave before the queue feature's QCAP, on every link)."""
        key = (gkey, origin)
        if origin not in self.origins.get(gkey, ()):
            return False
        old = self.capacity.get(key)
        if old is not None and old[0] >= cap[0]:
            return False
        self.capacity[key] = cap
        self.changed_capacity.add(key)
        return True

    def take_changed(self) -> list[tuple[str, str, int, int, int]]:
        """Capacity entries changed since the last call (to flood), for known origins."""
        out = []
        for gkey, origin in sorted(self.changed_capacity):
            cap = self.capacity.get((gkey, origin))
            if cap is not None:
                out.append((gkey, origin, *cap))
        self.changed_capacity.clear()
        return out

    def annotate(self, rows: list[dict[str, object]]) -> list[dict[str, object]]:
        """Interest rows (:meth:`InterestTable.interest`) with, for a group key, the group,
        its pattern and the capacity behind the entry (members, free credit)."""
        for row in rows:
            parts = split_key(str(row["pattern"]))
            if parts is None:
                continue
            cap = self.capacity.get((str(row["pattern"]), str(row["origin"])))
            row["group"], row["group_pattern"] = parts
            row["members"], row["free"] = (None, None) if cap is None else cap[1:]
        return rows

    def all_capacity(self) -> list[tuple[str, str, int, int, int]]:
        return [(g, o, *cap) for (g, o), cap in sorted(self.capacity.items())]

    # -- routing --------------------------------------------------------------------------------

    def next_hop(self, gkey: str, origin: str) -> str | None:
        """The link toward ``origin``'s members of ``gkey``; None: no route (or local)."""
        best = self._table.best.get((gkey, origin))
        return None if best is None else best[0]

    def step(
        self, gkey: str, target: str, topic: str, path: Path
    ) -> tuple[str | None, str, bool] | None:
        """Where a message of ``gkey`` meant for ``target`` goes from this node:
        ``(link or None = deliver here, target, picked again?)``; None: nowhere (no
        member left that it may reach). A target no longer reachable (or this node, when
        its last member left) is replaced by a fresh pick among the origins not on
        ``path``, or with none left, among those on it (:meth:`_pick_back`): the message
        still reaches one member, and a node at most twice (:func:`revisit_refused`)."""
        key = (gkey, target, topic, path)
        hit = self._steps.get(key)
        if hit is not None:
            return hit
        best = self._table.best.get((gkey, target))
        if best is not None and target not in path:
            via = best[0]
            if via is None:
                return None, target, False  # members here
            link = self._table.links[via]
            # the usual case: on its way, the route still there (the checks of candidates)
            if (
                link.up
                and link.can_send
                and not path_holds(path, link.peer)
                and not any(p in path for p in best[1])
                and not ttl_spent(len(path) + 1, link.options.ttl)
                and link.filter.allows_topic(topic)
                and not self.keeps(topic)
            ):
                if len(self._steps) >= 4096:
                    self._steps.clear()
                hit = self._steps[key] = (via, target, False)
                return hit
        if best is not None and target in path:  # on its way back (see below)
            back = self._back_via(gkey, target, topic, path)
            if back is not None:
                return back[0], target, False
        cands = self.candidates(gkey, topic, path)
        again = target not in cands
        if again:
            picked = self.pick_one(gkey, topic, path)
            if picked is None:
                return self._pick_back(gkey, topic, path)
            target = picked
        return self.next_hop(gkey, target), target, again

    def _pick_back(self, gkey: str, topic: str, path: Path) -> tuple[str | None, str, bool] | None:
        """No member off the message's path is left to reach: one on it, if any (the node
        it came from, whose member is still there while the one it was sent to left). It
        goes back along the best entry toward that node, which the path rules would
        refuse: :func:`revisit_refused` bounds that instead (each node at most twice on
        a path, and the links' ttl)."""
        back: dict[str, tuple[str | None, int]] = {}
        for origin in set(path):
            if origin == self.broker_id or origin not in self.origins.get(gkey, ()):
                continue
            way = self._back_via(gkey, origin, topic, path)
            if way is not None:
                back[origin] = (way[0], len(self._table.best[(gkey, origin)][1]))
        if not back:
            return None
        nearest = min(hops for _, hops in back.values())
        weights = {
            o: self._weight(gkey, o, "round_robin") for o, (_, h) in back.items() if h == nearest
        }
        target = self._smooth(gkey, weights)
        return back[target][0], target, True

    def _back_via(self, gkey: str, target: str, topic: str, path: Path) -> tuple[str | None] | None:
        """``(link,)`` toward ``target``, a node on the message's path, by its best entry
        (``(None,)``: members here); None: no way it may take (the link is down or refuses
        the topic, the ttl is spent, or the next node would be on the path a third time)."""
        best = self._table.best.get((gkey, target))
        if best is None:
            return None
        via, bpath = best
        if via is None:
            return (None,)
        link = self._table.links[via]
        if (
            not link.up
            or not link.can_send
            or path.count(link.peer) > 1
            or path_holds(bpath, self.broker_id)
            or ttl_spent(len(path) + 1, link.options.ttl)
            or not link.filter.allows_topic(topic)
            or self.keeps(topic)
        ):
            return None
        return (via,)

    def pick(
        self, topic: str, path: Path = (), exclude: Iterable[str] = (), held: Held | None = None
    ) -> list[tuple[str, str]]:
        """One origin per group key matching ``topic``: ``[(group key, origin)]``.
        ``path``: nodes the message crossed (never picked, nor reached through). ``held``
        gets the keys a local branch keeps ``topic`` from (no member here: it is lost)."""
        out = []
        keys = self._keys.get(topic)
        if keys is None:
            if len(self._keys) >= 4096:
                self._keys.clear()
            keys = self._keys[topic] = sorted(self._match.match(topic))
        for gkey in keys:
            origin = self.pick_one(gkey, topic, path, exclude)
            if origin is not None:
                out.append((gkey, origin))
            elif held is not None and self.keeps(topic):
                held.append(gkey)  # (kept: only a member here was a candidate)
        return out

    def pick_one(
        self, gkey: str, topic: str, path: Path = (), exclude: Iterable[str] = ()
    ) -> str | None:
        """The origin that gets a message on ``topic`` for ``gkey`` (None: none left)."""
        cands = self.candidates(gkey, topic, path, exclude)
        if len(cands) <= 1:
            return next(iter(cands), None)
        policy = self._policy(gkey)
        me = self.broker_id
        if policy == "local_first":
            if me in cands:
                if gkey not in self.saturated:
                    return me
                free = {o: h for o, h in cands.items() if o != me and self._free(gkey, o)}
                if not free:
                    return me  # (nobody else has room either: it waits here)
                cands = free
            nearest = min(cands.values())
            cands = {o: h for o, h in cands.items() if h == nearest}
        weights = {o: self._weight(gkey, o, policy) for o in cands}
        return self._smooth(gkey, weights)

    def _policy(self, gkey: str) -> str:
        parts = split_key(gkey)
        return self.policies.get(parts[0], DEFAULT_POLICY) if parts else DEFAULT_POLICY

    def candidates(
        self, gkey: str, topic: str, path: Path = (), exclude: Iterable[str] = ()
    ) -> dict[str, int]:
        """Origins of ``gkey`` a message on ``topic`` may go to from here: origin -> hops
        (shared and cached for a message that starts here: callers must not modify it)."""
        if not path and not exclude:
            hit = self._cands.get((gkey, topic))
            if hit is None:
                if len(self._cands) >= 4096:
                    self._cands.clear()
                hit = self._cands[(gkey, topic)] = self._candidates(gkey, topic, (), ())
            return hit
        return self._candidates(gkey, topic, path, exclude)

    def _candidates(
        self, gkey: str, topic: str, path: Path, exclude: Iterable[str]
    ) -> dict[str, int]:
        table = self._table
        hops_after = len(path) + 1
        skip = set(exclude)
        out: dict[str, int] = {}
        for origin in self.origins.get(gkey, ()):
            if origin in skip or origin in path:
                continue
            best = table.best.get((gkey, origin))
            if best is None:
                continue
            via, bpath = best
            if via is None:
                out[origin] = 0
                continue
            link = table.links[via]
            if (
                not link.up
                or not link.can_send
                or path_holds(path, link.peer)
                or path_holds(bpath, self.broker_id)
                or any(p in path for p in bpath)
                or ttl_spent(hops_after, link.options.ttl)
                or not link.filter.allows_topic(topic)
                or self.keeps(topic)
            ):
                continue
            out[origin] = len(bpath)
        return out

    def _free(self, gkey: str, origin: str) -> int:
        """The free credit ``origin`` advertises for ``gkey`` (one if none heard)."""
        cap = self.capacity.get((gkey, origin))
        return 1 if cap is None else max(cap[2], 0)

    def _weight(self, gkey: str, origin: str, policy: str) -> int:
        cap = self.capacity.get((gkey, origin))
        members = 1 if cap is None else max(cap[1], 0)
        if policy == "weighted":
            return self._free(gkey, origin)
        return members

    def _smooth(self, gkey: str, weights: dict[str, int]) -> str:
        """Smooth weighted round robin (as nginx's): over any run of picks each origin's
        share is its weight's share, evenly spread. All weights 0: equal shares."""
        if not any(weights.values()):
            weights = dict.fromkeys(weights, 1)
        current = self._current.setdefault(gkey, {})
        total = sum(weights.values())
        chosen = ""
        top = 0.0
        for origin in sorted(weights):
            c = current.get(origin, 0.0) + weights[origin]
            current[origin] = c
            if not chosen or c > top:
                chosen, top = origin, c
        current[chosen] -= total
        return chosen
