"""Topics with state: the rules node and client share (sans-IO: no socket, no clock).

A stateful topic holds one current value. Each value carries a **version**, stamped by
the node where it was set (its *owner*): the larger of the owner's clock in microseconds
and the topic's previous version there plus one, so versions of one topic grow on each
node and, across nodes with roughly synchronized clocks, the later write has the larger
version. Two owners of one topic (set on two nodes) is a conflict resolved everywhere the
same way: the larger ``(version, owner)`` wins — the later writer, a tie going to the
higher broker ID (:func:`newer`). A removal is a version too (a *tombstone*), so a value
older than the removal never comes back.

An update travels as an ordinary message whose headers carry ``zb.version`` and
``zb.owner`` (and ``zb.removed`` for a removal). :class:`SnapshotGate` is how a
subscription joins the snapshot (the current values when it started) with the live
updates that reach it meanwhile, without a gap or a duplicate: the subscription is
active *before* the snapshot is taken, so whatever the snapshot lacks arrives live, and
what arrives live that the snapshot already covers is dropped by version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "CANCELLED",
    "OWNER",
    "REMOVED",
    "SESSION_LOST",
    "VERSION",
    "SnapshotGate",
    "Value",
    "newer",
    "next_version",
]

#: headers of a state update (reserved: a ``set`` may not pass them itself)
VERSION = "zb.version"
OWNER = "zb.owner"
REMOVED = "zb.removed"
#: a replica removed because its primary's session was lost (it comes back, maybe with
#: the same version, when the primary does): ``zb.removed`` is 2 then
SESSION_LOST = 2

#: how the node's error for a subscribe or fetch a missing-topic handler cancelled begins
CANCELLED = "cancelled by a missing-topic handler"

#: a value as nodes exchange it: [topic, payload, fmt, headers, version, owner, updated,
#: replica_of]
Value = list[Any]


def newer(version: int, owner: str, than: tuple[int, str] | None) -> bool:
    """Does ``(version, owner)`` win over ``than`` (None: nothing known yet)?"""
    return than is None or (version, owner) > than


def next_version(now_us: int, previous: int) -> int:
    """The version a node stamps on a write: its clock, never below the previous + 1."""
    return max(now_us, previous + 1)


def merge(into: dict[str, Value], values: Iterable[Value]) -> None:
    """Keep, per topic, the winning value of ``values`` and ``into``."""
    for v in values:
        cur = into.get(v[0])
        if cur is None or (v[4], v[5]) > (cur[4], cur[5]):
            into[v[0]] = v


class SnapshotGate:
    """Joins a subscription's snapshot and its live messages (one per subscription).

    ``live(msg)`` is the subscription's callback: until the snapshot arrives, messages
    wait; ``snapshot(values, gone)`` delivers each current value (through ``initial``,
    which flags it), calls ``complete`` (the snapshot-complete marker), then the waiting
    messages, then lets live ones through. A state update (``version_of`` says its
    ``(version, owner)``, None for a plain message) is delivered only if it is newer than
    what the subscriber has seen of its topic (values, removals): so nothing the snapshot
    covered comes twice, and a losing owner's update (older version) is not delivered; nor
    is a removal of a topic the subscriber saw removed already (two owners removing theirs).
    A replica removed because its primary's session was lost (``SESSION_LOST``) is told,
    and forgotten: its value comes again when the primary returns.
    """

    def __init__(
        self,
        deliver: Callable[[Any], None],
        initial: Callable[[Value], Any],
        complete: Callable[[], None],
        version_of: Callable[[Any], tuple[str, int, str, int] | None],
    ) -> None:
        self._deliver = deliver
        self._initial = initial
        self._complete = complete
        self._version_of = version_of
        self._waiting: list[Any] | None = []  # None: the snapshot is in
        self.known: dict[str, tuple[int, str]] = {}  # topic -> newest (version, owner) seen
        self._gone: set[str] = set()  # topics the subscriber last saw removed (or never)
        self.dropped = 0  # live updates the snapshot covered (or an older owner's)

    @property
    def complete(self) -> bool:
        return self._waiting is None

    def live(self, msg: Any) -> None:
        if self._waiting is not None:
            self._waiting.append(msg)
        else:
            self._pass(msg)

    def snapshot(self, values: Iterable[Value], gone: Iterable[Value]) -> None:
        """The snapshot: ``values`` (current values), ``gone`` ([topic, version, owner]
        of removals the snapshot knows of)."""
        known = self.known
        for topic, version, owner in gone:
            known[topic] = (version, owner)
            self._gone.add(topic)
        for v in sorted(values, key=lambda v: str(v[0])):
            seen = known.get(v[0])
            if newer(v[4], v[5], seen):
                known[v[0]] = (v[4], v[5])
                self._initial(v)
        waiting, self._waiting = self._waiting or [], None
        self._complete()
        for msg in waiting:
            self._pass(msg)

    def _pass(self, msg: Any) -> None:
        stamp = self._version_of(msg)
        if stamp is not None:
            topic, version, owner, removed = stamp
            if removed == SESSION_LOST:
                # told once; what comes when the primary returns is new whatever its version
                if topic in self._gone:
                    self.dropped += 1
                    return
                self.known.pop(topic, None)
                self._gone.add(topic)
                self._deliver(msg)
                return
            seen = self.known.get(topic)
            if not newer(version, owner, seen):
                self.dropped += 1
                return
            self.known[topic] = (version, owner)
            if removed:
                if topic in self._gone:
                    # removed already: two owners each removing their copy tell it once
                    self._gone.add(topic)
                    self.dropped += 1
                    return
                self._gone.add(topic)
            else:
                self._gone.discard(topic)
        self._deliver(msg)
