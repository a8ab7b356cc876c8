"""Dedupe of persistent messages by ``(origin, incarnation, pseq)``: only another path
(a route change in a mesh) repeats a persistent message once store-and-forward has taken
it exactly once per link; this drops those repeats. (The two copies of one idempotent
publish that a client sent through two nodes have two origins: they are told apart by
their ``(producer, pseq)``, recorded in the store: :mod:`zbroker.store.producers`.)

Its state is kept with the store (:mod:`zbroker.store.seen`): loaded when the node starts,
and what a pass changed written in that pass's transaction, so a node restarted in a mesh
still drops a copy that comes again by another path."""

from __future__ import annotations

from ...store.seen import SeenJournal

__all__ = ["PersistentDedupe"]


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
