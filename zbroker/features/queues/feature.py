"""The queue groups feature: members, the pick where a message enters the network, group
messages on links (QMSGS), capacity (QCAP), and status.

A node with members of group ``G`` on pattern ``P`` holds the group key
(:func:`~zbroker.routing.groups.group_key`) as local interest (source ``queue``), so the
network learns where members are exactly as it learns plain interest. Every message
that starts on this node (a publish, a persistent publish, a staged row) is handed to
:meth:`QueueGroups.originated` by the pipeline, but only while some group has members
somewhere (``engine.groups.active``): plain pub/sub pays nothing for this feature. The
engine picks one origin per matching group; the message goes to a local member, or in a
QMSGS entry toward that origin alone. Nodes on the way follow
:meth:`~zbroker.routing.groups.GroupTable.step`.

A topic of one of this node's local branches never leaves it for a group either: only
members here are candidates (:meth:`~zbroker.routing.groups.GroupTable.keeps`), where
the message starts, where it arrives in a QMSGS entry, and for what waits (no spill), so
with no member here it is lost here and counted (``queue_unroutable``, the group's
``lost``), as a message no member is left to reach.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from ... import wire
from ...const import DEFAULT_CREDIT
from ...errors import ConfigError, InvalidTopic
from ...names import validate_broker_id
from ...node import Feature, Op, Request
from ...node.events import QueueJoined, QueueLeft
from ...routing.groups import group_key, revisit_refused
from ...topics import validate_subscription
from .capacity import CapacityFlood
from .frames import check_senders, send_outboxes
from .members import LocalGroup, Member
from .report import queue_status
from .spill import spill

if TYPE_CHECKING:
    from ...links.state import Link
    from ...node.context import Context
    from ...routing.groups import GroupTable

__all__ = ["QueueGroups"]

#: seconds between checks that members are still connected (as for durables)
PROBE_INTERVAL = 1.0
#: seconds between floods of changed capacity
CAPACITY_INTERVAL = 0.1
#: messages per QDELIVER frame at most
QDELIVER_BATCH = 256


class QueueGroups(Feature):
    name = "queues"

    def __init__(self) -> None:
        self._local: dict[str, LocalGroup] = {}  # group key -> members here
        self._out: dict[str, list[list[Any]]] = {}  # engine link id -> QMSGS entries
        self._suspects: set[bytes] = set()  # members a probe found gone, with input unread
        self._dirty: set[str] = set()  # group keys whose local capacity changed: to flood
        self._touched: set[str] = set()  # and since the last pass: saturated again?
        # paths, (target, group key) pairs and topics QMSGS checks found valid
        self._caches: tuple[set[Any], set[Any], set[str]] = (set(), set(), set())
        self._next_probe = 0.0
        self._next_cap = 0.0
        self.picked = 0  # messages picked for a group here (where they entered)
        self.forwarded = 0  # QMSGS entries sent on links
        self.repicked = 0  # picked again on the way (route or member gone)
        self.unroutable = 0  # no member left that the message could reach
        self.spilled = 0  # waited here with no room, sent to a node with room (.spill)
        # group key -> its messages this node lost (besides in flight to a member here
        # that died: LocalGroup.lost): no member left to reach, a link that went down; kept
        # while the group has members here or elsewhere (its status row), as LocalGroup's
        self._lost: dict[str, int] = {}

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        self._groups: GroupTable = ctx.engine.groups
        self._capacity = CapacityFlood(ctx, self._groups)
        for q in ctx.config.queues:
            self._groups.policies[q.group] = q.policy
        ctx.pipeline.group_hook = self.originated
        # only a node with local branches asks which groups a kept topic is lost for
        self._branches = bool(ctx.engine.local_branches)

    def ops(self) -> Sequence[Op]:
        return (
            Op(wire.QUEUE_JOIN, self._join, _join_subjects),
            Op(wire.QUEUE_ACK, self._ack),
            Op(wire.QUEUE_LEAVE, self._leave),
        )

    def link_frames(self) -> Mapping[int, Any]:
        return {wire.QMSGS: self._on_qmsgs, wire.QCAP: self._on_qcap}

    # -- messages -------------------------------------------------------------------------

    def originated(self, m: list[Any]) -> bool:
        """A message starts here (``[topic, payload, fmt, headers, origin, inc, seq,
        ts]``): one member node per matching group gets it. True if any group took it,
        or lost it (a local branch keeps its topic here and the group has no member here:
        counted as a drop, so not as unrouted too)."""
        took = False
        held: list[str] | None = [] if self._branches else None
        for gkey, target in self._groups.pick(m[0], held=held):
            self.picked += 1
            took = True
            self._send(m, (), gkey, target, self._groups.next_hop(gkey, target))
        if held:
            took = True
            for gkey in held:
                self._unroutable(gkey)
        return took

    def _send(self, m: list[Any], path: tuple[str, ...], gkey: str, target: str, via: Any) -> None:
        if via is None:
            local = self._local.get(gkey)
            if local is None:  # (cannot happen: a local best entry means members here)
                self._unroutable(gkey)
                return
            if not local.offer(m[:8]):
                self._ctx.drop("queue_pending_full")
            return
        entry = [*m[:8], [*path, self._ctx.broker_id], [target, gkey]]
        self._out.setdefault(via, []).append(entry)

    def _on_qmsgs(self, link: Link, value: list[Any]) -> int:
        entries = wire.decode_qmsgs(value)
        errors: list[tuple[str, str]] = []
        wire.check_qmsgs(entries, self._caches, errors)  # (in place: bad ones become None)
        check_senders(entries, link.peer, errors)
        for reason, detail in errors:
            self._ctx.bad(link.source, reason, detail)
        me = self._ctx.broker_id
        step = self._groups.step
        for m in entries:
            if m is None:
                continue
            path = m[8]
            target, gkey = m[9]
            if revisit_refused(path, target, me):
                self._ctx.drop("loop")
                self._lose(gkey)
                continue
            where = step(gkey, target, m[0], path)
            if where is None:
                self._unroutable(gkey)
                continue
            via, target, again = where
            self.repicked += again
            self._send(m, path, gkey, target, via)
        return len(entries)

    def _on_qcap(self, link: Link, value: list[Any]) -> int:
        self._capacity.on_qcap(link, value)
        return 1

    # -- members --------------------------------------------------------------------------

    def _join(self, req: Request) -> None:
        body = req.body
        group, pattern = body.get("group"), body.get("pattern")
        member, credit = body.get("member"), body.get("credit", DEFAULT_CREDIT)
        try:
            validate_broker_id(group, "queue group name")
            validate_subscription(pattern)
        except (ConfigError, InvalidTopic) as exc:
            self._ctx.error(req, str(exc))
            return
        if type(member) is not int or not 0 <= member < 1 << 63:
            self._ctx.error(req, "member must be a non-negative integer")
            return
        if type(credit) is not int or not 1 <= credit <= 100_000:
            self._ctx.error(req, "credit must be an integer in 1..100000")
            return
        assert isinstance(group, str) and isinstance(pattern, str)
        gkey = group_key(group, pattern)
        local = self._local.get(gkey)
        if local is None:
            local = self._local[gkey] = LocalGroup(gkey, group, pattern, self._ctx.config.hwm)
        old = local.find(req.ident, member)
        if old is not None:
            local.remove(old)
        local.add(Member(req.ident, member, credit))
        self._ctx.emit(QueueJoined(group=group, pattern=pattern, members=len(local.members)))
        if len(local.members) == 1:
            self._ctx.add_interest(gkey, "queue")
        self._changed(gkey)
        if req.req_id:
            reply = {"group": group, "pattern": pattern, "members": len(local.members)}
            self._ctx.reply(req, wire.QUEUE_JOIN, reply)

    def _member(self, req: Request) -> tuple[LocalGroup, Member] | None:
        member = req.body.get("member")
        if type(member) is not int:
            return None
        for local in self._local.values():
            m = local.find(req.ident, member)
            if m is not None:
                return local, m
        return None

    def _ack(self, req: Request) -> None:
        found = self._member(req)
        upto = req.body.get("upto")
        if found is None or type(upto) is not int:
            return
        found[0].acked(found[1], upto)
        self._changed(found[0].gkey)

    def _leave(self, req: Request) -> None:
        """A member leaves (it acknowledged what it processed first, on the same
        connection): what it still held goes to the others, here or, if it was the last
        here, elsewhere (:meth:`_remove`); only a member that dies loses its messages."""
        found = self._member(req)
        if found is not None:
            local, m = found
            back = local.give_back(m)
            self._remove(local, m)
            if local.members:  # (else _remove picked them again, and counted them)
                self.repicked += back

    def _remove(self, local: LocalGroup, m: Member) -> None:
        local.remove(m)
        self._changed(local.gkey)
        left = QueueLeft(group=local.group, pattern=local.pattern, members=len(local.members))
        self._ctx.emit(left)
        if local.members:
            return
        # the last member here left: interest goes, and what waited for it is picked
        # again among the members elsewhere (never back to this node)
        self._ctx.drop_interest(local.gkey, "queue")
        del self._local[local.gkey]
        self._groups.saturated.discard(local.gkey)
        if local.lost:  # (still told in the group's row while it has members elsewhere)
            self._lose(local.gkey, local.lost)
        for msg in local.pending:
            step = self._groups.step(local.gkey, self._ctx.broker_id, msg[0], ())
            if step is None or step[0] is None:
                self._unroutable(local.gkey)
                continue
            self.repicked += 1
            self._send(msg, (), local.gkey, step[1], step[0])
        local.pending.clear()

    # -- the pass -------------------------------------------------------------------------

    def before_commit(self) -> None:
        if self._capacity.ups:
            self._capacity.send_to_new_links()
        if self._out:
            self._flush_links()
        saturated = self._groups.saturated
        touched, self._touched = self._touched, set()
        for local in list(self._local.values()):
            waiting = bool(local.pending)
            if waiting:
                self._pump(local)
                if local.gkey not in self._local:
                    continue  # (its last member died: what waited was picked again)
            if not waiting and local.gkey not in touched:
                continue  # (neither its members' room nor what waits changed)
            # no member here has room: what waits goes to other nodes with room
            # (.spill), and local_first picks those for new messages (routing/groups.py),
            # rather than queue them behind a slow member, or past the bound. (Not "while
            # messages wait": with none waiting after a spill, the next would wait here.)
            if local.free():
                saturated.discard(local.gkey)
                continue
            saturated.add(local.gkey)
            # (round_robin: each member its exact share, so only once no member here has
            # had room for a second, as its strict turns stop waiting for such a member)
            strict = self._groups.policies.get(local.group) == "round_robin"
            if local.pending and (not strict or local.stuck(time.monotonic())):
                self.spilled += spill(self._groups, local, self._ctx.broker_id, self._spill_one)

    def _changed(self, gkey: str) -> None:
        """The room of ``gkey``'s members here changed (or may have)."""
        self._dirty.add(gkey)
        self._touched.add(gkey)

    def _spill_one(self, msg: list[Any], gkey: str, target: str) -> None:
        self._send(msg, (), gkey, target, self._groups.next_hop(gkey, target))

    def _flush_links(self) -> None:
        out, self._out = self._out, {}
        self.forwarded += send_outboxes(self._ctx.links, out, self._dropped)

    def _dropped(self, entries: list[list[Any]], reason: str) -> None:
        """QMSGS entries this node could not send on (counted by reason): lost for their
        groups, which say so too (their ``lost``)."""
        self._ctx.drop(reason, len(entries))
        for e in entries:
            self._lose(e[9][1])

    def _unroutable(self, gkey: str) -> None:
        self.unroutable += 1
        self._ctx.drop("queue_unroutable")
        self._lose(gkey)

    def _lose(self, gkey: str, n: int = 1) -> None:
        self._lost[gkey] = self._lost.get(gkey, 0) + n

    def _pump(self, local: LocalGroup) -> None:
        """Hand what waits to the members with room, then send each member its share in
        QDELIVER frames (a frame per member per pass, not per message)."""
        pending = local.pending
        now = time.monotonic()
        strict = self._groups.policies.get(local.group) == "round_robin"
        batches: dict[Member, list[list[Any]]] = {}
        while pending:
            m = local.next_member(now, strict=strict)
            if m is None:
                break
            msg = pending.popleft()
            local.sent(m, msg, now)
            batches.setdefault(m, []).append(msg)
        for m, msgs in batches.items():
            self._changed(local.gkey)
            first = m.n - len(msgs) + 1
            for i in range(0, len(msgs), QDELIVER_BATCH):
                chunk = msgs[i : i + QDELIVER_BATCH]
                body = {"member": m.member, "n": first + i + len(chunk) - 1, "msgs": chunk}
                try:
                    alive = self._ctx.send_to(m.ident, wire.encode_control(wire.QDELIVER, 0, body))
                except zmq.Again:  # its queue is full: what is left waits for a later pass
                    local.unsend(m, msgs[i:])
                    break
                if not alive:
                    local.unsend(m, msgs[i:])
                    self._remove(local, m)
                    break
            if local.gkey not in self._local:
                return

    def link_up(self, link: Link, now: float) -> None:
        self._capacity.ups.add(link.engine_id)  # (sent at before_commit: .capacity)

    def tick(self, now: float) -> None:
        if self._local and now >= self._next_probe:
            self._next_probe = now + PROBE_INTERVAL
            self._probe()
        if now >= self._next_cap:
            self._next_cap = now + CAPACITY_INTERVAL
            self._capacity.flood(self._local, self._dirty, now)
            if self._lost:  # (the count goes with the group's row: no member anywhere)
                origins = self._groups.origins
                for gkey in [g for g in self._lost if g not in origins and g not in self._local]:
                    del self._lost[gkey]

    def _probe(self) -> None:
        frame = wire.encode_control(wire.PING, 0, {"incarnation": self._ctx.incarnation})
        for local in list(self._local.values()):
            for m in list(local.members):
                try:
                    alive = self._ctx.send_to(m.ident, frame)
                except zmq.Again:
                    continue
                if alive or local.gkey not in self._local:
                    self._suspects.discard(m.ident)
                elif m.ident in self._suspects or not self._ctx.unread():
                    self._suspects.discard(m.ident)
                    self._remove(local, m)
                else:
                    # frames wait unread: its leave (with its acknowledgements) may be
                    # among them, read before the next probe judges it; one probe only,
                    # as a busy node's control socket seldom has nothing to read
                    self._suspects.add(m.ident)

    # -- status ---------------------------------------------------------------------------

    def status(self, out: dict[str, Any]) -> None:
        # (a list other features add to: shared durables are queues too)
        rows = queue_status(self._groups, self._local, self._ctx.broker_id, self._lost)
        out.setdefault("queues", []).extend(rows)
        out["queues_totals"] = {
            "picked": self.picked,
            "forwarded": self.forwarded,
            "repicked": self.repicked,
            "unroutable": self.unroutable,
            "spilled": self.spilled,
        }


def _join_subjects(body: dict[str, Any]) -> Iterable[tuple[str, str]]:
    pattern = body.get("pattern", ">")
    return (("subscribe", pattern),) if isinstance(pattern, str) else ()
