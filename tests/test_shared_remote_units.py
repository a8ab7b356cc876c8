"""Shared durables across nodes, parts alone: malformed internal messages are counted and
dropped (fuzzed like the other frames), and ``zbroker queues`` shows where a durable
consumed on this node lives."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.queues import format_queues
from zbroker import wire
from zbroker.features.durables.adoption import Adoption
from zbroker.features.durables.members import Member, Members
from zbroker.features.durables.remote import Home, decode, sd_topic
from zbroker.features.durables.shared import SharedConsumer, SharedState, send_shared
from zbroker.features.durables.state import Durable
from zbroker.store import Store


class StubContext:
    """What Home and Members use of a node's context, recording what they do. (It stands
    where a node's context is typed, with a SimpleNamespace for the feature: the calls
    that take them ignore ``arg-type``.)"""

    broker_id = "B"
    incarnation = 7

    def __init__(self) -> None:
        self.bad_seen: list[str] = []
        self.dropped: list[str] = []
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.pipeline = SimpleNamespace(originate=self._originate)
        self.engine = SimpleNamespace(
            durable_homes=SimpleNamespace(homes={}),
            has_route=lambda pattern, origin: True,
            local_branches=(),
        )
        self.store: Store | None = None

    def _originate(self, rows: list[Any], *, persistent: bool) -> list[int]:
        assert persistent
        self.sent.extend((r[0], msgpack.unpackb(r[1])) for r in rows)
        return []

    def bad(self, source: str, reason: str, detail: str) -> None:
        self.bad_seen.append(detail)

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped.append(reason)

    def add_interest(self, pattern: str, source: str) -> None:
        pass

    def drop_interest(self, pattern: str, source: str) -> None:
        pass

    def send_to(self, ident: bytes, frame: bytes) -> bool:
        return True


def parts() -> tuple[StubContext, Members]:
    ctx = StubContext()
    f = SimpleNamespace(durables={}, refuse=lambda req, msg: None, alive=lambda i: True)
    home = Home(f, ctx)  # type: ignore[arg-type]  # (stubs: see StubContext)
    return ctx, Members(f, ctx, home)  # type: ignore[arg-type]  # (stubs)


def message(payload: bytes, fmt: int = wire.FMT_MSGPACK) -> list[Any]:
    return [sd_topic("B"), payload, fmt, None, "A", 1, 1, 0.0]


def test_malformed_bodies_are_counted_and_dropped() -> None:
    ctx, members = parts()
    for payload, fmt in [
        (b"\xc1", wire.FMT_MSGPACK),  # not msgpack
        (msgpack.packb([1, 2]), wire.FMT_MSGPACK),  # not a map
        (msgpack.packb({"op": "ack"}), wire.FMT_MSGPACK),  # no name
        (msgpack.packb({"op": "ack", "name": "bad name", "session": "1"}), wire.FMT_MSGPACK),
        (msgpack.packb({"op": "ack", "name": "n", "session": 3}), wire.FMT_MSGPACK),
        (msgpack.packb({"op": "ack", "name": "n", "session": "1"}), wire.FMT_BYTES),
    ]:
        assert decode(ctx, message(payload, fmt)) is None  # type: ignore[arg-type]  # (stub)
        members.take(message(payload, fmt))
    assert len(ctx.bad_seen) == 12
    assert ctx.sent == []


def test_an_ended_sessions_messages_are_dropped_and_its_acks_answered_gone() -> None:
    ctx, members = parts()
    members.take(message(msgpack.packb({"op": "deliver", "name": "n", "session": "9", "rows": []})))
    assert ctx.dropped == ["shared_durable_stale"]
    members.take(message(msgpack.packb({"op": "ack", "name": "n", "session": "9", "qs": [1]})))
    assert ctx.sent == [(sd_topic("A"), {"op": "gone", "name": "n", "session": "9"})]


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.lists(st.integers(-5, 2**64 - 1), max_size=4),
    st.lists(st.lists(st.one_of(st.integers(0, 9), st.booleans(), st.none()), max_size=4)),
    st.lists(  # delivery rows, well formed or nearly
        st.tuples(st.integers(0, 9), st.booleans(), st.lists(st.integers(0, 3), max_size=9)).map(
            list
        ),
        max_size=5,
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        ["attach", "ack", "release", "detach", "attached", "refused", "deliver", "gone", "x"]
    ),
    st.dictionaries(
        st.sampled_from(["qs", "rows", "credit", "members", "pattern", "stored"]), _values
    ),
)
def test_fuzzed_bodies_never_raise(op: str, extra: dict[str, Any]) -> None:
    _ctx, members = parts()
    m = members.members["n"] = Member("n", "x.>", "A")  # (a member, so deliveries go in)
    m.session = "1"
    m.consumers[b"c"] = SharedConsumer(b"c", 10, 0)
    members.take(message(msgpack.packb({"op": op, "name": "n", "session": "1", **extra})))


def test_zbroker_queues_names_the_home_of_a_durable_consumed_here() -> None:
    row = {
        "kind": "shared_durable",
        "name": "billing",
        "pattern": "bill.>",
        "home": "A",
        "node": "B",
        "members": {"B": 2},
        "in_flight": 3,
        "delivered": 10,
        "redelivered": 1,
    }
    text = format_queues([row, {**row, "home": "B", "members": {"A": 1, "B": 2}, "stored": 5}])
    lines = text.splitlines()
    assert "billing (home A)" in lines[-2] and "B:2" in lines[-2]
    assert "(home" not in lines[-1] and "A:1, B:2" in lines[-1]


def test_an_acknowledgement_listing_a_q_twice_acknowledges_it_once() -> None:
    from zbroker.features.durables.shared import SharedState

    st = SharedState()
    st.attach(b"x", 10)
    st.consumers[b"x"].inflight.update({5: None, 6: None})
    assert st.ack(b"x", [5, 5, 6]) == [5, 6]  # (a KeyError before: the ack was lost)
    assert st.ack(b"x", [5]) == []


def test_a_home_that_does_not_know_an_accepted_session_answers_gone() -> None:
    """A keepalive attach (``fresh`` False) of a session the home does not know (it
    restarted unseen, or the durable was deleted and made again) is answered ``gone``: the
    member drops what it holds of that session instead of acknowledging it to the new
    queue; a fresh attach is accepted as before."""
    from zbroker.features.durables.state import Durable

    ctx = StubContext()
    d = Durable("n", "x.>", 1, 0)
    f = SimpleNamespace(durables={"n": d}, refuse=lambda req, msg: None, alive=lambda i: True)
    home = Home(f, ctx)  # type: ignore[arg-type]  # (stubs: see StubContext)
    body = {"op": "attach", "name": "n", "session": "4", "pattern": "x.>", "credit": 10}
    home.handle("C", {**body, "members": 1, "fresh": False})
    assert ctx.sent == [(sd_topic("C"), {"op": "gone", "name": "n", "session": "4"})]
    assert d.shared is None  # (nothing attached)


def _adoption(tmp: str) -> tuple[StubContext, Adoption, Durable, Store]:
    """A new home's side of a move (its store in ``tmp``), with durable ``n`` shared."""
    ctx = StubContext()
    ctx.store = store = Store(Path(tmp) / "store.db")
    store.create_durable("n", "x.>", 0)
    d = Durable("n", "x.>", 1, 0)
    d.shared = SharedState()
    f = SimpleNamespace(
        durables={"n": d}, wake=lambda name: None, refuse=lambda req, msg: None, alive=bool
    )
    members = Members(f, ctx, Home(f, ctx))  # type: ignore[arg-type]  # (stubs)
    return ctx, Adoption(f, ctx, members, {}), d, store  # type: ignore[arg-type]  # (stubs)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["adopt", "rows", "done", "rows_ok", "y"]),
    st.dictionaries(
        st.sampled_from(["rows", "pattern", "selector", "max_msgs", "overflow", "max_age"]),
        _values,
    ),
)
def test_fuzzed_move_bodies_never_raise(op: str, extra: dict[str, Any]) -> None:
    """The new home's side of a move (adoption.py) takes any body: what is malformed is
    counted as bad input, what is well formed is stored, and nothing raises."""
    with tempfile.TemporaryDirectory() as tmp:
        _ctx, adoption, _d, store = _adoption(tmp)
        adoption.ids["n"] = set()
        adoption.handle("A", {"op": op, "name": "n", "session": "1", **extra})
        store.commit()
        store.close()


def test_moved_rows_are_stored_once_with_their_move_counts() -> None:
    """Rows moved to the new home are stored in order with their move counts and flags;
    a message id that came before (straight, or in an earlier row) is dropped, counted."""
    with tempfile.TemporaryDirectory() as tmp:
        ctx, adoption, d, store = _adoption(tmp)
        adoption.ids["n"] = {("P", 1, 7)}  # (published straight here during the move)
        rows = [
            [10 + n, n, n == 2, ["x.a", b"%d" % n, 0, None, "P", 1, 5 + n, 0.0]] for n in (1, 2, 3)
        ]
        rows.append(rows[0])  # (the same id twice)
        adoption.handle("A", {"op": "rows", "name": "n", "session": "1", "rows": rows})
        # every row is answered (stored, or a copy of one here): the old home deletes them
        assert ctx.sent[-1] == (
            sd_topic("A"),
            {"op": "rows_ok", "name": "n", "session": "1", "qs": [11, 12, 13, 11]},
        )
        store.commit()
        kept = store.pending_durable("n", 0, 10)
        assert [r[2] for r in kept] == [b"1", b"3"]  # (P/1/7 came straight; P/1/6 twice)
        assert [bool(r[9]) for r in kept] == [False, False]
        assert store.durable_moves.moved("n") == {1: 1, 2: 3}
        assert ctx.dropped == ["durable_move_duplicate", "durable_move_duplicate"]
        assert d.next_q == 3
        store.close()


def test_an_acknowledgement_of_a_q_from_a_queue_consumed_no_more_is_not_taken_for_another() -> None:
    """A consumer held q 7 of the old home's queue when its durable moved; the new home
    then delivers its own q 7. The consumer's first ack of 7 is for the old message (it
    came first), so it must not acknowledge the new one; its second ack of 7 does."""
    from zbroker.features.durables.shared import SharedState

    st = SharedState()
    st.attach(b"x", 10)
    c = st.consumers[b"x"]
    c.inflight.update({7: None, 8: None})
    c.forget()  # (the queue it consumes changed)
    c.inflight[7] = None  # (the new queue's q 7)
    assert st.ack(b"x", [7, 8]) == []  # (the old 7 and the old 8)
    assert 7 in c.inflight and not c.stale
    assert st.ack(b"x", [7]) == [7]


class FullQueueContext(StubContext):
    """A node whose connection to consumer ``slow`` has a full queue."""

    def send_to(self, ident: bytes, frame: bytes) -> bool:
        if ident == b"slow":
            raise zmq.Again()
        self.sent.append((ident.decode(), wire.decode_control(frame)[2]))
        return True


def test_a_consumer_whose_queue_is_full_is_slow_not_gone() -> None:
    """A send that finds a consumer's connection queue full (zmq.Again) puts the
    message back first in line and keeps the consumer; only one found gone is handed on
    as gone (it used to be both: a slow last consumer marked the durable detached)."""
    d = Durable("billing", "billing.>", 10, 1000)
    st = d.shared = SharedState()
    st.attach(b"slow", 5)
    st.attach(b"quick", 5)
    slow, quick = st.consumers[b"slow"], st.consumers[b"quick"]
    frames = []
    for q, c in ((1, slow), (2, quick), (3, slow)):
        c.inflight[q] = None
        c.share += 1
        frames.append((c, q, {"name": "billing", "q": q}))
    gone: list[bytes] = []
    ctx = FullQueueContext()
    # (a stub context, as StubContext is)
    sent = send_shared(ctx, d, frames, {}, lambda _d, ident, _why: gone.append(ident))  # type: ignore[arg-type]
    assert sent == 1 and gone == []
    assert st.redo == [1, 3] and slow.inflight == {} and list(quick.inflight) == [2]
    assert set(st.consumers) == {b"slow", b"quick"}
