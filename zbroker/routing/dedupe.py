"""Per-origin duplicate detection with constant memory per origin.

A message ID is ``(origin, incarnation, seq)``. For each ``(origin, incarnation)`` the
window keeps a *floor* (every seq at or below it has been seen) and the set of seqs seen
above it. In-order traffic only moves the floor (O(1), no set); out-of-order arrivals wait
in the set until the gap below them fills. When the set outgrows ``window`` the floor jumps
to the oldest pending seq: the gap is declared lost, which is what at-most-once means for
non-persistent traffic (persistent traffic has its own dedupe, in memory:
``features.forward.PersistentDedupe``; an idempotent publish is also recognised from the
store).

The first seq heard of an origin sets the floor. Seqs below it are mostly messages that
predate our interest, but not all: a publisher's messages of a hosted branch go through a
host (:mod:`zbroker.routing.hosts`) while its others go straight, so the first to arrive
need not be the earliest. Up to ``FIRST_SLACK`` seqs just below the first one are
therefore taken once each (remembered in a set of their own, created only then).

Sans-IO: no clock, no thread; the caller decides when to :meth:`forget` old origins.
"""

from __future__ import annotations

__all__ = ["FIRST_SLACK", "DedupeWindow"]

#: seqs below an origin's first one still taken (once each): they arrived late by another way
FIRST_SLACK = 256


class _Origin:
    __slots__ = ("above", "below", "first", "floor")

    def __init__(self, floor: int) -> None:
        self.floor = floor
        self.above: set[int] = set()
        self.first = floor  # the first seq heard
        self.below: set[int] | None = None  # seqs below it taken since (FIRST_SLACK)


class DedupeWindow:
    """``seen(origin, incarnation, seq)`` answers True for a duplicate and records the rest."""

    def __init__(self, window: int = 4096, max_origins: int = 65_536) -> None:
        self._window = window
        self._max_origins = max_origins
        self._origins: dict[tuple[str, int], _Origin] = {}
        self.duplicates = 0

    def __len__(self) -> int:
        return len(self._origins)

    def state(self, origin: str, incarnation: int) -> _Origin | None:
        """The window of ``(origin, incarnation)``, for a caller's in-order fast path
        (the relay, once per run of one origin's messages): a ``seq`` with
        ``seq == state.floor + 1`` while ``state.above`` is empty is new, and taking it is
        ``state.floor = seq``, exactly what :meth:`seen` would do; any other seq goes
        through :meth:`seen`. Valid until :meth:`seen` registers another origin or
        :meth:`forget` runs."""
        return self._origins.get((origin, incarnation))

    def seen(self, origin: str, incarnation: int, seq: int) -> bool:
        key = (origin, incarnation)
        state = self._origins.get(key)
        if state is None:
            if len(self._origins) >= self._max_origins:
                # forget the oldest-registered origin: bounded memory beats perfect recall
                del self._origins[next(iter(self._origins))]
            # the first message of an origin we hear of: earlier seqs predate our interest
            self._origins[key] = _Origin(seq)
            return False
        floor = state.floor
        if seq <= floor:
            if state.first - FIRST_SLACK <= seq < state.first:
                below = state.below
                if below is None:
                    below = state.below = set()
                if seq not in below:
                    below.add(seq)  # arrived late by another way: new to us
                    return False
            self.duplicates += 1
            return True
        if seq == floor + 1:
            floor += 1
            above = state.above
            if above:
                while floor + 1 in above:
                    floor += 1
                    above.discard(floor)
            state.floor = floor
            return False
        above = state.above
        if seq in above:
            self.duplicates += 1
            return True
        above.add(seq)
        if len(above) > self._window:
            # declare the oldest gap lost and move on
            lowest = min(above)
            above.discard(lowest)
            floor = lowest
            while floor + 1 in above:
                floor += 1
                above.discard(floor)
            state.floor = floor
        return False

    def forget(self, origin: str) -> None:
        """Drop every incarnation of ``origin`` (e.g. its node left for good)."""
        for key in [k for k in self._origins if k[0] == origin]:
            del self._origins[key]
