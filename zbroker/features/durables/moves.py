"""A shared durable's home moves to its consumers: redistribution without a second queue.

A shared durable has one home (:mod:`.remote`); consumers elsewhere take from it over the
network, so nothing is ever stranded. But a home whose own consumers all left serves every
message across the network for as long as they stay away. After ``redistribution_delay``
seconds with no consumer of its own (a consumer that returns sooner keeps the durable
here) while another node consumes it, the home **moves**: to the node consuming it with
the most consumers (ties: the lowest broker ID), or, with no network consumer, to another
node that also holds a durable of that name (two homes made before their advertisements
crossed, or a move an old home restarted in the middle of: the higher ID moves into the
lower), and the stored messages go with it. Phases, all driven by internal persistent
messages on ``$ZB.SD.<node>`` (store-and-forward: each crosses each link once, in order,
across cuts and restarts):

1. **offer** -- ``adopt`` (the durable's pattern, selector and bounds) to the target,
   which creates the durable as a home of its own (it keeps the messages' ids for the
   dedupe below) and answers ``adopt_ok`` (or ``adopt_refused``: it holds another durable
   of that name, or is moving it away itself). Meanwhile the old home serves its
   consumers as before; an open here waits for the answer (``OFFER_WAIT``, then it is
   refused: open it again). An offer unanswered for ``OFFER_TIMEOUT`` while the target is
   unreachable is given up; an ``adopt_ok`` that comes later still starts the move if no
   consumer attached here meanwhile.
2. **move** -- the old home hands its consumers nothing more; every stored message not in
   flight goes to the new home in ``rows`` (each carrying how often it has moved), and is
   deleted here when the new home answers ``rows_ok`` (sent in the commit that stored it
   there); what is unanswered is sent again (:class:`~.outgoing.Outgoing`), so a message
   is never in no store. What consumers had in flight is acknowledged here as usual, or
   given back and moved, flagged redelivered; what is published meanwhile is stored here
   and moved too.
   While both nodes hold interest in the pattern a message may reach both: the new home
   stores the first copy of each message id (origin, incarnation, sequence) and drops the
   second. Opens here are served as consumers of the new home (:mod:`.members`).
3. **handover** (:class:`~.outgoing.Outgoing`) -- once the new home's advertisement has
   reached here and ``HANDOVER_GRACE`` seconds passed (so publishers' routes know it), and
   nothing is in flight to consumers here (those still holding messages after
   ``DRAIN_TIMEOUT`` are taken back and moved, flagged), the old home sends ``moved`` to
   the other nodes consuming it (they attach to the new home at once); when every link of
   its own has been up for ``HANDOVER_GRACE`` (a neighbour queues persistent messages for
   this node while their link is down: they must still find the durable here), or after
   ``LINK_WAIT``, it seals the durable (withdraws its interest, stores nothing new: what is
   published now reaches the new home only, so steady publishing cannot keep it from
   ending), and once all it stored has moved deletes it, empty, withdraws its
   advertisement and sends ``done`` (with how many messages it moved) to the new home.

Nothing moves toward a target this node has no route to (an internal message without a
route is dropped): the move waits. The target is kept in the store (``durables.
moving_to``), so an old home restarted in the middle of a move offers it again.

Bounded moves: each message counts its moves (``dqueue.moves``); a durable holding one
that has moved ``max_moves`` times does not move (its consumers elsewhere take it over the
network; the durable may move after that one is consumed), and the messages that hit the
bound are counted (``move_limited``). A move needs the home to have been without its own
consumers for a whole delay, so a message moves at most once per delay, and only toward
consumers.
"""

from __future__ import annotations

import bisect
import logging
import time
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ...names import validate_broker_id
from ...node import Request
from .adoption import Adoption
from .outgoing import HANDOVER_GRACE, ROWS_PER_PASS, Outgoing
from .remote import kept_here, qs_of, send
from .shared import SharedState

if TYPE_CHECKING:
    from ...node.context import Context
    from .feature import Durables
    from .members import Members
    from .state import Durable

__all__ = ["Moves"]

log = logging.getLogger("zbroker.node")

#: seconds an open on the old home waits for the offer's answer (then refused: try again)
OFFER_WAIT = 3.0
#: seconds an offer to an unreachable target is kept before it is given up
OFFER_TIMEOUT = 10.0
#: seconds a target that refused a durable is not offered it again
REFUSED_FOR = 60.0


class Moves:
    """The moves of shared durables: away from this node (:class:`Outgoing`), and to it
    (:class:`~.adoption.Adoption`)."""

    def __init__(
        self, f: Durables, ctx: Context, members: Members, delay: float, max_moves: int
    ) -> None:
        self._f = f
        self._ctx = ctx
        self._members = members
        self.delay = delay
        self.max_moves = max_moves
        self.out: dict[str, Outgoing] = {}
        self.adoption = Adoption(f, ctx, members, self.out)
        self._given_up: dict[str, Outgoing] = {}  # offers given up (a late adopt_ok)
        self._lonely: dict[str, float] = {}  # durable -> since when no consumer here
        self._limited: dict[str, set[int]] = {}  # messages counted at the bound
        #: targets that refused the durable, until when they are not asked again
        self._refused: dict[str, dict[str, float]] = {}
        self._warned: set[str] = set()  # durables said to be held on two nodes
        self._resume: dict[str, str] | None = None  # moves the store says were under way
        self._down: set[str] = set()  # this node's links that are down
        self._last_up = 0.0
        self._count = 0
        self._moved: dict[str, int] = {}  # durable -> messages moved away (this move)
        self.redistributed = 0  # messages moved away from this node
        self.move_limited = 0
        self.moves = 0  # moves finished (this node the old home)
        self.sent = False  # internal messages originated since the last pass

    # -- messages ----------------------------------------------------------------------------

    def handle(self, node: str, body: dict[str, Any]) -> None:
        """A move message (``adopt_ok``/``adopt_refused``/``abandon`` answer this node's
        offers; ``moved`` is for a node consuming a durable that moved; the rest are the
        target side's)."""
        op, name = body["op"], body["name"]
        if op in ("adopt_ok", "adopt_refused", "abandon"):
            self._answer(op, name, body)
        elif op == "rows_ok":
            self._rows_ok(node, name, body)
        elif op == "moved":
            to = body.get("to")
            try:
                validate_broker_id(to, "moved.to")
            except ConfigError as exc:
                self._ctx.bad(node, "bad_shared_durable", str(exc))
                return
            self._members.rehome(name, body["session"], to)
        else:
            self.sent |= self.adoption.handle(node, body)

    def _answer(self, op: str, name: str, body: dict[str, Any]) -> None:
        o = self.out.get(name)
        if o is None or o.session != body["session"]:
            late = self._given_up.get(name)
            if op == "adopt_ok" and late is not None and late.session == body["session"]:
                self._late_ok(name, late)
            else:
                self._ctx.drop("durable_move_stale")
        elif op == "adopt_ok" and o.phase == "offer":
            self._accepted(name, o)
        elif op == "adopt_refused" or op == "abandon":  # (abandon: deleted there)
            # (not for ever: "moving it away itself" or an exclusive holder passes)
            self._refused.setdefault(name, {})[o.target] = time.monotonic() + REFUSED_FOR
            log.info("durable %s: node %s refused it: %s", name, o.target, body.get("message"))
            self._forget(name)
            self._reopen(o, time.monotonic())
        else:
            self._ctx.drop("durable_move_stale")

    def _rows_ok(self, node: str, name: str, body: dict[str, Any]) -> None:
        """The new home stored these rows: deleted here now."""
        o, qs = self.out.get(name), qs_of(body)
        if qs is None:
            self._ctx.bad(node, "bad_shared_durable", "rows_ok without valid qs")
        elif o is None or o.session != body["session"]:
            self._ctx.drop("durable_move_stale")
        else:
            n = o.answered(self._ctx, name, qs)
            self.redistributed += n
            self._moved[name] = self._moved.get(name, 0) + n

    def _accepted(self, name: str, o: Outgoing) -> None:
        store = self._ctx.store
        assert store is not None
        o.phase = "move"
        o.moved = store.durable_moves.moved(name)
        self._f.wake(name)
        self._reopen(o, time.monotonic())  # (opens that waited: consumers of the new home)
        log.info("durable %s: moving to node %s, which consumes it", name, o.target)

    def _late_ok(self, name: str, o: Outgoing) -> None:
        """The target adopted an offer given up here: the move goes on if nothing here
        consumes the durable (else both nodes hold it: the warning says so)."""
        del self._given_up[name]
        d = self._f.durables.get(name)
        if d is None or d.consumer is not None or name in self.out:
            return
        if d.shared is not None and any(c.node is None for c in d.shared.consumers.values()):
            return
        if d.shared is None:
            d.shared = SharedState()
        self.out[name] = o
        self._accepted(name, o)

    def _reopen(self, o: Outgoing, now: float) -> None:
        """Take again the opens that waited for the offer's answer; those whose wait
        ended are refused (their clients are giving up: attached, they would be ghosts)."""
        waiting, o.waiting = o.waiting, []
        for req, until in waiting:
            if until > now:
                self._f.reopen(req)
            else:
                self._f.refuse(req, _moving(req.body.get("name"), o.target))

    # -- the old home ------------------------------------------------------------------------

    def redirect(self, req: Request, name: str) -> str | None:
        """An open here of a durable moving away: the new home (serve it as a consumer
        there), "" (it waits for the offer's answer) or None (not moving)."""
        o = self.out.get(name)
        if o is None:
            return None
        if o.phase == "offer":
            o.waiting.append((req, time.monotonic() + OFFER_WAIT))
            return ""
        return o.target

    def transferring(self, name: str) -> bool:
        o = self.out.get(name)
        return o is not None and o.phase == "move"

    def transfer(self, d: Durable) -> None:
        """After the pass's commit: move what ``d`` holds (see Outgoing.transfer)."""
        n = self.out[d.name].transfer(self._ctx, d)
        if n:
            self.sent = True
        if n >= ROWS_PER_PASS:
            self._f.wake(d.name)

    def link_changed(self, link: str, up: bool, now: float) -> None:
        if up:
            self._down.discard(link)
            self._last_up = now
        else:
            self._down.add(link)

    def tick(self, now: float) -> None:
        self.adoption.tick(now)
        if self._resume is None:
            assert self._ctx.store is not None
            self._resume = self._ctx.store.durable_moves.moving()
        stable = not self._down and now >= self._last_up + HANDOVER_GRACE
        for d in list(self._f.durables.values()):
            name = d.name
            o = self.out.get(name)
            if o is not None:
                self._advance(d, o, now, stable)
                continue
            target = self._resumed(d) or self._target(d)
            if target is None:
                self._lonely.pop(name, None)
                self._two_homes(name)
                continue
            since = self._lonely.setdefault(name, now)
            if now - since >= self.delay:
                self._lonely[name] = now  # (not moving now: asked again after a delay)
                self._offer(d, target)

    def _advance(self, d: Durable, o: Outgoing, now: float, stable: bool) -> None:
        if o.phase == "move":
            o.resend(d, now, o.reachable(self._ctx))
            if d.shared is not None and d.shared.redo:
                self._f.wake(d.name)
            if o.ready(self._f, self._ctx, d, now, stable):
                self._finish(d, o)
            return
        late = [w for w in o.waiting if w[1] <= now]
        if late:  # (their clients are giving up: refused, so none is left a ghost)
            o.waiting = [w for w in o.waiting if w[1] > now]
            for req, _ in late:
                self._f.refuse(req, _moving(d.name, o.target))
        if now >= o.since + OFFER_TIMEOUT and not o.reachable(self._ctx):
            log.info("durable %s: node %s did not answer its offer", d.name, o.target)
            self._forget(d.name)
            self._given_up[d.name] = o
            self._reopen(o, now)

    def _resumed(self, d: Durable) -> str | None:
        """The target of a move the store says was under way when this node stopped
        (None: none, or a consumer attached here since: it keeps the durable)."""
        target = self._resume.get(d.name) if self._resume else None
        if target is None:
            return None
        local = d.shared is not None and any(c.node is None for c in d.shared.consumers.values())
        if d.consumer is not None or local:
            assert self._resume is not None and self._ctx.store is not None
            del self._resume[d.name]
            self._ctx.store.durable_moves.set_moving(d.name, None)
            return None
        return target

    def _target(self, d: Durable) -> str | None:
        """Where ``d`` would move: None while it has a consumer here (or is exclusive,
        or is arriving here)."""
        if d.consumer is not None or d.shared is None or d.name in self.adoption.ids:
            return None
        if any(c.node is None for c in d.shared.consumers.values()):
            return None
        if kept_here(self._ctx, d.pattern) is not None:
            return None  # (a local branch's messages never leave: remote.kept_here)
        now = time.monotonic()
        refused = {t for t, until in self._refused.get(d.name, {}).items() if until > now}
        me = self._ctx.broker_id
        # two homes of one name: the higher moves into the lower (never both ways at once)
        others = self._ctx.engine.durable_homes.elsewhere(d.name, me)
        lower = [h for h in others if h < me and h not in refused]
        if lower:
            return lower[0]
        nets = [c for c in d.shared.consumers.values() if c.node and c.node not in refused]
        return min(nets, key=lambda c: (-c.members, c.node or "")).node if nets else None

    def _two_homes(self, name: str) -> None:
        """Say once (a warning) that another node holds a durable of this name while
        both have consumers of their own (neither moves): each stores every message."""
        if name in self.adoption.ids:
            return  # (moving here: the old home holds it until the handover)
        others = self._ctx.engine.durable_homes.elsewhere(name, self._ctx.broker_id)
        if not others:
            self._warned.discard(name)
        elif name not in self._warned:
            self._warned.add(name)
            log.warning(
                "durable %s is also held on %s (opened on both before either knew of the "
                "other): each stores every message; the one left without consumers of "
                "its own moves into the other",
                name,
                ", ".join(others),
            )

    def _offer(self, d: Durable, target: str) -> None:
        store = self._ctx.store
        assert store is not None
        bound = store.durable_moves.at_bound(d.name, self.max_moves)
        if bound:
            counted = self._limited.setdefault(d.name, set())
            new = [q for q in bound if q not in counted]
            counted.update(new)
            self.move_limited += len(new)
            return
        spec = store.durable_moves.spec(d.name)
        assert spec is not None
        self._count += 1
        o = Outgoing(target, f"{self._ctx.incarnation}.m{self._count}")
        if not o.reachable(self._ctx):
            return  # (an offer without a route would be dropped: asked again later)
        if d.shared is None:
            d.shared = SharedState()  # (a move the store says was under way: resumed)
        self.out[d.name] = o
        if self._resume:
            self._resume.pop(d.name, None)
        store.durable_moves.set_moving(d.name, target)
        send(self._ctx, target, [{"op": "adopt", "name": d.name, "session": o.session, **spec}])
        self.sent = True

    def _forget(self, name: str) -> None:
        o, d = self.out.pop(name, None), self._f.durables.get(name)
        if o is not None and d is not None:
            o.seal(self._ctx, d, False)  # (called off after the handover began)
        if o is not None and d is not None and d.shared is not None:
            for q in o.unanswered:  # (still stored here: to be handed out again)
                bisect.insort(d.shared.redo, q)
            self._f.wake(name)
        assert self._ctx.store is not None
        self._ctx.store.durable_moves.set_moving(name, None)

    def _finish(self, d: Durable, o: Outgoing) -> None:
        """Everything moved and nothing in flight: the durable ends here."""
        self._f.remove(d)  # (and its move: self.out)
        self._lonely.pop(d.name, None)
        self._limited.pop(d.name, None)
        self._moved.pop(d.name, None)
        self.moves += 1
        o.done(self._ctx, d.name)
        self.sent = True
        log.info("durable %s: moved to node %s (its home now)", d.name, o.target)

    # -- status ------------------------------------------------------------------------------

    def row(self, name: str) -> dict[str, Any]:
        """For the durable's ``status()["queues"]`` row: messages moved with it (to here,
        and away during a move), and where it is moving."""
        o = self.out.get(name)
        moved = self._moved.get(name, 0) + self.adoption.moved_in.get(name, 0)
        return {"redistributed": moved} | ({"moving_to": o.target} if o is not None else {})

    def counters(self) -> dict[str, int]:
        return {
            "durable_redistributed": self.redistributed,
            "durable_adopted": self.adoption.adopted,
            "durable_move_limited": self.move_limited,
            "durable_moves": self.moves,
        }


def _moving(name: Any, target: str) -> str:
    """The error an open waiting for a move's offer gets when its wait ends."""
    return f"durable subscription {name!r} is moving to node {target}: open it again"
