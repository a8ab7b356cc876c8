"""The topics-with-state feature: STATE_SET, STATE_REMOVE, STATE_FETCH, and the network
queries (STATE_QUERY / STATE_ANSWER) that reach every node's values.

A ``set`` stores the value (its owner is this node), publishes it as an ordinary message
whose headers carry its version, and answers after the store commit. ``remove`` and
``fetch`` ask every node (:mod:`.queries`); a subscriber's snapshot is a fetch whose
remote parts wait until the subscription's interest reached them.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any

from ...errors import InvalidTopic, ProtocolError
from ...links.state import Link, LinkState
from ...node import Feature, Op, Request
from ...node.context import Context
from ...routing.branches import covers, holds
from ...stateful import CANCELLED, OWNER, REMOVED, VERSION
from ...store.state import StateTable
from ...topics import validate_pattern, validate_publish_topic
from ...wire import frames
from ...wire.codec import unpack
from ...wire.state import check_answer, check_query, encode_answer, encode_query
from .missing import MissingTopics
from .queries import MIN_FORWARD, Query, QueryBook, answer_frames, frame_budget, relay_window
from .replication import Replicas
from .topics import Publish, StateTopics

__all__ = ["StateFeature"]

log = logging.getLogger("zbroker.state")

#: how long a query waits for the links it asked, then answers with what it has (below a
#: client's request timeout: a peer that stopped answering delays a subscribe, never fails
#: it); a relay waits at most RELAY_TIMEOUT, and less than the query says its sender still
#: waits (:func:`.queries.relay_window`): every hop gives up before the one it answers
QUERY_TIMEOUT = 3.0
RELAY_TIMEOUT = 2.5
_RESERVED_HEADERS = (VERSION, OWNER, REMOVED)


class StateFeature(Feature):
    name = "state"
    sink_sources = ("replica",)

    def __init__(self) -> None:
        self.book = QueryBook()
        self._ids = itertools.count(1)
        #: frames to send after the link flush (a query's is encoded then: its budget is
        #: what is left of its deadline when it leaves)
        self._out: list[tuple[Link, bytes | Query]] = []
        self._route_wait: list[Query] = []
        self.sets = 0
        self.removals = 0
        self.answered = 0  # queries from links (each once)

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        assert ctx.store is not None
        self.table = StateTable(ctx.store.db)
        self.topics = StateTopics(self.table, ctx.broker_id, ctx.config.tombstone_ttl)
        self.replicas = Replicas(ctx.config.links, self.topics, self._sync, self._publish_here)
        for branch in self.replicas.branches():
            ctx.add_interest(branch, "replica")
        self.missing = MissingTopics(ctx, self.topics, self.replicas, self._queue)

    def _queue(self, link: Link, frame: bytes) -> None:
        self._out.append((link, frame))

    def ops(self) -> Sequence[Op]:
        return (
            Op(frames.STATE_SET, self._set, _subject("publish", "topic")),
            Op(frames.STATE_REMOVE, self._remove, _subject("publish")),
            Op(frames.STATE_FETCH, self._fetch, _subject("subscribe")),
            Op(frames.STATE_HANDLER, self.missing.register, _subject("subscribe", "branch")),
            Op(frames.STATE_MISSING, self.missing.verdict),
        )

    def link_frames(self) -> Mapping[int, Any]:
        return {
            frames.STATE_QUERY: self._on_query,
            frames.STATE_ANSWER: self._on_answer,
            frames.MISSING_ASK: self.missing.on_ask,
            frames.MISSING_REPLY: self.missing.on_reply,
        }

    # -- requests ----------------------------------------------------------------------------

    def _set(self, req: Request) -> None:
        ctx = self._ctx
        get = req.body.get
        topic, payload, fmt, headers = get("topic"), get("payload"), get("fmt", 0), get("headers")
        try:
            _check_set(topic, payload, fmt, headers)
        except (ProtocolError, InvalidTopic) as exc:
            ctx.refuse(req, exc)
            return
        assert isinstance(topic, str) and isinstance(payload, bytes)
        version, update = self.topics.set(topic, payload, fmt, headers)
        self.sets += 1
        self._publish([update])
        ctx.confirm(req, frames.STATE_SET, {"version": version, "owner": ctx.broker_id})

    def _remove(self, req: Request) -> None:
        self._start(req, "remove")

    def _fetch(self, req: Request) -> None:
        self._start(req, "snapshot" if req.body.get("snapshot") else "fetch")

    def _start(self, req: Request, kind: str) -> None:
        ctx = self._ctx
        pattern = req.body.get("pattern")
        try:
            validate_pattern(pattern)
        except InvalidTopic as exc:
            ctx.error(req, str(exc))
            return
        assert isinstance(pattern, str)
        qid = f"{ctx.broker_id}/{ctx.incarnation}/{next(self._ids)}"
        self.book.seen(qid)
        q = Query(qid, kind, pattern, ctx.broker_id, None, time.monotonic() + QUERY_TIMEOUT, req)
        # a pattern inside a branch this node replicates, in sync: the replicas answer
        skip = self.replicas.served_here(pattern) if kind != "remove" else set()
        self._open(q, None, skip=skip)

    def _sync(self, link: Link, branch: str, done: Callable[[Query], None]) -> None:
        """A replica's sync: a snapshot of ``branch`` over ``link`` only, to ``done``."""
        ctx = self._ctx
        qid = f"{ctx.broker_id}/{ctx.incarnation}/{next(self._ids)}"
        self.book.seen(qid)
        deadline = time.monotonic() + QUERY_TIMEOUT
        q = Query(qid, "snapshot", branch, ctx.broker_id, None, deadline, on_done=done)
        self._open(q, None, only=link)

    def _publish_here(self, updates: list[Publish]) -> None:
        """Deliver to this node's subscribers only (a replica caught up or removed: the
        rest of the network has its updates from the primary)."""
        if not updates:
            return
        ctx = self._ctx
        me, inc, now = ctx.broker_id, ctx.incarnation, time.time()
        msgs = []
        for topic, payload, fmt, headers in updates:
            ctx.counters.seq += 1
            msgs.append([topic, payload, fmt, headers, me, inc, ctx.counters.seq, now, [me]])
        ctx.pipeline.take(msgs, [((me,), (), 0)] * len(msgs), persistent=False)

    def _publish(self, updates: list[Publish]) -> None:
        if updates:
            self._ctx.pipeline.originate(list(updates), persistent=False)

    # -- the echo ------------------------------------------------------------------------------

    def _open(
        self, q: Query, came_by: Link | None, only: Link | None = None, skip: Set[str] = frozenset()
    ) -> None:
        """Forward ``q`` to the other links (``only`` that one; not those in ``skip``), do
        this node's part, answer if done."""
        self.book.pending[q.qid] = q
        forward = q.deadline - time.monotonic() >= MIN_FORWARD
        links = list(self._ctx.links.by_engine_id.values())
        if q.request is not None and covers(self._ctx.engine.local_branches, q.pattern):
            links = []  # (a client's query of a local branch stays here, as its interest)
        for link in links:
            if link is came_by or link.state is not LinkState.UP or link.engine_id in skip:
                continue
            if only is not None and link is not only:
                continue
            if not forward:
                q.cut = True  # (too little time left for an answer to come back)
                continue
            q.waiting.add(link.engine_id)
            self._out.append((link, q))
        if q.on_done is not None:
            q.local_done = True  # (a replica's sync: the primary's values only)
        elif (
            q.kind == "snapshot"
            and q.origin != self._ctx.broker_id
            and self.topics.trie.any_match(q.pattern)
            and not self._ctx.engine.has_route(q.pattern, q.origin)
        ):
            # (a node holding nothing the pattern matches answers at once: in a tree the
            # route arrives before the query anyway, links carrying frames in order)
            self.book.route_waits += 1
            self._route_wait.append(q)  # (its part when the route comes, or the deadline)
        else:
            self._local(q)
        self._maybe_done(q)

    def _local(self, q: Query) -> None:
        """This node's part of ``q``. One that came over a link (another node's query, a
        replica's sync) neither sees nor removes a local branch's topic: its values never
        leave this node, as its messages never do."""
        kept = self._ctx.engine.local_branches if q.reply_to is not None else ()
        if q.kind == "remove":
            matched = self.topics.trie.match(q.pattern) if kept else (q.pattern,)
            # (with local branches, each other topic alone: a topic is a pattern of itself)
            removals = [r for t in matched if not holds(kept, t) for r in self.topics.remove(t)]
            self.removals += len(removals)
            self._publish(removals)
            q.add([], [], len(removals))
        else:
            # (a fetch too: a value another node holds, older than a removal here, must
            # not come back; the result drops it)
            values, gone = self.topics.values(q.pattern)
            if kept:
                values = [v for v in values if not holds(kept, v[0])]
                gone = [g for g in gone if not holds(kept, g[0])]
            q.add(values, gone, 0)
        q.local_done = True

    def _maybe_done(self, q: Query) -> None:
        if not q.done or self.book.pending.pop(q.qid, None) is None:
            return
        if q.on_done is not None:
            q.on_done(q)
            return
        ctx = self._ctx
        values, gone = q.result()
        if q.reply_to is None and q.kind != "remove" and not values and not q.checked:
            if self.missing.relevant(q.pattern):  # (held until the handlers answer)
                self.missing.ask(q.pattern, ctx.broker_id, functools.partial(self._asked, q))
                return
        if q.reply_to is None:
            if q.kind == "remove":
                # after the commit: the tombstones are stored when the client hears it
                ctx.confirm(q.request, frames.STATE_REMOVE, {"removed": q.removed})
            else:
                body = {"values": values, "gone": gone if q.kind == "snapshot" else []}
                ctx.reply(q.request, frames.STATE_FETCH, body)
            return
        link = ctx.links.by_engine_id.get(q.reply_to)
        if link is not None:
            budget = frame_budget(link.peer_max_frame)
            for frame in answer_frames(q.qid, values, gone, q.removed, budget, q.cut):
                self._out.append((link, frame))

    def _asked(self, q: Query, verdict: str) -> None:
        """The missing-topic handlers answered ``q`` (which matched nothing)."""
        ctx = self._ctx
        if verdict == "cancel":
            ctx.error(q.request, f"{CANCELLED} (subscribe or fetch of {q.pattern!r})")
            return
        if verdict == "none":
            self.missing.counts["unhandled"] += 1
            log.warning("missing topic %r: no handler reachable: proceeding", q.pattern)
        # proceed: read again (a handler may have created the topic meanwhile)
        qid = f"{ctx.broker_id}/{ctx.incarnation}/{next(self._ids)}"
        self.book.seen(qid)
        deadline = time.monotonic() + QUERY_TIMEOUT
        again = Query(qid, q.kind, q.pattern, q.origin, None, deadline, q.request, checked=True)
        skip = self.replicas.served_here(q.pattern)
        self._open(again, None, skip=skip)

    def _on_query(self, link: Link, value: list[Any]) -> int:
        qid, kind, pattern, origin, budget_ms = check_query(value)
        if self.book.seen(qid):
            self._out.append((link, encode_answer(qid, [], [], 0, True)))
            return 1
        self.answered += 1
        deadline = time.monotonic() + relay_window(budget_ms, RELAY_TIMEOUT)
        q = Query(qid, kind, pattern, origin, link.engine_id, deadline)
        self._open(q, link)
        return 1

    def _on_answer(self, link: Link, value: list[Any]) -> int:
        qid, values, gone, removed, last, cut = check_answer(value)
        q = self.book.pending.get(qid)
        if q is None or link.engine_id not in q.waiting:
            return 1  # (a query answered at its deadline, or the link's second answer)
        q.add(values, gone, removed)
        q.cut = q.cut or cut
        if last:
            q.waiting.discard(link.engine_id)
            self._maybe_done(q)
        return 1 + len(values)

    def _routes_came(self) -> None:
        waiting, self._route_wait = self._route_wait, []
        engine = self._ctx.engine
        for q in waiting:
            if q.qid not in self.book.pending:
                continue
            if engine.has_route(q.pattern, q.origin):
                self._local(q)
                self._maybe_done(q)
            else:
                self._route_wait.append(q)

    # -- hooks ---------------------------------------------------------------------------------

    def advert_in(self, link: Link) -> None:
        if self._route_wait:
            self._routes_came()

    def link_up(self, link: Link, now: float) -> None:
        self.replicas.link_up(link, now)

    def link_down(self, link: Link, now: float) -> None:
        self.replicas.link_down(link, now)
        self.missing.link_down(link)
        for q in self.book.link_gone(link.engine_id):
            self._maybe_done(q)

    def sink(self, batch: list[list[Any]]) -> None:
        self.replicas.sink(batch)

    def before_commit(self) -> None:
        self.table.write()

    def after_commit(self) -> None:
        # after the link flush: a query leaves behind the interest this pass advertised
        if self._out:
            out, self._out = self._out, []
            links, now = self._ctx.links, time.monotonic()
            for link, item in out:
                frame = item if isinstance(item, bytes) else _query_frame(item, now)
                if link.state is LinkState.UP and not links.send(link, frame, now):
                    self._ctx.drop("state_" + links.send_error)

    def busy(self) -> bool:
        return self.topics.expiry_due  # (tombstones past the ttl wait: next batch at once)

    def work(self) -> None:
        self.topics.expire(time.time())  # (deleted from the file by this pass's commit)

    def tick(self, now: float) -> None:
        if self.topics.expire(time.time()):
            self.table.write()  # (the file as memory now: no pass may follow for a second)
        self.replicas.tick(now)
        self.missing.tick(now)
        if self._route_wait:
            self._routes_came()
        for q in self.book.overdue(now):
            if not q.local_done:
                log.warning("snapshot %s: no route for %r toward %s", q.qid, q.pattern, q.origin)
                self._local(q)
            self._maybe_done(q)

    def status(self, out: dict[str, Any]) -> None:
        book = self.book
        out["state"] = {
            **self.topics.count(),
            "sets": self.sets,
            "removals": self.removals,
            "tombstones_expired": self.topics.expired,
            "queries_pending": len(book.pending),
            "queries_answered": self.answered,
            "route_waits": book.route_waits,
            "route_timeouts": book.route_timeouts,
            "queries_expired": book.expired,
            "missing": self.missing.status(),
        }
        if self.replicas.by_name:
            out["replication"] = self.replicas.status()


def _query_frame(q: Query, now: float) -> bytes:
    """``q`` as it leaves: its budget is what is left of its wait."""
    return encode_query(q.qid, q.kind, q.pattern, q.origin, int((q.deadline - now) * 1000))


def _check_set(topic: Any, payload: Any, fmt: Any, headers: Any) -> None:
    if (
        type(topic) is not str
        or type(payload) is not bytes
        or type(fmt) is not int
        or fmt not in frames.FMTS
    ):
        raise ProtocolError("bad_type", "STATE_SET needs topic, payload bytes and fmt")
    if headers is not None and (
        type(headers) is not dict or not all(type(k) is str for k in headers)
    ):
        raise ProtocolError("bad_type", "headers must be a map with string keys")
    if headers and any(k in headers for k in _RESERVED_HEADERS):
        raise ProtocolError("bad_value", f"headers {_RESERVED_HEADERS} are the node's")
    if fmt == frames.FMT_MSGPACK:
        unpack(payload)  # (every reader decodes a value: one that did not broke fetches)
    validate_publish_topic(topic)


def _subject(kind: str, field: str = "pattern") -> Any:
    """The ACL subject of a request: (``kind``, its ``field``)."""

    def subjects(body: dict[str, Any]) -> Iterable[tuple[str, str]]:
        value = body.get(field)
        return ((kind, value),) if isinstance(value, str) else ()

    return subjects
