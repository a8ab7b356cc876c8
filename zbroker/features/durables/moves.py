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
   of that name). Meanwhile the old home serves its consumers as before; opens here wait.
2. **move** -- the old home hands its consumers nothing more; every stored message not in
   flight goes to the new home in ``rows`` (each carrying how often it has moved), and is
   deleted here in the same commit as the internal message carrying it: each message
   exists in exactly one store at every instant (the link queue's copy is the travelling
   one). What consumers had in flight is acknowledged here as usual, or given back and
   moved, flagged redelivered; what is published meanwhile is stored here and moved too.
   While both nodes hold interest in the pattern a message may reach both: the new home
   stores the first copy of each message id (origin, incarnation, sequence) and drops the
   second. Opens here are served as consumers of the new home (:mod:`.members`).
3. **handover** -- once the new home's advertisement has reached here and
   ``HANDOVER_GRACE`` seconds passed (so publishers' routes know it), and nothing is in
   flight to consumers here (those still holding messages after ``DRAIN_TIMEOUT`` are
   taken back and moved, flagged), the old home deletes the durable, empty, withdraws its
   interest and advertisement and sends ``done`` to the new home and ``moved`` to the
   nodes consuming it, which attach to the new home at once.

Bounded moves: each message counts its moves (``dqueue.moves``); a durable holding one
that has moved ``max_moves`` times does not move (its consumers elsewhere take it over the
network; the durable may move after that one is consumed), and the messages that hit the
bound are counted (``move_limited``). A move needs the home to have been without its own
consumers for a whole delay, so a message moves at most once per delay, and only toward
consumers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgpack

from ...node import Request
from .adoption import Adoption
from .remote import CHUNK_BYTES, send

if TYPE_CHECKING:
    from ...node.context import Context
    from .feature import Durables
    from .members import Members
    from .state import Durable

__all__ = ["Moves"]

log = logging.getLogger("zbroker.node")

#: seconds the old home keeps its interest after the new home's advertisement reached it
HANDOVER_GRACE = 2.0
#: seconds the old home waits for its consumers' in-flight messages before taking them back
DRAIN_TIMEOUT = 5.0
#: stored messages moved per pass at most (the rest in the next passes)
ROWS_PER_PASS = 2000


class Outgoing:
    """A move of one durable away from this node."""

    __slots__ = ("grace_from", "moved", "phase", "session", "target", "waiting")

    def __init__(self, target: str, session: str) -> None:
        self.target = target
        self.session = session
        self.phase = "offer"  # offer -> move (adopt_ok) -> done
        self.grace_from: float | None = None  # when the new home's advertisement came
        self.moved: dict[int, int] = {}  # q -> moves made so far (0: absent)
        self.waiting: list[Request] = []  # opens here while the offer is unanswered


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
        self.adoption = Adoption(f, ctx, members)
        self._lonely: dict[str, float] = {}  # durable -> since when no consumer here
        self._limited: dict[str, set[int]] = {}  # messages counted at the bound
        self._refused: dict[str, set[str]] = {}  # targets that refused the durable
        self._warned: set[str] = set()  # durables said to be held on two nodes
        self._count = 0
        self._moved: dict[str, int] = {}  # durable -> messages moved away (this move)
        self.redistributed = 0  # messages moved away from this node
        self.move_limited = 0
        self.moves = 0  # moves finished (this node the old home)
        self.sent = False  # internal messages originated since the last pass

    # -- messages ----------------------------------------------------------------------------

    def handle(self, node: str, body: dict[str, Any]) -> None:
        """A move message (``adopt_ok``/``adopt_refused`` answer this node's offers; the
        rest are for the target side or for nodes consuming a durable that moved)."""
        op, name = body["op"], body["name"]
        o = self.out.get(name)
        if op in ("adopt_ok", "adopt_refused"):
            if o is None or o.session != body["session"] or o.phase != "offer":
                self._ctx.drop("durable_move_stale")
            elif op == "adopt_ok":
                self._accepted(name, o)
            else:
                self._refused.setdefault(name, set()).add(o.target)
                log.info("durable %s: node %s refused it: %s", name, o.target, body.get("message"))
                del self.out[name]
                for req in o.waiting:
                    self._f.reopen(req)
        elif op == "moved":
            self._members.rehome(name, body["session"], body.get("to"))
        else:
            self.sent |= self.adoption.handle(node, body)

    def _accepted(self, name: str, o: Outgoing) -> None:
        store = self._ctx.store
        assert store is not None
        o.phase = "move"
        o.moved = store.durable_moves.moved(name)
        self._f.wake(name)
        for req in o.waiting:  # opens that waited: consumers of the new home now
            self._f.reopen(req)
        o.waiting = []
        log.info("durable %s: moving to node %s, which consumes it", name, o.target)

    # -- the old home ------------------------------------------------------------------------

    def redirect(self, req: Request, name: str) -> str | None:
        """An open here of a durable moving away: the new home (serve it as a consumer
        there), or None (not moving). An open while the offer is unanswered waits."""
        o = self.out.get(name)
        if o is None:
            return None
        if o.phase == "offer":
            o.waiting.append(req)
            return ""
        return o.target

    def transferring(self, name: str) -> bool:
        o = self.out.get(name)
        return o is not None and o.phase == "move"

    def transfer(self, d: Durable) -> None:
        """Move what ``d`` stores and has not handed out (after the pass's commit): rows to
        the new home, deleted here in the same commit as the message carrying them."""
        o, st, store = self.out[d.name], d.shared, self._ctx.store
        assert st is not None and store is not None
        rows: list[tuple[Any, ...]] = []
        if st.redo:
            take, st.redo = st.redo[:ROWS_PER_PASS], st.redo[ROWS_PER_PASS:]
            rows = store.durable_rows(d.name, take)
        if len(rows) < ROWS_PER_PASS:
            fresh = store.pending_durable(d.name, st.cursor, ROWS_PER_PASS - len(rows))
            if fresh:
                st.cursor = fresh[-1][0]
            rows.extend(fresh)
        if not rows:
            return
        bodies, chunk, size = [], [], 0
        for q, topic, payload, fmt, h, origin, inc, oseq, ts, delivered in rows:
            headers = None if h is None else msgpack.unpackb(h, strict_map_key=False)
            msg = [topic, payload, fmt, headers, origin, inc, oseq, ts]
            chunk.append([o.moved.pop(q, 0) + 1, bool(delivered), msg])
            size += len(payload) + len(topic) + 64
            if size >= CHUNK_BYTES:
                bodies.append(chunk)
                chunk, size = [], 0
        if chunk:
            bodies.append(chunk)
        send(
            self._ctx,
            o.target,
            [{"op": "rows", "name": d.name, "session": o.session, "rows": c} for c in bodies],
        )
        store.ack_each(d.name, [r[0] for r in rows])  # (with the messages' origination)
        self.redistributed += len(rows)
        self._moved[d.name] = self._moved.get(d.name, 0) + len(rows)
        self.sent = True
        if len(rows) >= ROWS_PER_PASS:
            self._f.wake(d.name)

    def tick(self, now: float) -> None:
        self.adoption.tick(now)
        for d in list(self._f.durables.values()):
            name = d.name
            if name in self.out:
                self._advance(d, self.out[name], now)
                continue
            target = self._target(d)
            if target is None:
                self._lonely.pop(name, None)
                self._two_homes(name)
                continue
            since = self._lonely.setdefault(name, now)
            if now - since >= self.delay:
                self._lonely[name] = now  # (not moving now: asked again after a delay)
                self._offer(d, target)

    def _target(self, d: Durable) -> str | None:
        """Where ``d`` would move: None while it has a consumer here (or is exclusive)."""
        if d.consumer is not None or d.shared is None:
            return None  # (exclusive, or not consumed shared since this node started)
        refused = self._refused.get(d.name, set())
        if any(c.node is None for c in d.shared.consumers.values()):
            return None
        nets = [c for c in d.shared.consumers.values() if c.node and c.node not in refused]
        if nets:
            return min(nets, key=lambda c: (-c.members, c.node or "")).node
        me = self._ctx.broker_id
        others = self._ctx.engine.durable_homes.elsewhere(d.name, me)
        others = [h for h in others if h not in refused]
        lower = [h for h in others if h < me]  # (two homes: the higher moves into the lower)
        return lower[0] if lower else None

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
        o = self.out[d.name] = Outgoing(target, f"{self._ctx.incarnation}.m{self._count}")
        send(self._ctx, target, [{"op": "adopt", "name": d.name, "session": o.session, **spec}])
        self.sent = True

    def _advance(self, d: Durable, o: Outgoing, now: float) -> None:
        if o.phase != "move":
            return
        if o.grace_from is None:
            if o.target in self._ctx.engine.durable_homes.homes.get(d.name, ()):
                o.grace_from = now
            return
        if now < o.grace_from + HANDOVER_GRACE:
            return
        st, store = d.shared, self._ctx.store
        assert st is not None and store is not None
        if st.in_flight():
            if now >= o.grace_from + HANDOVER_GRACE + DRAIN_TIMEOUT:
                for ident in list(st.consumers):  # their messages are moved, flagged
                    self._f.shared_gone(d, ident, "durable moved")
            return
        store.commit()
        if st.redo or store.durable_depth(d.name):
            self._f.wake(d.name)  # (not all moved yet)
            return
        self._finish(d, o)

    def _finish(self, d: Durable, o: Outgoing) -> None:
        """Everything moved and nothing in flight: the durable ends here."""
        assert d.shared is not None
        nodes = {c.node: c.session for c in d.shared.consumers.values() if c.node}
        self._f.remove(d)  # (and its move: self.out)
        self._lonely.pop(d.name, None)
        self._limited.pop(d.name, None)
        self._moved.pop(d.name, None)
        self.moves += 1
        done = {"op": "done", "name": d.name, "session": o.session}
        send(self._ctx, o.target, [done])
        for node, session in nodes.items():
            if node != o.target:
                moved = {"op": "moved", "name": d.name, "session": session, "to": o.target}
                send(self._ctx, node, [moved])
        self.sent = True
        log.info("durable %s: moved to node %s (its home now)", d.name, o.target)

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
