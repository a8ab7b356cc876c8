"""What the monitor serves: an immutable snapshot of the node, taken in the loop.

The loop builds a :class:`Snapshot` (the same STATUS, ROUTES and PEERS replies a client
gets, the per-link totals, the store probe) and publishes it by swapping one reference;
the HTTP thread only ever reads the reference it finds, so a scrape never takes a lock
the loop waits on and never reads a structure the loop is changing.

Per-link counters live on :class:`~zbroker.links.state.Link` objects, which vanish with
an accepted or discovered link; :class:`LinkTotals` folds each link's growth into totals
per (link name, peer, kind) kept for the life of the node, so exported counters never go
down. The kind is in the key because a node may hold two links of one name to one peer:
the one it dialled and the one the peer dialled under the same name. Totals of a key no
link has had for :data:`FORGET_AFTER` are dropped (their series go), so a node whose
peers come and go under new IDs does not export every link it ever had.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...wire.codec import unpack

if TYPE_CHECKING:
    from ...links.state import Link

__all__ = [
    "LINK_FIELDS",
    "LinkKey",
    "LinkTotals",
    "Snapshot",
    "link_key",
    "probe_store",
    "rates",
    "store_bytes",
]

#: the per-link counters folded into totals, in this order
LINK_FIELDS = ("msgs_in", "msgs_out", "bytes_in", "bytes_out", "drops")

#: seconds the totals of a (link, peer, kind) no link has any more are kept: one back
#: within them adds to them; after, its series are gone and one back starts at 0 again
#: (a counter reset, which Prometheus's rate() and increase() take as such)
FORGET_AFTER = 3600.0

#: a link's series: (name, peer, kind); peer is "" before the link's first handshake
LinkKey = tuple[str, str, str]


def link_key(name: str, peer: str | None, kind: str) -> LinkKey:
    return (name, peer or "", kind)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One moment of the node. Built in the loop, then only read (never changed).

    The replies are kept as the msgpack bytes a client would receive, so they are copies
    no one can change, cost the loop one C call each, and decode (in the HTTP thread,
    once per snapshot) to exactly what the CLI's ``--json`` prints."""

    taken: float  # time.monotonic() in the loop when built
    wall: float  # time.time() then
    packed: dict[str, bytes]  # "status", "routes", "peers": the replies' bodies, packed
    #: (link, peer, kind) -> totals in LINK_FIELDS order, for the life of the node
    link_totals: dict[LinkKey, tuple[int, ...]]
    #: (link, peer, kind) -> (messages in, messages out) per second since the last snapshot
    link_rates: dict[LinkKey, tuple[float, float]]
    store_error: str | None  # why the store is not writable (None: it is)
    store_bytes: int  # the store's files on disk (database, journal, WAL)
    #: decoded replies and derived documents, filled by readers on first use
    cache: dict[str, Any] = field(default_factory=dict, compare=False)

    def doc(self, name: str) -> Any:
        """The decoded reply ``name`` ("status", "routes", "peers")."""
        value = self.cache.get(name)
        if value is None:
            value = self.cache[name] = unpack(self.packed[name])
        return value


class LinkTotals:
    """Cumulative per-link counters that outlive the links (owned by the loop thread)."""

    def __init__(self) -> None:
        self.totals: dict[LinkKey, list[int]] = {}
        # links seen at the last fold (held, so an id is never reused meanwhile) and the
        # values folded then
        self._seen: dict[int, tuple[Link, tuple[int, ...]]] = {}
        self._gone_at: dict[LinkKey, float] = {}  # keys without a link: since when

    def fold(self, link: Link, gone_at: float | None = None) -> None:
        """Add what ``link`` counted since its last fold to its totals; ``gone_at``: it
        has left the node's links then (folded for the last time, not held any more)."""
        values = (link.msgs_in, link.msgs_out, link.bytes_in, link.bytes_out, link.drops)
        seen = self._seen.get(id(link))
        before = seen[1] if seen is not None else (0,) * len(LINK_FIELDS)
        key = link_key(link.name, link.peer, link.kind.value)
        total = self.totals.setdefault(key, [0] * len(LINK_FIELDS))
        for i, (now, then) in enumerate(zip(values, before, strict=True)):
            if now > then:
                total[i] += now - then
        if gone_at is None:
            self._seen[id(link)] = (link, values)
        else:
            self._seen.pop(id(link), None)
            self._gone_at[key] = gone_at

    def update(self, links: list[Link], now: float) -> dict[LinkKey, tuple[int, ...]]:
        """Fold every current link, forget the links that are gone (their growth was
        folded at their last fold or when they went down) and the totals no link has
        had for FORGET_AFTER (at once if they are all zero), return a copy of the
        totals."""
        current, keys = set(), set()
        for link in links:
            self.fold(link)
            current.add(id(link))
            keys.add(link_key(link.name, link.peer, link.kind.value))
        for gone in [k for k in self._seen if k not in current]:
            del self._seen[gone]
        for key in self.totals.keys() - keys:
            since = self._gone_at.setdefault(key, now)
            # all zero: nothing a counter must keep (a dialled link's key before its
            # handshake named the peer, which would otherwise linger for FORGET_AFTER)
            if now - since >= FORGET_AFTER or not any(self.totals[key]):
                del self.totals[key], self._gone_at[key]
        for key in keys:
            self._gone_at.pop(key, None)
        return {key: tuple(v) for key, v in self.totals.items()}


def probe_store(data_dir: Path) -> str | None:
    """Can the node write its store? Creates and removes a file beside it (a read-only
    or full file system, or an immutable directory, fails even for root); None: yes."""
    probe = data_dir / ".monitor-probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"store directory {data_dir} is not writable: {exc.strerror or exc}"
    store = data_dir / "store.sqlite3"
    if store.exists() and not os.access(store, os.W_OK):
        return f"store {store} is not writable"
    return None


def store_bytes(data_dir: Path) -> int:
    total = 0
    for path in data_dir.glob("store.sqlite3*"):
        try:
            total += path.stat().st_size
        except OSError:  # a journal removed meanwhile
            pass
    return total


def rates(
    prev: Snapshot | None,
    totals: dict[LinkKey, tuple[int, ...]],
    now: float,
) -> dict[LinkKey, tuple[float, float]]:
    """Messages per second in and out of each link since ``prev``."""
    if prev is None or now <= prev.taken:
        return {key: (0.0, 0.0) for key in totals}
    dt = now - prev.taken
    out = {}
    for key, t in totals.items():
        p = prev.link_totals.get(key, (0,) * len(LINK_FIELDS))
        out[key] = (round((t[0] - p[0]) / dt, 3), round((t[1] - p[1]) / dt, 3))
    return out


def stamp() -> tuple[float, float]:
    return time.monotonic(), time.time()
