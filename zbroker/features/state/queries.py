"""Network-wide state queries (fetch, snapshot, remove) as an echo over the links.

A query starts on the node a client asked (or arrives on a link). The node forwards it
once to each of its other links that are up, does its own part, and answers (the client,
or the link it came by) once its part is done and every link it forwarded to has answered
or gone down. A query ID seen before is answered empty at once, so a mesh asks each node
once. Answers merge by :func:`zbroker.stateful.merge` (the winning value per topic), and
every kind collects removals too: a value older than a removal is not part of a result.
A query answered at its deadline while links it asked had not answered, or one of them
went down first, is ``cut`` (its answer says so, also through relays): only a replica's
sync cares (it is not complete).

Deadlines shrink per hop: a query carries how long its sender still waits (relative, as
clocks differ), and a relay waits :data:`HOP_MARGIN` less than that (at most its own
relay timeout), so each node gives up, and answers with what it has, before the node it
answers does. A node reached with less than :data:`MIN_FORWARD` left asks no further
(what its links hold is a missing part: ``cut``).

A ``snapshot`` query's own part waits until the node routes the subscription's pattern
toward its origin (the subscriber's node): from then on every update there reaches the
subscriber, so nothing the answer misses is lost (the version rule drops what it holds
twice). This module is sans-IO: the feature gives it the time and sends its frames.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...stateful import Value, merge
from ...wire.state import encode_answer

__all__ = [
    "HOP_MARGIN",
    "MIN_FORWARD",
    "Query",
    "QueryBook",
    "answer_frames",
    "frame_budget",
    "relay_window",
]

#: query IDs remembered (a mesh's second copy is answered empty)
SEEN_QUERIES = 10_000
#: how much sooner a relay gives up than the node that asked it (its answer's way back)
HOP_MARGIN = 0.25
#: a relay left less than this asks no further links (their answers could not come back)
MIN_FORWARD = 0.25


def relay_window(budget_ms: int | None, relay_timeout: float) -> float:
    """How long a relay waits for a query whose sender waits ``budget_ms`` more."""
    if budget_ms is None:  # (a sender that did not say)
        return relay_timeout
    return max(0.0, min(relay_timeout, budget_ms / 1000 - HOP_MARGIN))


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
    #: a part is missing: a deadline passed before a link asked had answered, or it went
    #: down (here, or at a node behind one, which said so)
    cut: bool = False
    #: links asked that did not answer here (their whole part is missing)
    missed: set[str] = field(default_factory=set)

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
                # (its part is missing: a sync must not take the rest as complete)
                q.waiting.discard(link)
                q.missed.add(link)
                q.cut = True
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
            q.missed |= q.waiting
            q.waiting.clear()
        return late


def frame_budget(peer_max_frame: int) -> int:
    """Bytes of values and removals one answer frame may carry to a peer."""
    limit = peer_max_frame or (1 << 20)
    return max(1024, min(limit // 2, 256 * 1024))


def answer_frames(
    qid: str, values: list[Any], gone: list[Any], removed: int, budget: int, cut: bool
) -> Iterable[bytes]:
    """The answer in frames that each fit ``budget``, values and removals alike (the last
    one says so, and whether a part is missing)."""
    chunk: list[Any] = []
    chunk_gone: list[Any] = []
    size = 0
    for v in values:
        n = len(v[0]) + len(v[1]) + 96 + (len(str(v[3])) if v[3] else 0)
        if size and size + n > budget:
            yield encode_answer(qid, chunk, chunk_gone, 0, False)
            chunk, size = [], 0
        chunk.append(v)
        size += n
    for g in gone:
        n = len(g[0]) + len(g[2]) + 16
        if size and size + n > budget:
            yield encode_answer(qid, chunk, chunk_gone, 0, False)
            chunk, chunk_gone, size = [], [], 0
        chunk_gone.append(g)
        size += n
    yield encode_answer(qid, chunk, chunk_gone, removed, True, cut)
