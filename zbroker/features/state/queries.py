"""Network-wide state queries (fetch, snapshot, remove) as an echo over the links.

A query starts on the node a client asked (or arrives on a link). The node forwards it
once to each of its other links that are up, does its own part, and answers (the client,
or the link it came by) once its part is done and every link it forwarded to has answered
or gone down. A query ID seen before is answered empty at once, so a mesh asks each node
once. Answers merge by :func:`zbroker.stateful.merge` (the winning value per topic), and
every kind collects removals too: a value older than a removal is not part of a result.
A query answered at its deadline while links it asked had not answered is ``cut`` (its
answer says so, also through relays): only a replica's sync cares (it is not complete).

A ``snapshot`` query's own part waits until the node routes the subscription's pattern
toward its origin (the subscriber's node): from then on every update there reaches the
subscriber, so nothing the answer misses is lost (the version rule drops what it holds
twice). This module is sans-IO: the feature gives it the time and sends its frames.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...stateful import Value, merge

__all__ = ["Query", "QueryBook"]

#: query IDs remembered (a mesh's second copy is answered empty)
SEEN_QUERIES = 10_000


@dataclass(eq=False)
class Query:
    qid: str
    kind: str
    pattern: str
    origin: str
    #: who waits for the answer: a link (its engine id), or None (a local request)
    reply_to: str | None
    deadline: float
    request: Any = None  # the local client request
    #: a query this node asked for itself (a replica's sync): its answer goes here, and
    #: this node's own values are not part of it
    on_done: Callable[[Query], None] | None = None
    checked: bool = False  # missing-topic handlers were asked already (its second run)
    waiting: set[str] = field(default_factory=set)  # links forwarded to, not yet answered
    local_done: bool = False
    values: dict[str, Value] = field(default_factory=dict)
    gone: dict[str, list[Any]] = field(default_factory=dict)
    removed: int = 0
    #: a part is missing: a deadline passed before a link asked had answered (here, or
    #: at a node behind one, which said so)
    cut: bool = False

    @property
    def done(self) -> bool:
        return self.local_done and not self.waiting

    def add(self, values: list[Value], gone: list[list[Any]], removed: int) -> None:
        merge(self.values, values)
        for g in gone:
            cur = self.gone.get(g[0])
            if cur is None or (g[1], g[2]) > (cur[1], cur[2]):
                self.gone[g[0]] = g
        self.removed += removed

    def result(self) -> tuple[list[Value], list[list[Any]]]:
        """Values, and removals newer than any value of their topic."""
        values = self.values
        gone = [
            g
            for t, g in self.gone.items()
            if t not in values or (g[1], g[2]) > tuple(values[t][4:6])
        ]
        live = [
            v
            for t, v in values.items()
            if t not in self.gone or (v[4], v[5]) > tuple(self.gone[t][1:3])
        ]
        return live, gone


class QueryBook:
    """The queries in flight on one node."""

    def __init__(self) -> None:
        self.pending: dict[str, Query] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.route_waits = 0  # snapshot parts that waited for the route
        self.route_timeouts = 0  # ... and answered at the deadline without it
        self.expired = 0  # queries answered at the deadline without every link

    def seen(self, qid: str) -> bool:
        """Was ``qid`` seen before (then answer empty)? Remembers it."""
        if qid in self._seen:
            return True
        self._seen[qid] = None
        if len(self._seen) > SEEN_QUERIES:
            self._seen.popitem(last=False)
        return False

    def link_gone(self, link: str) -> list[Query]:
        """A link went down: queries no longer wait for it; those it asked are dropped
        (nobody to answer). Returns the queries now done."""
        done = []
        for qid, q in list(self.pending.items()):
            if q.reply_to == link:
                del self.pending[qid]
                continue
            if link in q.waiting:
                q.waiting.discard(link)
                if q.done:
                    done.append(q)
        return done

    def overdue(self, now: float) -> list[Query]:
        """Queries past their deadline (what answered so far is their answer)."""
        late = [q for q in self.pending.values() if now >= q.deadline]
        for q in late:
            if not q.local_done:
                self.route_timeouts += 1
            else:
                self.expired += 1
            q.cut = q.cut or bool(q.waiting)
            q.waiting.clear()
        return late
