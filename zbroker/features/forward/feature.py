"""The store-and-forward feature: persistent messages cross links through per-link
queues in the store, acknowledged hop by hop (the rules are in :mod:`.queues`).

* The pipeline hands it every persistent message's sends (:meth:`persist`): one copy per
  link, up or down (a sticky route's ghost), appended in the pass's transaction.
* PMSGS from a link: entries taken once per link sequence, checked (a path ends with the
  link's peer), loop- and dedupe-checked, then given to the pipeline as persistent
  messages; the inbound position is committed with what they produced, and a PACK follows
  after the commit.
* After each commit: PACKs for what inbound links gave us, then the frames of every
  outbound queue with something unsent (within the window).
* Back-pressure (``[forward] overflow = "reject-new"``): a full queue refuses persistent
  publishes at the origin (admission) and stops taking PMSGS entries downstream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ... import wire
from ...const import LINK_BATCH
from ...errors import ProtocolError
from ...links.flush import too_large
from ...links.state import Link, LinkState, link_key
from ...node import Feature, Refusal
from ...node.context import Context
from ...node.counters import BadInputLog
from ...routing import detours
from ...routing.selection import Selective
from ...store.producers import FORGOTTEN
from .dedupe import PersistentDedupe, RoutedTargets
from .queues import Forwarder
from .sticky import expire_sticky_routes, restore_sticky_routes, save_sticky_routes

if TYPE_CHECKING:
    from ...node.pipeline import Send

__all__ = ["StoreAndForward"]

#: bytes of a PMSGS frame around its entries (type, epoch, base, array header), at most
_PMSGS_HEAD = 32
#: seconds after a link of this node came up during which a persistent entry with no route
#: yet is not taken but left to its sender's resend: the routes of a link that just came
#: up settle within an exchange or two of adverts (a peer's first table may lack interest
#: it sends only toward hosts it has not yet heard of)
ROUTE_SETTLE = 5.0


class StoreAndForward(Feature):
    name = "forward"

    def __init__(self) -> None:
        # persistent messages: by (origin, inc, pseq); kept with the store from attach on
        self.pdedupe = PersistentDedupe()
        self.routed = RoutedTargets()  # whom this node routed each recent message to
        self.repeats_routed = 0  # repeats that went on for targets no earlier copy had
        self.pseq = 0  # persistent messages originated in this incarnation
        self._pack_due: dict[Link, None] = {}  # inbound links to acknowledge after commit
        self._topics: set[str] = set()  # topics of PMSGS entries already found valid
        self.producer_duplicates = 0  # second copies of an idempotent publish dropped
        self.producer_unknown = 0  # copies older than the producer window: taken
        self._unrouted_log = BadInputLog(what="dropped a persistent message")
        self._link_up_at = float("-inf")  # when a link of this node last came up
        self.route_waits = 0  # entries left to a resend while the routes settled

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        assert ctx.store is not None
        cfg = ctx.config
        self.fw = Forwarder(
            ctx.store,
            max_msgs=cfg.forward_max_msgs,
            max_bytes=cfg.forward_max_bytes,
            drop=ctx.drop,
        )
        self._backpressure = cfg.forward_overflow == "reject-new"
        self.pdedupe = PersistentDedupe(journal=ctx.store.seen)
        restore_sticky_routes(ctx, self.fw, time.monotonic())
        ctx.pipeline.persist = self.persist

    def link_frames(self) -> Mapping[int, Callable[[Link, list[Any]], int]]:
        return {wire.PMSGS: self._on_pmsgs, wire.PACK: self._on_pack}

    # -- out --------------------------------------------------------------------------------

    def persist(self, sends: list[Send], msg: list[Any], pseq: int | None) -> None:
        """Queue a persistent message (``msg``: fields up to its path, which ends with us)
        in the store-backed queue of each send's link, up or down (a sticky route)."""
        if pseq is None:
            self.pseq += 1
            pseq = self.pseq
        if not sends:
            return
        fw = self.fw
        # an idempotent publish's [producer, pseq] (m[9]) travels last, after the pseq
        head, tail = (msg, ()) if len(msg) == 9 else (msg[:9], msg[9:])
        for link_id, targets, _copies in sends:
            # one copy per link even with conduit off: the receiver's dedupe would fold the
            # others, and a stored copy is not free
            entry = [*head, None if targets is None else list(targets), pseq, *tail]
            if not fw.put(link_id, entry):
                self._ctx.drop("forward_no_queue")

    def _full(self, sends: list[Send], n: int, size: int) -> str | None:
        """The link of ``sends`` whose queue cannot take ``n`` more messages of ``size``
        bytes in all (reject-new), None if they fit."""
        fw = self.fw
        for link_id, _targets, _copies in sends:
            q = fw.by_engine.get(link_id)
            if q is None:
                continue
            if (fw.max_msgs and len(q.entries) + n > fw.max_msgs) or (
                fw.max_bytes and q.nbytes + size > fw.max_bytes
            ):
                return f"{q.qkey} (toward {q.peer}: {len(q.entries)} messages waiting)"
        return None

    def admit(self, topics: dict[str, list[int]], *, batch: bool) -> Refusal | None:
        if not self._backpressure:
            return None
        total = sum(n for n, _ in topics.values())
        for topic, (n, size) in topics.items():
            _, sends = self._ctx.engine.route(topic, (), None)
            full = self._full(sends, n, size) if sends else None
            if full is not None:
                message = (
                    f"refused: the store-and-forward queue of link {full} is full "
                    "(overflow policy reject-new): the network downstream is slow or cut; "
                    "retry later"
                )
                return Refusal(
                    message + ("; the rows stay staged until aborted" if batch else ""), total
                )
        return None

    # -- in ---------------------------------------------------------------------------------

    def _on_pack(self, link: Link, value: list[Any]) -> int:
        epoch, upto = wire.decode_pack(value)
        self.fw.on_ack(link.engine_id, epoch, upto, time.monotonic())
        return 0

    def _on_pmsgs(self, link: Link, value: list[Any]) -> int:
        epoch, base, entries = wire.decode_pmsgs(value)
        if not link.can_receive:
            link.drops += len(entries)
            self._ctx.drop("wrong_direction", len(entries))
            return 0
        link.msgs_in += len(entries)
        self._take(link, epoch, base, entries)
        self._pack_due[link] = None
        return len(entries)

    def _take(self, link: Link, epoch: int, base: int, entries: list[Any]) -> None:
        """Entries taken once per link sequence (the position is committed with what they
        produce here), then checked, loop- and dedupe-checked, and handed on."""
        ikey = link_key(link)
        fw = self.fw
        msgs: list[list[Any]] = []
        routing: list[tuple[tuple[str, ...], tuple[str, ...] | None, int]] = []
        settling = time.monotonic() - self._link_up_at < ROUTE_SETTLE
        for m in entries:
            try:
                lseq = wire.pmsgs_lseq(m)
            except ProtocolError as exc:
                self._ctx.bad(link.source, exc.reason, exc.detail)
                continue
            if (
                (self._backpressure or settling)
                and lseq == fw.expected(ikey, epoch, base)
                and self._held_back(link, m, settling)
            ):
                break  # the sender resends it: no PACK moves past it
            if not fw.accept(ikey, epoch, base, lseq):
                continue
            taken = self._checked(link, m)
            if taken is None:
                continue
            msgs.append(taken[0])
            routing.append(taken[1])
            if self._backpressure:
                # each entry is queued onward before the next one's room is judged
                self._ctx.pipeline.take(msgs, routing, persistent=True)
                msgs, routing = [], []
        if msgs:
            self._ctx.pipeline.take(msgs, routing, persistent=True)

    def _held_back(self, link: Link, m: Any, settling: bool) -> bool:
        """Is the next entry left to its sender's resend instead of taken now? While a
        queue it must be queued onward to is full (reject-new: the sender's own queue then
        fills back toward the origin), or while the routes of a link just up settle
        (``settling``) and it has neither a route nor a local subscriber yet. A malformed,
        forged (:func:`_not_from_peer`) or looping entry is never held: it is taken and
        counted by :meth:`_checked`, so that its sender is not asked for it again."""
        try:
            wire.check_pmsgs_entry(m, self._topics)
        except ProtocolError:
            return False
        if _not_from_peer(m[9], link) or self._ctx.broker_id in m[9]:
            return False
        patterns, sends = self._ctx.engine.route(
            m[1], tuple(m[9]), None if m[10] is None else tuple(m[10])
        )
        if self._backpressure and sends:
            size = len(m[2]) if type(m[2]) is bytes else 0
            if self._full(sends, 1, size) is not None:
                self._ctx.drop("forward_backpressure")
                return True
        if settling and not sends and not patterns:
            self.route_waits += 1
            return True
        return False

    def _checked(
        self, link: Link, m: Any
    ) -> tuple[list[Any], tuple[tuple[str, ...], tuple[str, ...] | None, int]] | None:
        """A taken entry, checked: (message with our ID on its path, (path, targets, pseq));
        None if bad (counted; it is never asked for again), a loop or a repeat."""
        ctx = self._ctx
        try:
            wire.check_pmsgs_entry(m, self._topics)  # a MSGS entry's rules, topic included
        except ProtocolError as exc:
            ctx.bad(link.source, exc.reason, exc.detail)
            return None
        (_, topic, payload, fmt, headers, origin, inc, seq, ts, path, targets, pseq) = m[:12]
        if _not_from_peer(path, link):
            # taken like any bad entry (its position moves, the PACK covers it), so that
            # the sender does not resend it forever; checked before the dedupe it would move
            ctx.bad(link.source, "path_not_from_peer", f"path {path} of {topic!r}")
            return None
        if ctx.broker_id in path:
            ctx.drop("loop")
            return None
        producer = m[12] if len(m) == 13 else None
        # a publish a client sent again through another node shares its producer's key
        key = (origin, inc, pseq) if producer is None else ("", *producer)
        if self.pdedupe.seen(origin, inc, pseq):
            self._repeat(link, m, key)  # the same message by another path
            return None
        key_targets = None if targets is None else tuple(targets)
        patterns, sends = ctx.engine.route(topic, tuple(path), key_targets)
        if not sends and not patterns:
            # taken (its position commits), but no subscriber here or beyond wants it any
            # more (an unsubscribe crossed it): counted and logged, never silent
            ctx.drop("persistent_unrouted")
            self._unrouted_log.report(
                link.source,
                "no_route",
                f"topic {topic!r} (path {path}, targets {targets}): no route, no subscriber here",
                time.monotonic(),
            )
            return None
        msg = [topic, payload, fmt, headers, origin, inc, seq, ts, [*path, ctx.broker_id]]
        if producer is not None and not self._first_copy(producer, msg):
            # the same publish, sent again by its client through another node (counted by
            # _repeat for what it has that is new: not here too)
            self._repeat(link, m, key)
            return None
        if key_targets is not None:
            self._count_unserved(link, topic, path, key_targets, sends, "")
        self.routed.note(key, key_targets, ctx.broker_id)
        return msg, (tuple(path), key_targets, pseq)

    def _repeat(self, link: Link, m: Any, key: tuple[Any, ...]) -> None:
        """A repeat goes on, with no local delivery, for the targets its copy names that
        no earlier copy was routed to from here (:class:`.dedupe.RoutedTargets`); a plain
        repeat is dropped (counted as a duplicate where it was found one)."""
        ctx = self._ctx
        new = self.routed.new_targets(key, m[10], ctx.broker_id)
        if not new:
            return
        topic, path = m[1], m[9]
        _patterns, sends = ctx.engine.route(topic, tuple(path), new)
        if sends.__class__ is Selective:
            sends = sends.pick(m[4])
        self._count_unserved(link, topic, path, new, sends, ", a repeat")
        if sends:
            self.repeats_routed += 1
            msg = [*m[1:9], [*path, ctx.broker_id], *m[12:]]
            self.persist(sends, msg, m[11])

    def _count_unserved(
        self,
        link: Link,
        topic: str,
        path: list[str],
        targets: tuple[str, ...],
        sends: Any,
        what: str,
    ) -> None:
        """The copy goes on for its other targets; these have no way from here that avoids
        its path (routing/detours.py found none): counted and logged, never silent."""
        unserved = detours.unserved(targets, sends, self._ctx.broker_id)
        if unserved:
            self._ctx.drop("persistent_unrouted")
            self._unrouted_log.report(
                link.source,
                "no_route_for_targets",
                f"topic {topic!r} (path {path}{what}): no way to {unserved} avoiding the path",
                time.monotonic(),
            )

    def _first_copy(self, producer: list[int], msg: list[Any]) -> bool:
        """An idempotent publish's copy: False if this node took that ``(producer, pseq)``
        already (a client retried it through another node: the second copy); otherwise it
        is recorded with the message (same transaction) and carried on (``msg[9]``).
        One older than the window cannot be told apart and is taken (it may be a backlog
        that waited in a queue while its producer went on through another node)."""
        store = self._ctx.store
        assert store is not None
        producers = store.producers
        taken = producers.check(producer[0], producer[1])
        if taken is FORGOTTEN:
            self.producer_unknown += 1
        elif taken is not None:
            producers.duplicates += 1
            self.producer_duplicates += 1
            return False
        else:
            producers.record(producer[0], producer[1], (msg[4], msg[5], msg[6], None), msg[7])
        msg.append(producer)
        return True

    # -- links and the pass -------------------------------------------------------------------

    def link_up(self, link: Link, now: float) -> None:
        self._link_up_at = now
        # resume: everything unacknowledged on this link goes again, in order
        self.fw.attach(link.engine_id, link.peer, link_key(link), now)
        save_sticky_routes(self._ctx, self.fw, link)

    def link_down(self, link: Link, now: float) -> None:
        self._pack_due.pop(link, None)
        self.fw.detach(link.engine_id, now)

    def advert_in(self, link: Link) -> None:
        save_sticky_routes(self._ctx, self.fw, link)

    def after_commit(self) -> None:
        """Acknowledge what inbound links gave us (it is stored), then send what outbound
        queues hold (it is stored under its sequence)."""
        now = time.monotonic()
        links = self._ctx.links
        if self._pack_due:
            due, self._pack_due = self._pack_due, {}
            for inbound in due:
                pos = self.fw.position(link_key(inbound))
                if pos is not None and inbound.state is LinkState.UP:
                    links.send(inbound, wire.encode_link(wire.PACK, pos[0], pos[1]), now)
        for q in list(self.fw.ready()):
            out = links.by_engine_id.get(q.engine_id)
            if out is not None and out.state is LinkState.UP:
                self._send_queue(q, out, now)

    def _send_queue(self, q: Any, out: Link, now: float) -> None:
        fw = self.fw
        while q.entries and q.sent_upto < q.entries[-1][0]:
            size = fw.next_size(q)
            if size > out.frame_limit - _PMSGS_HEAD:
                # never fits a frame the peer takes (a smaller max_frame_bytes than ours):
                # dropped once what is before it is acknowledged, so that the frame's base
                # tells the peer not to wait for it
                if not fw.drop_next(q):
                    break
                too_large(self._ctx.links, out, f"a persistent message of {size} bytes")
                continue
            frame, upto, n = fw.next_frame(q, LINK_BATCH, out.batch_bytes)
            if n == 0 or not self._ctx.links.send(out, frame, now):
                break  # window full, or the socket's queue: the next pass goes on
            fw.sent(q, upto, n)
            out.msgs_out += n
            self._ctx.counters.forwarded += n

    def tick(self, now: float) -> None:
        self.fw.retransmit(now)
        expire_sticky_routes(self._ctx, self.fw, now)

    def status(self, out: dict[str, Any]) -> None:
        out["forward"] = {
            **self.fw.stats(),
            "sticky_ghost_links": self._ctx.engine.ghosts(),
            "producer_duplicates": self.producer_duplicates,
            "producer_unknown": self.producer_unknown,
            "persistent_duplicates": self.pdedupe.duplicates,
            "repeats_routed": self.repeats_routed,
            "route_waits": self.route_waits,
        }


def _not_from_peer(path: list[str], link: Link) -> bool:
    """Does a PMSGS entry's path not end with the peer of the link it came on? Every node
    adds itself to a path before it queues a message onward, so such an entry is the peer
    speaking for others, whose pseqs (and producers' pairs) would move their origins'
    persistent dedupe past their real messages: bad input, as on the relay path
    (:func:`zbroker.node.relay.check_senders`)."""
    return not path or path[-1] != link.peer
