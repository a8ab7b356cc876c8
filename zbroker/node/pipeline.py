"""The one message path: every message a node handles goes through here.

Three ingresses — client publishes (the PULL socket), link MSGR frames, and messages
originated on the node (persistent publishes, staged commits, PMSGS the store-and-forward
feature took) — share one sequence of steps, each batch at a time:

1. checks (:mod:`zbroker.wire`, once per batch) and, for a relayed message, the loop check
   (our ID on its path) and dedupe by message ID;
2. route (the engine's cached ``(local patterns, sends)`` per topic, path and targets),
   worked out once per run of a batch, not per message (:mod:`.relay`: a publish batch's
   topic, a link frame's topic, path and targets);
3. link outboxes: one copy per send, on the link's outbox for this pass (the link table
   cuts and sends frames when the pass ends), or for a persistent message the
   store-and-forward hook;
4. feature sinks: messages whose local patterns hold a feature's interest, in order,
   one call per feature per batch;
5. delivery buckets: per pattern that clients hold, sent as batch frames at batch end.

The hot loops are written for speed: locals for everything, no per-message objects beyond
the decoded frame (a publish's delivery envelope reuses its frame's bytes), counters
summed per batch.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import msgpack
import zmq

from .. import wire
from ..const import DRAIN_BATCH
from ..routing import DedupeWindow, RoutingEngine
from ..routing.selection import Selective
from ..wire import check_msgs, check_publishes, check_runs, publish_elements, runs_of_msgs
from .counters import Counters
from .delivery import Delivery
from .interest import LocalInterest
from .relay import Prepared, PublishPlan, publish_plan, queue_selected, relay

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
#: msgpack of (uint64 seq, float64 ts): the last two envelope fields, in one struct call
_ENVELOPE_TAIL = struct.Struct(">BQBd")
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
        # msgpack of (origin, incarnation): constant middle of every envelope we originate
        self._envelope_id = msgpack.packb(broker_id) + msgpack.packb(incarnation)
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

    # -- ingress 1: client publishes ------------------------------------------------------

    def on_publish(self, sock: zmq.Socket[bytes], recv: Callable[[int], bytes], limit: int) -> None:
        """Drain the publish socket (up to DRAIN_BATCH messages) into one batch: each
        frame's messages are routed as it is read, deliveries leave when the drain ends."""
        events = cast("Callable[[int], int]", sock.getsockopt)
        errors: list[tuple[str, str]] = []
        out: dict[str, list[bytes]] = {}
        plans: dict[str, PublishPlan] = {}  # per topic: the route, once per drain
        prepared: Prepared = {}
        budget = DRAIN_BATCH  # messages: a publish batch counts for what it holds
        first = True
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
            elements = publish_elements(raw, errors)
            budget -= len(elements) or 1
            if elements:
                values = check_publishes(elements, errors, self._valid_topics)
                self._take_publishes(elements, values, out, plans, prepared)
        for reason, detail in errors:
            self._counters.bad("publisher", reason, detail)
        self.end_batch(out, None)

    def _take_publishes(
        self,
        frames: Sequence[bytes],
        values: list[list[Any] | None],
        out: dict[str, list[bytes]],
        plans: dict[str, PublishPlan],
        prepared: Prepared,
    ) -> None:
        tail, id_part, origin, inc = _ENVELOPE_TAIL.pack, self._envelope_id, self._me, self._inc
        seq = first = self._counters.seq
        prefix, sink_out, unrouted, unrouted_topic = self._delivery.prefix, self._sink_out, 0, ""
        select = self._delivery.selected.names if self._delivery.selected.by_pattern else None
        groups = self.group_hook if self._engine.groups.active else None
        carry = groups is not None or self._interest.has_sinks  # (else no 8-field list)
        drop, dirty, path = self._counters.drop, self._links.dirty, [origin]  # (path: shared)
        ts = time.time()  # the node's receive time: one recv brought the frame's messages
        for frame, value in zip(frames, values, strict=True):
            if value is None:
                continue
            topic, payload, fmt, headers = value
            seq += 1
            m: Any = [topic, payload, fmt, headers, origin, inc, seq, ts] if carry else None
            grouped = groups is not None and groups(m)
            plan = plans.get(topic) or publish_plan(self, topic, prepared, out, plans)
            patterns, links, missing, selective, sinks, dests, tails = plan
            entry = [payload, fmt, headers, seq, ts] if links or selective is not None else None
            if selective is not None:  # some targets stand behind selectors
                head = [topic, origin, inc, path]  # (entry is a list here)
                links, missing = queue_selected(self, selective, prepared, tails, head, entry)  # type: ignore[arg-type]
            for j in range(len(links) if selective is None else 0):
                # onto the run this topic's messages took on the link, if the outbox
                # still ends with it (order is kept across topics), else a new one
                out_link, out_targets, copies = links[j]
                box, run = out_link.outbox, tails[j]
                if run is None or not box or box[-1] is not run:
                    if not box:
                        dirty.append(out_link)
                    run = tails[j] = [topic, origin, inc, path, out_targets, []]
                    box.append(run)
                run[5].append(entry) if copies == 1 else run[5].extend([entry] * copies)
            if missing:
                drop("link_down", missing)  # routed over a down link: nowhere to wait
            if not patterns:
                if not links and not missing and not grouped:  # no subscriber anywhere
                    unrouted, unrouted_topic = unrouted + 1, topic  # (counted, topic kept)
                continue
            for f in sinks:
                sink_out.setdefault(f, []).append(m)
            if select is not None:  # subscriptions with a selector: buckets by headers
                dests = [out.setdefault(p, []) for p in select(patterns, headers) if p in prefix]
            if not dests:
                continue  # interest of features only, no client on the XPUB
            if frame[0] == 0x94:  # fixarray of 4: reuse its elements verbatim
                body = b"\x98" + frame[1:] + id_part + tail(0xCF, seq, 0xCB, ts)
            else:  # another encoder's (valid) array form: encode afresh
                body = wire.encode_delivery_body(topic, payload, fmt, headers, origin, inc, seq, ts)
            for bucket in dests:
                bucket.append(body)
        self._counted(seq - first, unrouted, unrouted_topic)

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
        for reason, detail in errors:
            self._counters.bad(link.source, reason, detail)
        link.msgs_in += n
        out: dict[str, list[Any]] = {}
        loops = relay(self, runs, out)  # (a run's route once: .relay)
        if loops:
            self._counters.drop("loop", loops)
        self.end_batch(None, None, out)

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
        self.end_batch(None, out)

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
        self,
        bodies: dict[str, list[bytes]] | None,
        arrays: dict[str, list[Any]] | None,
        runs: dict[str, list[Any]] | None = None,
    ) -> None:
        """Feature sinks take their messages, then deliveries leave: per pattern encoded
        envelopes (publishes), envelope arrays (messages taken) or runs (relayed)."""
        if self._sink_out:
            sink_out = self._sink_out
            self._sink_out = {}
            for f, batch in sink_out.items():
                f.sink(batch)
        if bodies:
            self._delivery.send(bodies, arrays=False)
        if arrays:
            self._delivery.send(arrays, arrays=True)
        if runs:
            self._delivery.send_runs(runs)
