"""The durables feature: messages in, requests, admission and status.

Each durable's pattern is sticky local interest (source ``durable:NAME``): it stays
routed while links toward it are down, so what is published meanwhile waits in the
store-and-forward queue of the link that is down. The sink appends each matching message
to every matching durable's queue (or refuses it, counted, when a ``reject-new`` queue is
full). DURABLE_OPEN attaches a subscriber (everything not acknowledged is sent again,
flagged redelivered), DURABLE_ACK frees credit, DURABLE_CLOSE detaches, DURABLE_DELETE
removes the durable and its messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ... import wire
from ...errors import ConfigError
from ...links.state import Link
from ...names import validate_broker_id
from ...node import Feature, Op, Refusal, Request
from ...node.context import Context
from ...node.events import (
    DurableAttached,
    DurableDeleted,
    DurableDetached,
    DurableOpened,
    DurableOverflow,
)
from ...sublist import Sublist
from . import homes
from .admission import admit
from .attaching import alive, attach
from .members import Members
from .moves import Moves
from .options import open_options, open_subjects
from .pump import probe, pump
from .remote import Home
from .report import durable_row
from .selecting import interest_source, mismatch, stored_selector
from .shared import pump_shared, send_shared
from .state import Durable

__all__ = ["DURABLE_PROBE_INTERVAL", "Durables"]

#: seconds between checks that attached durable subscribers are still connected
DURABLE_PROBE_INTERVAL = 1.0
_I64 = 1 << 63


class Durables(Feature):
    name = "durables"
    sink_sources = ("durable", "sdr")  # (sdr: shared durables across nodes, remote.py)

    def __init__(self, redistribution_delay: float = 1.0, max_moves: int = 3) -> None:
        self._moving = (redistribution_delay, max_moves)  # (.moves)
        self._durables: dict[str, Durable] = {}
        self.durables = self._durables  # (read by remote.Home)
        self._match: Sublist[str] = Sublist()
        self._pump: set[str] = set()  # durables with something to send
        self._next_probe = 0.0
        self.stored = 0
        self.delivered = 0
        self.acked = 0

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        self._home = Home(self, ctx)
        self._members = Members(self, ctx, self._home)
        self._moves = Moves(self, ctx, self._members, *self._moving)
        self._members.on_move = self._moves.handle
        self._members.adoption = self._moves.adoption
        assert ctx.store is not None
        selectors = ctx.store.durable_selectors()
        for name, (pattern, next_q, max_msgs) in ctx.store.durables().items():
            d = Durable(name, pattern, next_q, max_msgs)
            d.selector = stored_selector(name, selectors.get(name))
            self._add(d)
        # before any link is up: a message on $ZB.SD.<this node> that a neighbour held for
        # it while it was down must find the interest (without it, it is taken and dropped)
        self._members.listen()

    def _add(self, d: Durable) -> None:
        self._durables[d.name] = d
        self._match.insert(d.pattern, d.name)
        self._ctx.add_interest(d.pattern, interest_source(d))
        homes.advertise(self._ctx, d.name)  # a durable name is one durable in the network

    def ops(self) -> Sequence[Op]:
        return (
            Op(wire.DURABLE_OPEN, self._open, open_subjects),
            Op(wire.DURABLE_ACK, self._ack, self._subjects),
            Op(wire.DURABLE_CLOSE, self._close, self._subjects),
            Op(wire.DURABLE_DELETE, self._delete, self._subjects),
        )

    def _subjects(self, body: dict[str, Any]) -> Iterable[tuple[str, str]]:
        name = body.get("name")
        d = self._durables.get(name) if isinstance(name, str) else None
        return (("subscribe", d.pattern),) if d is not None else ()

    # -- messages ---------------------------------------------------------------------------

    def sink(self, batch: list[list[Any]]) -> None:
        store = self._ctx.store
        assert store is not None
        durables, match = self._durables, self._match.match
        adopting = self._moves.adoption.ids  # (durables moving here: ids stored once)
        rejected: dict[str, int] = {}
        for m in batch:
            if m[0].startswith("$ZB.SD."):  # between a shared durable's home and members
                self._members.take(m)
                continue
            row = tuple(m[:8])  # (topic, payload, fmt, headers, origin, inc, seq, ts)
            size = len(m[1]) + len(m[0])
            for name in match(m[0]):
                d = durables[name]
                if d.sealed:
                    continue  # (moving away: its new home takes what comes now)
                if d.selector is not None and not d.selector(m[3]):
                    continue  # (its selector does not take it: not stored)
                if adopting and name in adopting and self._moves.adoption.seen(name, m):
                    continue
                if store.durable_rejects(name, 1, size):
                    # reject-new and full: what is stored stays; this one is not queued
                    self._ctx.drop("durable_reject_new")
                    rejected[name] = rejected.get(name, 0) + 1
                    continue
                store.enqueue(name, d.next_q, row)
                d.next_q += 1
                self.stored += 1
                if d.consumer is not None or d.shared is not None:
                    self._pump.add(name)
        for name, n in rejected.items():
            self._ctx.emit(DurableOverflow(name=name, policy="reject-new", messages=n))

    def admit(self, topics: dict[str, list[int]], *, batch: bool) -> Refusal | None:
        if not self._durables:
            return None
        return admit(self._ctx, self._match.match, topics, batch=batch)

    # -- requests ---------------------------------------------------------------------------

    def _named(self, req: Request) -> str | None:
        name = req.body.get("name")
        try:
            validate_broker_id(name, "durable name")
        except ConfigError as exc:
            self._refuse(req, str(exc))
            return None
        assert isinstance(name, str)
        return name

    def wake(self, name: str) -> None:
        self._pump.add(name)

    def _refuse(self, req: Request, message: str) -> None:
        if req.req_id:  # (a request sent without an id wants no answer)
            self._ctx.error(req, message)

    def _open(self, req: Request) -> None:
        name = self._named(req)
        if name is None:
            return
        store = self._ctx.store
        assert store is not None
        opts = open_options(req.body)
        if isinstance(opts, str):
            self._refuse(req, opts)
            return
        pattern = opts["pattern"]
        moving_to = self._moves.redirect(req, name)
        if moving_to == "":
            return  # (its move is being offered: answered once the target answers)
        d = None if moving_to else self._durables.get(name)
        created = d is None
        home = moving_to or (homes.elsewhere(self._ctx, name) if d is None else None)
        if d is None and home is None and name in self._members.members:
            home = self._members.members[name].home  # consumed here: its home is known
        if home is not None and opts["shared"]:  # a consumer here of a durable homed there
            self._members.open(req, name, opts, home)
            return
        if home is not None:
            if req.req_id:
                self._ctx.reply(req, wire.ERROR, homes.refusal(name, home))
            return
        if d is None:
            d = self._create(name, opts)
        elif d.pattern != pattern:
            self._refuse(req, f"durable subscription {name!r} exists with pattern {d.pattern!r}")
            return
        elif (wrong := mismatch(d, opts["selector"])) is not None:
            self._refuse(req, wrong)
            return
        refused = attach(d, req, opts, self._alive)
        if refused is not None:
            self._refuse(req, refused)
            return
        self._opened(d, req, opts["selector"], created)

    def _opened(self, d: Durable, req: Request, selector: str | None, created: bool) -> None:
        """Reply to an open that attached a consumer to ``d``."""
        store = self._ctx.store
        assert store is not None
        store.set_attached(d.name, True)
        self._pump.add(d.name)
        store.commit()
        self._ctx.emit(DurableAttached(name=d.name))
        reply = {
            "name": d.name,
            "pattern": d.pattern,
            "stored": store.durable_depth(d.name),
            "dropped": store.durable_dropped(d.name),
            "created": created,
            "home": self._ctx.broker_id,
        }
        if selector is not None:
            reply["selector"] = selector
        if req.req_id:
            self._ctx.reply(req, wire.DURABLE_OPEN, reply)

    def open_reply(self, d: Durable, req: Request) -> None:
        """An open that waited (for a home that moved here) is served by ``d`` now."""
        self._opened(d, req, d.selector.text if d.selector is not None else None, False)

    def _create(self, name: str, opts: dict[str, Any]) -> Durable:
        store = self._ctx.store
        assert store is not None
        pattern, selector = opts["pattern"], opts["selector"]
        bounds = (opts["max_msgs"], opts["max_bytes"], opts["max_age"], opts["overflow"])
        store.create_durable(name, pattern, *bounds, selector=selector)
        d = Durable(name, pattern, 1, opts["max_msgs"])
        d.selector = stored_selector(name, selector)
        self._add(d)
        self._ctx.emit(DurableOpened(name=name, pattern=pattern))
        return d

    def _alive(self, ident: bytes) -> bool:
        return alive(self._ctx, ident)

    def _ack(self, req: Request) -> None:
        name = self._named(req)
        d = self._durables.get(name) if name is not None else None
        if name is not None and self._members.holds(name, req.ident):
            self._members.ack(req, name)
            return
        if d is not None and d.shared is not None:
            qs = req.body.get("qs")
            if type(qs) is list and all(type(q) is int and 0 <= q < _I64 for q in qs):
                done = d.shared.ack(req.ident, qs)
                assert self._ctx.store is not None
                self._ctx.store.ack_each(d.name, done)
                self.acked += len(done)
                self._pump.add(d.name)
            return
        upto = req.body.get("upto")
        if d is None or type(upto) is not int or not 0 <= upto < _I64 or d.consumer != req.ident:
            return
        assert self._ctx.store is not None
        self._ctx.store.ack(d.name, upto)
        d.window.acked(upto)
        self.acked += 1
        self._pump.add(d.name)

    def _close(self, req: Request) -> None:
        name = self._named(req)
        d = self._durables.get(name) if name is not None else None
        if name is not None and self._members.holds(name, req.ident):
            self._members.close(req, name)
            return
        if d is not None and d.shared is not None and req.ident in d.shared.consumers:
            self._shared_gone(d, req.ident, "closed")
        elif d is not None and d.consumer == req.ident:
            d.consumer = None
            assert self._ctx.store is not None
            self._ctx.store.set_attached(d.name, False)
            self._ctx.emit(DurableDetached(name=d.name, reason="closed"))

    def _delete(self, req: Request) -> None:
        name = self._named(req)
        if name is None:
            return
        d = self._durables.pop(name, None)
        home = homes.elsewhere(self._ctx, name) if d is None else None
        if home is not None:  # (deleting it is its home's to do)
            if req.req_id:
                self._ctx.reply(req, wire.ERROR, homes.refusal(name, home))
            return
        deleted = 0
        if d is not None:
            self._durables[name] = d
            deleted = self.remove(d)
            self._ctx.emit(DurableDeleted(name=name, messages=deleted))
        if req.req_id:
            self._ctx.reply(req, wire.DURABLE_DELETE, {"deleted": deleted, "found": d is not None})

    def remove(self, d: Durable) -> int:
        """End durable ``d`` here (deleted, or moved away): its interest, its home
        advertisement, its messages (returns how many)."""
        del self._durables[d.name]
        self._match.remove(d.pattern, d.name)
        self._ctx.drop_interest(d.pattern, interest_source(d))
        homes.withdraw(self._ctx, d.name)
        self._pump.discard(d.name)
        self._moves.out.pop(d.name, None)
        assert self._ctx.store is not None
        return self._ctx.store.delete_durable(d.name)

    def reopen(self, req: Request) -> None:
        """An open that waited for a move's offer to be answered, taken again."""
        self._open(req)

    # -- the pass ---------------------------------------------------------------------------

    def before_commit(self) -> None:
        if self._pump:
            # durables the pump serves next keep their bounds until it has sent what their
            # subscribers have credit for (Store.trim_hold)
            assert self._ctx.store is not None
            self._ctx.store.trim_hold = self._pump
        self._members.flush()  # acknowledgements to the homes of what is consumed here

    def _shared_gone(self, d: Durable, ident: bytes, reason: str) -> None:
        """A consumer of a shared durable left: its messages go to the others."""
        assert d.shared is not None and self._ctx.store is not None
        d.shared.detach(ident)
        self._pump.add(d.name)
        if not d.shared.consumers:
            self._ctx.store.set_attached(d.name, False)
            self._ctx.emit(DurableDetached(name=d.name, reason=reason))

    # (for members, remote, moves and adoption)
    shared_gone, refuse, alive, create = _shared_gone, _refuse, _alive, _create

    def busy(self) -> bool:
        # (the next pass sends what they originated, and what a consumer gone left behind)
        return self._home.sent or self._moves.sent or bool(self._pump)

    def work(self) -> None:
        self._home.sent = self._moves.sent = False

    def after_commit(self) -> None:
        store = self._ctx.store
        if store is not None and store.durable_overflow:  # what the commit's trims dropped
            for name, n in store.durable_overflow.items():
                self._ctx.drop("durable_drop_oldest", n)  # (a drop like any other: counted)
                self._ctx.emit(DurableOverflow(name=name, policy="drop-oldest", messages=n))
            store.durable_overflow.clear()
        if self._pump:
            names, self._pump = self._pump, set()
            ready = [d for n in names if (d := self._durables.get(n)) is not None]
            shared = [d for d in ready if d.shared is not None]
            for d in [d for d in shared if self._moves.transferring(d.name)]:
                self._moves.transfer(d)  # (moving away: its messages go to the new home)
                shared.remove(d)
            if shared:
                out = [(d, pump_shared(self._ctx, d)) for d in shared]
                assert self._ctx.store is not None
                self._ctx.store.commit()  # the marks, before any send
                remote: dict[Any, list[dict[str, Any]]] = {}
                for d, frames in out:
                    self.delivered += send_shared(self._ctx, d, frames, remote, self._shared_gone)
                if remote:
                    self._home.flush(remote)
            self.delivered += pump(self._ctx, [d for d in ready if d.shared is None])

    def link_up(self, link: Link, now: float) -> None:
        self._moves.link_changed(link.name, True, now)

    def link_down(self, link: Link, now: float) -> None:
        self._moves.link_changed(link.name, False, now)

    def tick(self, now: float) -> None:
        self._members.tick(now)  # (consumers here of shared durables homed elsewhere)
        if self._durables and now >= self._next_probe:
            self._next_probe = now + DURABLE_PROBE_INTERVAL
            self._home.check()  # network consumers whose node is out of reach
            frame = wire.encode_control(wire.PING, 0, {"incarnation": self._ctx.incarnation})
            for d in probe(self._ctx, list(self._durables.values()), frame):
                self._ctx.emit(DurableDetached(name=d.name, reason="subscriber gone"))
            for d in [d for d in self._durables.values() if d.shared is not None]:
                assert d.shared is not None
                locals_ = [i for i, c in d.shared.consumers.items() if c.node is None]
                for ident in [i for i in locals_ if not self._alive(i)]:
                    self._shared_gone(d, ident, "subscriber gone")
        self._moves.tick(now)  # (homes without consumers of their own move to them)

    def status(self, out: dict[str, Any]) -> None:
        out["counters"]["durable_stored"] = self.stored
        out["counters"]["durable_delivered"] = self.delivered
        out["counters"].update(self._moves.counters())
        store = self._ctx.store
        assert store is not None
        out["durables"] = [durable_row(d, store) for d in self._durables.values()]
        queues = out.setdefault("queues", [])
        queues.extend(
            self._home.queue_rows(d) | self._moves.row(d.name)
            for d in self._durables.values()
            if d.shared
        )
        queues.extend(self._members.status())  # consumers here of durables elsewhere
