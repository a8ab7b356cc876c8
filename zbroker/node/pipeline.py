"""The one message path: every message a node handles goes through here.

Three ingresses — client publishes (the PULL socket), link MSGR frames, and messages
originated on the node (persistent publishes, staged commits, PMSGS the store-and-forward
feature took) — share one sequence of steps, each batch at a time:

1. checks (:mod:`zbroker.wire`, once per batch) and, for a relayed message, the loop check
   (our ID on its path) and dedupe by message ID;
2. route (the engine's cached ``(local patterns, sends)`` per topic, path and targets),
   worked out once per run of a batch, not per message (:mod:`.relay`: a publish run's
   topic, a link frame's topic, path and targets);
3. link outboxes: one copy per send, on the link's outbox for this pass (the link table
   cuts and sends frames when the pass ends), or for a persistent message the
   store-and-forward hook;
4. feature sinks: messages whose local patterns hold a feature's interest, in order,
   one call per feature per batch;
5. delivery buckets: per pattern that clients hold, sent as batch frames at batch end
   (publishes and relayed messages as delivery runs, other messages as envelopes).

The hot loops are written for speed: locals for everything, no per-message objects beyond
the decoded frame (a publish run's entries get their sequence and time appended in place,
and the same entry lists go to the links and to the subscribers), counters summed per
batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import zmq

from .. import wire
from ..const import DRAIN_BATCH
from ..routing import DedupeWindow, RoutingEngine
from ..routing.selection import Selective
from ..wire import (
    check_msgs,
    check_publish_runs,
    check_publishes,
    check_runs,
    publish_elements,
    runs_of_msgs,
    runs_of_publishes,
)
from .counters import Counters
from .delivery import Delivery
from .interest import LocalInterest
from .publishes import PublishPlan, take_runs
from .relay import Prepared, check_senders, relay

if TYPE_CHECKING:
    from ..links.state import Link
    from ..links.table import LinkTable
    from .feature import Feature

__all__ = ["Pipeline", "Send"]

#: a route's send: (link id, targets of that branch or None, copies)
Send = tuple[str, tuple[str, ...] | None, int]
#: the store-and-forward hook: (sends, message fields up to its path [and its
#: [producer, pseq]], pseq or None)
Persist = Callable[[list[Send], list[Any], "int | None"], None]
_EVENTS = int(zmq.EVENTS)
_MSGR = wire.MSGR
_POLLIN = int(zmq.POLLIN)


class Pipeline:
    def __init__(
        self,
        *,
        broker_id: str,
        incarnation: int,
        engine: RoutingEngine,
        counters: Counters,
        interest: LocalInterest,
        delivery: Delivery,
        links: LinkTable,
    ) -> None:
        self._me = broker_id
        self._inc = incarnation
        self._engine = engine
        self._counters = counters
        self._interest = interest
        self._delivery = delivery
        self._links = links
        self.dedupe = DedupeWindow()
        #: set by the store-and-forward feature: where persistent messages' sends go
        self.persist: Persist | None = None
        #: per originated message seq, what sinks report of it (a retention log seq...)
        self.receipts: dict[int, dict[str, Any]] = {}
        self._valid_topics: set[str] = set()  # publishable topics seen (no $ZB)
        self._link_caches: tuple[set[Any], set[Any], set[str]] = (set(), set(), set())
        self._fwd_paths: dict[tuple[str, ...], list[str] | bool] = {}
        self._sink_out: dict[Feature, list[list[Any]]] = {}
        #: per link id, the last run :meth:`enqueue` made (it extends only its own)
        self._enqueued: dict[str, list[Any]] = {}
        #: set by the queue groups feature: takes each message that starts here, called
        #: only while some group has members somewhere (engine.groups.active); True if
        #: some group's member gets it
        self.group_hook: Callable[[list[Any]], bool] | None = None
        #: the topic of the last client publish that no subscriber anywhere wanted
        #: (``Counters.unrouted`` counts them)
        self.unrouted_topic = ""
        #: set by the node (without security: the permission filter reads each frame):
        #: takes a publish frame before it is decoded, the messages it held, or -1 for
        #: the general way (:meth:`.shortcut.Shortcut.publish`)
        self.publish_shortcut: Callable[[bytes], int] | None = None
        #: and sends what it held for a link when a drain ends (:meth:`.shortcut.Shortcut.flush`)
        self.publish_flush: Callable[[], None] | None = None

    # -- ingress 1: client publishes ------------------------------------------------------

    def on_publish(self, sock: zmq.Socket[bytes], recv: Callable[[int], bytes], limit: int) -> None:
        """Drain the publish socket (up to DRAIN_BATCH messages) into one batch: each
        frame's messages are routed as it is read, deliveries leave when the drain ends.
        Every form is taken as runs (a batch of runs as it came, publish frames grouped
        by :func:`runs_of_publishes`), so messages keep their order whatever form each
        publisher sends."""
        events = cast("Callable[[int], int]", sock.getsockopt)
        errors: list[tuple[str, str]] = []
        out: dict[str, list[Any]] = {}
        plans: dict[str, PublishPlan] = {}  # per topic: the route, once per drain
        prepared: Prepared = {}
        budget = DRAIN_BATCH  # messages: a publish batch counts for what it holds
        first = True
        valid = self._valid_topics
        shortcut = self.publish_shortcut
        try:
            while budget > 0:
                # after the frame poll() announced, ask the socket rather than end on
                # zmq.Again: an exception per pass is a node's largest cost at low rates
                if not first and not events(_EVENTS) & _POLLIN:
                    break
                first = False
                try:
                    raw = recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(raw) > limit:
                    budget -= 1
                    errors.append(("oversized", f"{len(raw)} bytes > {limit}"))
                    continue
                if shortcut is not None:
                    n = shortcut(raw)
                    if n >= 0:
                        budget -= n
                        continue
                    # the general way from here on in this drain: what it takes now leaves
                    # when the drain (deliveries) or the pass (links) ends, after what the
                    # shortcut sent, and a later frame must not go before it
                    shortcut = None
                elements = publish_elements(raw, errors)
                if not elements:
                    budget -= 1
                    continue
                if type(elements[0]) is list:  # a batch of runs (client protocol 3)
                    budget -= check_publish_runs(elements, errors, valid) or 1
                    runs = elements
                else:
                    budget -= len(elements)
                    runs = runs_of_publishes(check_publishes(elements, errors, valid))
                self._counted(*take_runs(self, runs, out, plans, prepared))
        finally:  # (what the shortcut held for a link leaves, whatever happened)
            if self.publish_flush is not None:
                self.publish_flush()
        for reason, detail in errors:
            self._counters.bad("publisher", reason, detail)
        self.end_batch(None, out)

    def _counted(self, n: int, unrouted: int, unrouted_topic: str) -> None:
        """Count ``n`` publishes taken, ``unrouted`` of them wanted nowhere."""
        self._counters.received += n
        self._counters.seq += n
        if unrouted:
            self._counters.unrouted += unrouted
            self.unrouted_topic = unrouted_topic

    # -- ingress 2: link MSGR (and MSGS) ---------------------------------------------------

    def on_msgs(self, link: Link, op: int, batch: list[Any], n: int) -> None:
        """Messages from a link, ``n`` of them: the relay's hot path. ``op``: MSGR (runs)
        or MSGS (messages, taken as runs)."""
        errors: list[tuple[str, str]] = []
        if op == _MSGR:
            runs = batch
            check_runs(runs, self._link_caches, errors)  # (in place: bad ones become None)
        else:
            check_msgs(batch, self._link_caches, errors)
            runs = runs_of_msgs(batch)
        check_senders(runs, link.peer, errors)
        for reason, detail in errors:
            self._counters.bad(link.source, reason, detail)
        link.msgs_in += n
        out: dict[str, list[Any]] = {}
        loops = relay(self, runs, out)  # (a run's route once: .relay)
        if loops:
            self._counters.drop("loop", loops)
        self.end_batch(None, out)

    # -- ingress 3: messages that start here, and persistent messages taken -----------------

    def originate(
        self,
        rows: list[tuple[str, bytes, int, Any]],
        *,
        persistent: bool,
        receipt: bool = False,
        producer: list[int] | None = None,
    ) -> list[int]:
        """Publish checked messages ``(topic, payload, fmt, headers)`` that start here;
        ``persistent``: across links by store-and-forward. Returns their message seqs;
        with ``receipt``, what sinks reported of each (a retention log seq...) is in
        :attr:`receipts` until the next call. ``producer``: the ``[producer, pseq]`` of
        an idempotent persistent publish (one row), carried with it to the next nodes."""
        me, inc = self._me, self._inc
        seqs = []
        taken = []
        for topic, payload, fmt, headers in rows:
            self._counters.seq += 1
            seq = self._counters.seq
            seqs.append(seq)
            taken.append([topic, payload, fmt, headers, me, inc, seq, time.time(), [me]])
        if producer is not None:
            taken[0].append(producer)  # (the store-and-forward hook reads it: m[9])
        self._counters.received += len(rows)
        self.receipts = {seq: {} for seq in seqs} if receipt else {}
        self.take(taken, None if persistent else (), persistent=persistent)
        return seqs

    def take(
        self,
        msgs: list[list[Any]],
        routing: list[tuple[tuple[str, ...], tuple[str, ...] | None, int]] | tuple[()] | None,
        *,
        persistent: bool,
    ) -> None:
        """Route, sink and deliver checked messages ``[topic, payload, fmt, headers,
        origin, inc, seq, ts, path forwarded]`` (a persistent one may end with its
        ``[producer, pseq]``, for the store-and-forward hook). ``routing``: per message
        (path it came by, targets, pseq) for persistent messages taken from a link; None
        or () for messages that start here (None: persistent, numbered by the hook)."""
        route = self._engine.route
        persist = self.persist if persistent else None
        interest = self._interest
        prefix = self._delivery.prefix
        sink_out = self._sink_out
        selected, select = self._delivery.selected.by_pattern, self._delivery.selected.names
        out: dict[str, list[Any]] = {}
        groups = self.group_hook if self._engine.groups.active and not routing else None
        for i, m in enumerate(msgs):
            key_path, key_targets, pseq = routing[i] if routing else ((), None, None)
            if groups is not None:
                groups(m[:8])
            patterns, sends = route(m[0], key_path, key_targets)
            if sends:
                if sends.__class__ is Selective:  # some targets stand behind selectors
                    sends = sends.pick(m[3])
                if persist is not None:
                    persist(sends, m, pseq)
                else:
                    self.enqueue(sends, m)
            if not patterns:
                continue
            if interest.has_sinks:
                for f in interest.sinks_for(patterns):
                    sink_out.setdefault(f, []).append(m)
            if selected:
                patterns = select(patterns, m[3])
            for pattern in patterns:
                if pattern in prefix:
                    out.setdefault(pattern, []).append(m[:8])
        self.end_batch(out)

    # -- the end of a batch ---------------------------------------------------------------

    def enqueue(self, sends: list[Send], msg: list[Any]) -> None:
        """Queue ``msg`` (``[topic, payload, fmt, headers, origin, inc, seq, ts, path]``,
        the path already ending with us) on each send's link for this pass: onto the run
        the link's outbox ends with if this method made it for the same head (a relay's
        runs share their entries with other links: never extended), else a new one."""
        by_id = self._links.by_engine_id
        dirty = self._links.dirty
        topic, payload, fmt, headers, origin, inc, seq, ts, path = msg[:9]
        entry = [payload, fmt, headers, seq, ts]
        made = self._enqueued
        for link_id, targets, copies in sends:
            link = by_id.get(link_id)
            if link is None:
                # routed over a link that is down (a sticky route's ghost): a non-persistent
                # message has nowhere to wait, so it is lost here: counted, not silent
                self._counters.drop("link_down", copies)
                continue
            head = [topic, origin, inc, path, None if targets is None else list(targets)]
            box = link.outbox
            run = made.get(link_id)
            if run is None or not box or box[-1] is not run or run[:5] != head:
                if not box:
                    dirty.append(link)
                run = made[link_id] = [*head, []]
                box.append(run)
            run[5].extend([entry] * copies)

    def end_batch(
        self, arrays: dict[str, list[Any]] | None, runs: dict[str, list[Any]] | None = None
    ) -> None:
        """Feature sinks take their messages, then deliveries leave: per pattern envelope
        arrays (messages taken) or runs (publishes, relayed messages)."""
        if self._sink_out:
            sink_out = self._sink_out
            self._sink_out = {}
            for f, batch in sink_out.items():
                f.sink(batch)
        if arrays:
            self._delivery.send(arrays)
        if runs:
            self._delivery.send_runs(runs)
