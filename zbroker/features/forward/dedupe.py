"""Dedupe of persistent messages by ``(origin, incarnation, pseq)``: only another path
(a route change in a mesh) repeats a persistent message once store-and-forward has taken
it exactly once per link; this drops those repeats. (The two copies of one idempotent
publish that a client sent through two nodes have two origins: they are told apart by
their ``(producer, pseq)``, recorded in the store: :mod:`zbroker.store.producers`.)

Its state is kept with the store (:mod:`zbroker.store.seen`): loaded when the node starts,
and what a pass changed written in that pass's transaction, so a node restarted in a mesh
still drops a copy that comes again by another path."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ...routing.flood import FLOOD
from ...routing.hosts import MARK
from ...store.seen import SeenJournal

__all__ = ["PersistentDedupe", "RoutedTargets"]


class PersistentDedupe:
    """Repeats of persistent messages by ``(origin, incarnation, pseq)``.

    Like :class:`~zbroker.routing.dedupe.DedupeWindow` (a floor below which everything was
    seen, plus the seqs seen above it), but built for a stream with permanent gaps: a node
    on one branch sees only the persistent messages routed to it, so the set above the
    floor never fills its gaps. When it outgrows ``window`` the older half is folded into
    the floor at once (amortized O(log n) per message, where the MSGS window pays O(window)
    per message once full). A copy arriving by another path more than ``window / 2``
    messages late would be taken for a repeat: routes in a mesh converge long before that.
    An origin first heard of mid-stream starts with the floor at 0, not at its first
    message: older ones may still come (from a relay that held them) and are new here.
    """

    def __init__(
        self, window: int = 65_536, max_origins: int = 65_536, journal: SeenJournal | None = None
    ) -> None:
        self._window = window
        self._max_origins = max_origins
        #: the store's record of the state (None: in memory only)
        self._journal = journal
        self._origins: dict[tuple[str, int], tuple[list[int], set[int]]] = (
            {} if journal is None else journal.load()
        )
        self.duplicates = 0

    def seen(self, origin: str, incarnation: int, pseq: int) -> bool:
        key = (origin, incarnation)
        state = self._origins.get(key)
        journal = self._journal
        if state is None:
            if len(self._origins) >= self._max_origins:
                oldest = next(iter(self._origins))
                del self._origins[oldest]
                if journal is not None:
                    journal.forget(oldest)
            # nothing below it is known seen: an older message may come later by a longer
            # path (and is new here), so the floor starts at 0, not at this one
            state = self._origins[key] = ([1], set()) if pseq == 1 else ([0], {pseq})
            if journal is not None:
                journal.changed[key] = state
                if pseq != 1:
                    journal.added.append((origin, incarnation, pseq))
            return False
        floor, above = state
        if pseq <= floor[0] or pseq in above:
            self.duplicates += 1
            return True
        if journal is not None:
            journal.changed[key] = state
        if pseq == floor[0] + 1:
            f = pseq
            while f + 1 in above:
                f += 1
                above.discard(f)
            floor[0] = f
            return False
        above.add(pseq)
        if journal is not None:
            journal.added.append((origin, incarnation, pseq))
        if len(above) > self._window:
            ordered = sorted(above)
            cut = len(ordered) // 2
            floor[0] = ordered[cut - 1]
            above.clear()
            above.update(ordered[cut:])
            f = floor[0]
            while f + 1 in above:
                f += 1
                above.discard(f)
            floor[0] = f
        return False


class RoutedTargets:
    """The targets this node has routed each recent persistent message to, so that a
    repeat (the same message by another path, or an idempotent publish a client sent
    again through another node) goes on for the targets its copy names that no earlier
    copy took from here, and only for those. Two copies of one message meet at a node
    with different targets when routes change under them (a mesh under faults): dropping
    the second whole lost its targets (found by ``benchmarks/fault_mesh.py``).

    Kept in memory for the last ``limit`` messages; one not known here (older, or taken
    before a restart of this node) goes on for every target its copy names: the targets
    drop what they took already (their dedupe is kept with their store)."""

    def __init__(self, limit: int = 16_384) -> None:
        self._limit = limit
        #: message key -> targets routed from here (None: computed here, so all of them)
        self._routed: OrderedDict[tuple[Any, ...], set[str] | None] = OrderedDict()

    def note(self, key: tuple[Any, ...], targets: tuple[str, ...] | None, me: str) -> None:
        """The first copy of ``key`` was routed here for ``targets`` (None: all)."""
        routed = self._routed
        routed[key] = None if targets is None else {*targets, me}
        routed.move_to_end(key)
        if len(routed) > self._limit:
            routed.popitem(last=False)

    def new_targets(
        self, key: tuple[Any, ...], targets: tuple[str, ...] | None, me: str
    ) -> tuple[str, ...]:
        """The targets a repeat of ``key`` names that were not routed from here yet (now
        counted as routed); () when it is a plain repeat. A repeat with computed targets
        (None), or on its way to a host or flooded, is always plain: its first copy took
        every way this node had."""
        if not targets or targets[0][:1] in (MARK, FLOOD):
            return ()
        if key not in self._routed:
            self.note(key, (), me)  # (forgotten: only this node is known to have it)
        routed = self._routed[key]
        if routed is None:
            return ()
        new = tuple(t for t in targets if t not in routed)
        routed.update(new)
        return new
