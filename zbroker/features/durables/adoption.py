"""The new home's side of a move (:mod:`.moves`): taking a shared durable and its messages.

``adopt`` creates the durable here as a home of its own (or finds the same one here: two
homes merging) and makes this node's consumers of it, so far consumers of the old home
(:mod:`.members`), consumers of the durable here -- each as soon as it holds nothing
from the old home (what the old home sent them after that is stored here, as moved).
``rows`` are stored in the order they come, with their move counts and redelivered flags
(rows for a durable deleted here meanwhile are answered ``abandon``: the old home stops);
``done`` ends the move. From ``adopt`` until ``DEDUPE_GRACE`` seconds after ``done`` and
every row it counts have come, the durable stores each message id (origin, incarnation,
sequence) once, whether it comes moved or published straight here: while both nodes hold
interest in the pattern a message can reach both. A node moving a durable away refuses
to adopt it (two moves crossing would end it on both nodes).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .options import open_options
from .remote import kept_here, send
from .selecting import mismatch
from .shared import SharedState

if TYPE_CHECKING:
    from ...node.context import Context
    from .feature import Durables
    from .members import Member, Members
    from .state import Durable

__all__ = ["Adoption"]

#: seconds the dedupe of a move's message ids outlives its ``done``
DEDUPE_GRACE = 5.0
#: seconds the dedupe waits for a ``done`` once the old home stopped advertising it
DONE_WAIT = 30.0
#: seconds (by the two nodes' clocks) after which an ``adopt`` is refused as stale: the old
#: home gives an unanswered offer up after moves.OFFER_TIMEOUT (10 s)
STALE_OFFER = 8.0
_SPEC = ("pattern", "max_msgs", "max_bytes", "max_age", "overflow", "selector")
MsgId = tuple[str, int, int]


class Adoption:
    """Durables moving to this node."""

    def __init__(self, f: Durables, ctx: Context, members: Members, out: dict[str, Any]) -> None:
        self._f = f
        self._ctx = ctx
        self._members = members
        self._out = out  # (durables moving away from here: none is adopted meanwhile)
        #: rows received per durable in the move under way, and the count ``done`` gave
        self._received: dict[str, int] = {}
        self._expected: dict[str, int] = {}
        self._from: dict[str, str] = {}  # durable -> its old home, while it arrives
        #: durables being adopted -> the ids of the messages stored since the move began
        self.ids: dict[str, set[MsgId]] = {}
        self._until: dict[str, float] = {}  # dedupe ends (after ``done``)
        self.adopted = 0  # messages moved here
        self.moved_in: dict[str, int] = {}  # per durable

    def handle(self, node: str, body: dict[str, Any]) -> bool:
        """A move message from the old home ``node``; True: answered (sent something)."""
        op, name = body["op"], body["name"]
        if op == "adopt":
            sent_at = body.get("sent_at")
            stale = type(sent_at) is float and time.time() - sent_at > STALE_OFFER
            refused = "the offer is stale" if stale else self._adopt(node, name, body)
            answer = {"op": "adopt_ok", "name": name, "session": body["session"]}
            if refused is not None:
                answer.update(op="adopt_refused", message=refused)
            send(self._ctx, node, [answer])
            return True
        if op == "rows":
            return self._rows(node, name, body)
        if op == "done":
            count = body.get("count")
            self._expected[name] = count if type(count) is int else 0
            self._settle(name)
            self.take_over(name, final=True)
        else:
            self._ctx.bad(node, "shared durable message", f"unknown op {op!r}")
        return False

    def _adopt(self, node: str, name: str, body: dict[str, Any]) -> str | None:
        """Create (or find) the durable; what refuses the move."""
        opts = open_options({k: body.get(k) for k in _SPEC} | {"shared": True})
        if isinstance(opts, str):
            return opts
        if name in self._out:
            return f"node {self._ctx.broker_id} is moving {name!r} away itself"
        kept = kept_here(self._ctx, str(opts["pattern"]))
        if kept is not None:  # (its consumers elsewhere could not take from it here)
            return f"node {self._ctx.broker_id} keeps {kept!r} local"
        d = self._f.durables.get(name)
        if d is None:
            d = self._f.create(name, opts)
        elif d.pattern != opts["pattern"] or mismatch(d, opts["selector"]) is not None:
            return f"node {self._ctx.broker_id} holds another durable named {name!r}"
        elif d.consumer is not None:
            return f"node {self._ctx.broker_id} holds {name!r} with an exclusive consumer"
        if d.shared is None:
            d.shared = SharedState()
        self._ids(name)
        self._from[name] = node
        self._until.pop(name, None)
        self._received[name] = 0
        self._expected.pop(name, None)
        self.take_over(name, final=False)
        self._f.wake(name)
        return None

    def _rows(self, node: str, name: str, body: dict[str, Any]) -> bool:
        """Moved messages; True: answered (the durable is gone here: the old home stops)."""
        d, rows = self._f.durables.get(name), body.get("rows")
        if type(rows) is not list:
            self._ctx.bad(node, "shared durable message", "rows without a list")
            return False
        self._received[name] = self._received.get(name, 0) + len(rows)
        if d is None:  # deleted here meanwhile: what it was sent goes with it
            self._ctx.drop("durable_move_orphan", len(rows))
            answer = {"op": "abandon", "name": name, "session": body["session"]}
            send(self._ctx, node, [answer])
            return True
        good = [r for r in rows if _valid(r)]
        if len(good) < len(rows):
            self._ctx.bad(node, "shared durable message", "a malformed moved row")
        if name not in self.ids:  # (this node restarted during the move)
            self._ids(name)
            self._from[name] = node
        self._store(d, [r[1:] for r in good])
        self._settle(name)
        # stored (or a copy already here): the old home deletes them once this commits
        qs = [r[0] for r in rows if type(r) is list and r and type(r[0]) is int]
        answer = {"op": "rows_ok", "name": name, "session": body["session"], "qs": qs}
        send(self._ctx, node, [answer])
        return True

    def _settle(self, name: str) -> None:
        """Once ``done`` came and every row it counted arrived (a row can come after
        ``done`` when its path changed), the dedupe ends after DEDUPE_GRACE."""
        expected = self._expected.get(name)
        if expected is not None and self._received.get(name, 0) >= expected:
            del self._expected[name]
            self._until[name] = time.monotonic() + DEDUPE_GRACE

    def _ids(self, name: str) -> set[MsgId]:
        """The ids the dedupe of an arriving durable starts from: those it stores now (a
        node restarted in the middle of a move lost its set; the old home sends again
        what it had no answer for, and what is stored here must not be stored twice)."""
        ids = self.ids.get(name)
        if ids is None:
            assert self._ctx.store is not None
            ids = self.ids[name] = self._ctx.store.durable_moves.stored_ids(name)
        return ids

    def _store(self, d: Durable, rows: list[list[Any]]) -> None:
        """Store moved messages ``[moves, redelivered, msg]`` (each id once)."""
        name = d.name
        store, ids = self._ctx.store, self.ids.get(name)
        assert store is not None
        for moves, delivered, msg in rows:
            if ids is not None:
                key = (msg[4], msg[5], msg[6])
                if key in ids:
                    self._ctx.drop("durable_move_duplicate")
                    continue
                ids.add(key)
            q = d.next_q
            store.enqueue(name, q, tuple(msg))
            store.durable_moves.set_moves(name, q, moves)
            if delivered:
                store.mark_delivered(name, [q])
            d.next_q += 1
            self.adopted += 1
            self.moved_in[name] = self.moved_in.get(name, 0) + 1
        self._f.wake(name)

    def seen(self, name: str, m: list[Any]) -> bool:
        """A message published straight to durable ``name`` while it is being adopted:
        True if its id was stored already (a duplicate, dropped)."""
        ids = self.ids[name]
        key = (m[4], m[5], m[6])
        if key in ids:
            self._ctx.drop("durable_move_duplicate")
            return True
        ids.add(key)
        return False

    def tick(self, now: float) -> None:
        for name in [n for n, t in self._until.items() if now >= t]:
            del self._until[name]
            self.ids.pop(name, None)
            self._received.pop(name, None)
            self._from.pop(name, None)
        homes = self._ctx.engine.durable_homes.homes
        for name, node in self._from.items():
            if name not in self._until and node not in homes.get(name, ()):
                # the old home ended it (its ``done`` may be lost on the way) or went
                # down: the dedupe ends after a longer wait
                self._until[name] = now + DEDUPE_GRACE + DONE_WAIT

    def take_over(self, name: str, *, final: bool) -> None:
        """This node's consumers of ``name`` through the old home become consumers of the
        durable here: each once it holds nothing from the old home (``final``: all of
        them, the old home has nothing left in flight)."""
        m = self._members.members.get(name)
        d = self._f.durables.get(name)
        if m is None or d is None or d.shared is None:
            return
        m.adopting = True
        if m.buffer:  # (prefetched, not handed out: stored here)
            self.keep(m, [[q, redelivered, msg] for q, redelivered, msg in m.buffer])
            m.buffer = []
        st, store = d.shared, self._ctx.store
        assert store is not None
        for ident, c in list(m.consumers.items()):
            if c.inflight and not final:
                continue
            c.forget()
            del m.consumers[ident]
            st.consumers[ident] = c
            store.set_attached(name, True)
        for req, _ in m.waiting:  # (opens the old home had not answered: served here)
            self._f.open_reply(d, req)
        m.waiting = []
        self._f.wake(name)
        if final and not m.consumers:
            self._members.end(m, detach=False)
        # (else, once without consumers, the member stays until ``done``: what the old home
        # sent them before it learnt of the move comes to it and is kept here, acknowledged;
        # ended, it would drop that, and the old home would move it flagged redelivered)

    def keep(self, m: Member, rows: list[Any]) -> None:
        """Deliveries ``[q, redelivered, msg]`` of the old home to a node whose durable
        moved here: stored here (as moved once), acknowledged to the old home."""
        d = self._f.durables.get(m.name)
        if d is None:  # (deleted here meanwhile: the old home gives them to others)
            m.releases.extend(r[0] for r in rows if type(r) is list and r and type(r[0]) is int)
            if not m.consumers:
                self._members.end(m, detach=True)
            return
        good = [r for r in rows if type(r) is list and len(r) == 3 and type(r[0]) is int]
        good = [r for r in good if _valid([r[0], 1, r[1], r[2]])]
        if len(good) < len(rows):
            self._ctx.bad(m.home, "shared durable message", "a malformed delivery row")
        self._store(d, [[1, bool(r[1]), r[2]] for r in good])
        m.acks.extend(r[0] for r in good)


def _valid(row: Any) -> bool:
    """A moved row: ``[q, moves, redelivered, msg]``."""
    if not (type(row) is list and len(row) == 4 and type(row[0]) is int):
        return False
    if not (type(row[1]) is int and 0 < row[1] < 1 << 31):
        return False
    msg = row[3]
    return (
        type(msg) is list
        and len(msg) == 8
        and type(msg[0]) is str
        and type(msg[1]) is bytes
        and type(msg[2]) is int
        and (msg[3] is None or type(msg[3]) is dict)
        and type(msg[4]) is str
        and type(msg[5]) is int
        and type(msg[6]) is int
        and type(msg[7]) in (int, float)
    )
