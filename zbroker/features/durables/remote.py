"""Shared durables with consumers on several nodes: the home serves network consumers.

A shared durable has ONE home node, the one that created it and stores its messages
(:mod:`.homes` advertises it under ``$ZB.DURABLE.<name>``). Consumers may attach on any
node; a node other than the home with consumers of it (:mod:`.members`) attaches to the
home as one *network consumer* with the credit of its consumers summed, and the home hands
it messages under that credit like to a local consumer (a :class:`~.shared.SharedConsumer`
whose ``node`` is set). There is one queue per name, so no backlog can be stranded on a
node whose consumers left: what ActiveMQ's per-broker copies need redistribution for
cannot happen (RabbitMQ quorum queues and JetStream consumers are built the same way); a
home whose own consumers left moves, whole, to its consumers (:mod:`.moves`).

What travels between the two nodes are internal persistent messages on the reserved
topic ``$ZB.SD.<node>`` (:func:`sd_topic`, one per node, which the receiving node holds
interest in while it has network consumers): they ride the store-and-forward path, so
each crosses each hop exactly once, in order, across link cuts and restarts. No client
can publish under ``$ZB``, and wildcard-led patterns never match it. Bodies (msgpack
maps, ``op`` says which):

* member -> home: ``attach`` (``session``, ``credit``, ``members``, ``pattern``,
  ``fresh``: not yet accepted; sent again while unanswered, whenever the credit changes
  and as a keepalive; a home that does not know a session that is not fresh answers
  ``gone``), ``ack`` and ``release``
  (``qs``: processed / handed back unprocessed, e.g. by a consumer that died), ``detach``.
* home -> member: ``attached`` (``stored``), ``refused`` (``message``), ``deliver``
  (``rows``: ``[q, redelivered, msg]``), ``gone`` (the session is not known here: the
  home restarted; the member attaches afresh).

A *session* names one attachment of a member node. What the home handed a session and
got no ``ack`` for goes to the other consumers, flagged redelivered (its delivery mark is
committed before the message leaves, as for every durable), when the session ends: a
``detach``, a new session from that node, or the home losing its route to the node (the
node died or every way to it is cut; checked every probe interval). Messages of an ended
session still on their way (a stored copy sent after a link comes back) are dropped by
the member, whose own session ended when the home's advertisement went; acks of an ended
session are ignored by the home. So a persistent message is processed once end to end,
except that a message redelivered (flagged) may have been processed before.

A local branch (``[routing] local``) of the home that the durable's pattern meets keeps
the durable there (:func:`kept_here`): an attach from another node is refused with an
error naming the branch, the home never moves it away, and a node never adopts one whose
pattern its own local branch meets — the branch's messages it stores never leave it.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import msgpack

from ... import wire
from ...const import RESERVED_PREFIX
from ...errors import ConfigError
from ...names import validate_broker_id
from ...node.events import DurableAttached
from ...topics import patterns_overlap
from .selecting import mismatch
from .shared import SharedConsumer, SharedState

if TYPE_CHECKING:
    from ...node.context import Context
    from .feature import Durables
    from .state import Durable

__all__ = [
    "SD_PREFIX",
    "SOURCE",
    "Home",
    "decode",
    "kept_here",
    "remote_ident",
    "sd_topic",
    "send",
]

#: the reserved topics network consumers and homes talk on
SD_PREFIX = RESERVED_PREFIX + ".SD."
#: the interest source of a node's ``$ZB.SD.<node>`` (the durables feature's sink takes it)
SOURCE = "sdr"
#: bytes of deliveries per internal message at most (a bigger batch is split)
CHUNK_BYTES = 256 * 1024
_I64 = 1 << 63
#: the most credit (and members) an attach may claim (it bounds a store query's LIMIT)
_CREDIT_MAX = 1 << 31


def sd_topic(node: str) -> str:
    """The topic messages to ``node`` about shared durables travel on (a broker ID's
    dots become ``:``: one segment)."""
    return SD_PREFIX + node.replace(".", ":")


def remote_ident(node: str) -> bytes:
    """The key of node ``node``'s network consumer among a durable's consumers (no
    ROUTER routing id starts with a zero byte followed by ``sd:``)."""
    return b"\x00sd:" + node.encode()


def kept_here(ctx: Context, pattern: str) -> str | None:
    """The first local branch (``[routing] local``) of this node that ``pattern`` meets,
    or None. A shared durable homed here on such a pattern stores messages that never
    leave this node: it has no consumers elsewhere and never moves (nor moves here)."""
    return next((b for b in ctx.engine.local_branches if patterns_overlap(b, pattern)), None)


def send(ctx: Context, node: str, bodies: list[dict[str, Any]]) -> None:
    """Originate internal persistent messages to ``node`` (store-and-forward)."""
    topic = sd_topic(node)
    rows = [(topic, msgpack.packb(b), wire.FMT_MSGPACK, None) for b in bodies]
    ctx.pipeline.originate(rows, persistent=True)


def decode(ctx: Context, m: list[Any]) -> dict[str, Any] | None:
    """The body of an internal message, checked (None: counted as bad and dropped)."""
    try:
        body = msgpack.unpackb(m[1], strict_map_key=False) if m[2] == wire.FMT_MSGPACK else None
        if not isinstance(body, dict) or not isinstance(body.get("op"), str):
            raise ValueError("not a map with an op")
        validate_broker_id(body.get("name"), "durable name")
        if not isinstance(body.get("session"), str):
            raise ValueError("no session")
    except (ValueError, TypeError, ConfigError, msgpack.ExtraData, msgpack.FormatError) as exc:
        ctx.bad(m[4] if isinstance(m[4], str) else "?", "bad_shared_durable", str(exc))
        return None
    return body


def _text(selector: Any) -> str | None:
    """An attach's selector: canonical text, or None (anything else is no selector's
    text, so it cannot match the home's and is refused)."""
    return selector if selector is None or isinstance(selector, str) else repr(selector)


def qs_of(body: dict[str, Any]) -> list[int] | None:
    qs = body.get("qs")
    if type(qs) is list and all(type(q) is int and 0 <= q < _I64 for q in qs):
        return qs
    return None


class Home:
    """The home side: the network consumers of the shared durables held here."""

    def __init__(self, f: Durables, ctx: Context) -> None:
        self._f = f
        self._ctx = ctx
        self.sent = False  # internal messages originated since the last pass (busy)

    def handle(self, node: str, body: dict[str, Any]) -> None:
        """A message from network consumer node ``node``."""
        op, name, session = body["op"], body["name"], body["session"]
        d = self._f.durables.get(name)
        if op == "attach":
            self._attach(d, node, body)
            return
        c = d.shared.consumers.get(remote_ident(node)) if d and d.shared else None
        if d is None or c is None or c.session != session:
            # an ended session's (its messages went to the others) or this node restarted
            if op != "detach":
                self._answer(node, name, session, "gone")
            return
        assert d.shared is not None and self._ctx.store is not None
        if op == "detach":
            self._f.shared_gone(d, c.ident, "closed")
            return
        qs = qs_of(body)
        if qs is None:
            self._ctx.bad(node, "bad_shared_durable", f"{op} without valid qs")
        elif op == "ack":
            done = d.shared.ack(c.ident, qs)
            self._ctx.store.ack_each(name, done)
            self._f.acked += len(done)
            self._f.wake(name)
        elif op == "release":  # handed back unprocessed: to another consumer, flagged
            for q in qs:
                if q in c.inflight:
                    del c.inflight[q]
                    bisect.insort(d.shared.redo, q)
            self._f.wake(name)

    def _answer(self, node: str, name: str, session: str, op: str, **kw: Any) -> None:
        send(self._ctx, node, [{"op": op, "name": name, "session": session, **kw}])
        self.sent = True

    def _attach(self, d: Durable | None, node: str, body: dict[str, Any]) -> None:
        name, session = body["name"], body["session"]
        credit, members = body.get("credit"), body.get("members")
        refused = None
        if d is None:
            refused = f"durable subscription {name!r} does not exist on node {self._ctx.broker_id}"
        elif body.get("pattern") != d.pattern:
            refused = f"durable subscription {name!r} exists with pattern {d.pattern!r}"
        elif (wrong := mismatch(d, _text(body.get("selector")))) is not None:
            refused = wrong
        elif (kept := kept_here(self._ctx, d.pattern)) is not None:
            refused = (
                f"durable subscription {name!r} on {d.pattern!r} has its home on node "
                f"{self._ctx.broker_id}, whose local branch {kept!r} keeps its messages "
                "there: it takes consumers on that node only"
            )
        elif d.consumer is not None and self._f.alive(d.consumer):
            refused = (
                f"durable subscription {name!r} is held by an exclusive consumer: "
                "it cannot be shared until that one detaches"
            )
        elif (
            not (type(credit) is int and type(members) is int and 0 < credit <= _CREDIT_MAX)
            or not 0 < members <= _CREDIT_MAX
        ):
            refused = f"attach needs a credit and member count in 1..{_CREDIT_MAX}"
        if refused is not None:
            self._answer(node, name, session, "refused", message=refused)
            return
        assert d is not None and type(credit) is int and type(members) is int
        if not self._ctx.engine.has_route(sd_topic(node), node):
            return  # its interest has not reached here yet: the node asks again
        ident = remote_ident(node)
        c = d.shared.consumers.get(ident) if d.shared is not None else None
        if (c is None or c.session != session) and body.get("fresh") is False:
            # a session accepted once that this node does not know: it restarted, or the
            # durable was deleted and made again; the member holds messages of it that
            # must not be acknowledged here, so it starts afresh
            self._answer(node, name, session, "gone")
            return
        store = self._ctx.store
        assert store is not None
        d.consumer = None
        if d.shared is None:
            d.shared = SharedState()
        if c is None or c.session != session:
            # a new session of that node: what the old one held goes to the others
            d.shared.attach(ident, credit)
            c = d.shared.consumers[ident]
            c.node, c.session = node, session
            self._ctx.emit(DurableAttached(name=name))
        c.credit, c.members = credit, members
        store.set_attached(name, True)
        self._f.wake(name)
        self._answer(node, name, session, "attached", stored=store.durable_depth(name))

    def flush(self, out: dict[SharedConsumer, list[dict[str, Any]]]) -> None:
        """Send network consumers what the pump handed them (after its marks' commit)."""
        for c, bodies in out.items():
            assert c.node is not None
            msgs, rows, size = [], [], 0
            for b in bodies:
                rows.append([b["q"], b["redelivered"], b["msg"]])
                size += len(b["msg"][1]) + len(b["msg"][0]) + 64
                if size >= CHUNK_BYTES:
                    msgs.append(rows)
                    rows, size = [], 0
            if rows:
                msgs.append(rows)
            name = bodies[0]["name"]
            send(
                self._ctx,
                c.node,
                [{"op": "deliver", "name": name, "session": c.session, "rows": r} for r in msgs],
            )
            self.sent = True

    def check(self) -> None:
        """Network consumers whose node this node has no route to any more are gone."""
        has_route = self._ctx.engine.has_route
        for d in list(self._f.durables.values()):
            if d.shared is None:
                continue
            for c in list(d.shared.consumers.values()):
                if c.node is not None and not has_route(sd_topic(c.node), c.node):
                    self._f.shared_gone(d, c.ident, "node unreachable")

    def queue_rows(self, d: Durable) -> dict[str, Any]:
        """A shared durable held here, for ``status()["queues"]``: consumers per node."""
        st, store = d.shared, self._ctx.store
        assert st is not None and store is not None
        members = {self._ctx.broker_id: 0}
        for c in st.consumers.values():
            node = c.node or self._ctx.broker_id
            members[node] = members.get(node, 0) + c.members
        return {
            "kind": "shared_durable",
            "name": d.name,
            "pattern": d.pattern,
            "home": self._ctx.broker_id,
            "node": self._ctx.broker_id,
            "members": members,
            "remote": [
                {"node": c.node, "credit": c.credit, "in_flight": len(c.inflight)}
                for c in st.consumers.values()
                if c.node is not None
            ],
            "stored": store.durable_depth(d.name),
            # (two homes of one name: opens that crossed, a move under way, or one an old
            # home restarted in; the one without consumers of its own moves into the other)
            "also_held_on": self._ctx.engine.durable_homes.elsewhere(d.name, self._ctx.broker_id),
            "in_flight": st.in_flight(),
            "delivered": st.delivered,
            "redelivered": st.redelivered,
        }
