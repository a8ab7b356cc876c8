"""A property of shared durables whose home moves (issue 14: random topologies, random
members and churn), with in-thread :class:`~zbroker.Broker` s and real clients: the
engine simulator does not model durables, so the property runs the real nodes.

Each example draws a topology of 2-4 nodes (line, star or ring), the move settings, the
durable's home, a persistent backlog published on random nodes, then a schedule of
consumers attaching and leaving on random nodes, publishing and pauses (so homes move
while messages flow). At the end one consumer at least is attached; every published
payload must arrive, a payload arriving more than once does so flagged redelivered (at
most one unflagged copy: a consumer left holding it unacknowledged), none arrives that was
not published, and exactly one node holds the durable, with nothing left stored."""

from __future__ import annotations

import os
import pprint
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.helpers import Collector
from tests.integration.moves import Slow
from tests.integration.test_shared_remote import (
    GRACE,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    link,
    queue_row,
)
from zbroker import Broker, Client
from zbroker.client import Message, Subscription

NAME = "billing"
#: seconds for every payload to arrive (generous: a loaded 2-core machine)
COLLECT = 60.0
#: seconds for routes to spread and for the last move to settle
SETTLE = 30.0
LETTERS = "ABCD"
#: examples per run; set ZB_PROPERTY_EXAMPLES to search longer (the suite keeps it small)
EXAMPLES = int(os.environ.get("ZB_PROPERTY_EXAMPLES", "6"))


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 4))
    node = st.integers(0, n - 1)
    attach = st.tuples(st.just("attach"), node, st.integers(1, 50), st.integers(0, 1000))
    leave = st.tuples(st.just("leave"), st.integers(0, 7))  # which of those attached
    publish = st.tuples(st.just("publish"), node, st.integers(1, 100))
    pause = st.tuples(st.just("sleep"), st.integers(2, 10))  # tenths of a second
    # churn is the point: attach, leave and publish drawn twice as often as a pause
    steps = st.one_of(attach, leave, publish, attach, leave, publish, pause)
    return {
        "nodes": n,
        "shape": draw(st.sampled_from(["line", "star", "ring"])),
        "redistribution_delay": draw(st.sampled_from([0.3, 0.5])),
        "max_moves": draw(st.sampled_from([1, 3])),
        "home": draw(node),
        "backlog": draw(st.lists(st.tuples(node, st.integers(1, 100)), max_size=3)),
        "steps": draw(st.lists(steps, min_size=2, max_size=8)),
        "last": draw(attach),  # attached at the end if no consumer is left
    }


def peers(n: int, shape: str) -> list[list[int]]:
    """For each node, the earlier nodes it links to (a link is dialled from one side)."""
    if shape == "star":
        return [[]] + [[0] for _ in range(1, n)]
    out: list[list[int]] = [[]] + [[i - 1] for i in range(1, n)]
    if shape == "ring" and n > 2:
        out[-1].append(0)  # closes the loop: loop-free routing is the engine's job
    return out


class Run:
    """One example's nodes, clients and consumers; :meth:`close` stops all of them."""

    def __init__(self, broker_factory: BrokerFactory, client_factory: ClientFactory) -> None:
        self._broker_factory = broker_factory
        self._client_factory = client_factory
        self.brokers: list[Broker] = []
        self.clients: list[Client] = []
        self.publishers: dict[int, Client] = {}
        self.consumers: list[Slow] = []
        self.attached: list[Subscription] = []
        self.sent: list[int] = []
        self.log: list[str] = []
        self.scenario: dict[str, Any] = {}

    def start(self, sc: dict[str, Any]) -> None:
        self.scenario = sc
        opts = {k: sc[k] for k in ("redistribution_delay", "max_moves")}
        for i, to in enumerate(peers(sc["nodes"], sc["shape"])):
            links = tuple(link(f"l{i}{j}", self.brokers[j]) for j in to)
            self.brokers.append(self._broker_factory(broker_id=LETTERS[i], links=links, **opts))

    def client(self, i: int) -> Client:
        c = self._client_factory(self.brokers[i].endpoint)
        self.clients.append(c)
        return c

    def publish(self, i: int, k: int) -> None:
        pub = self.publishers.get(i) or self.publishers.setdefault(i, self.client(i))
        first = len(self.sent)
        for p in range(first, first + k):
            pub.publish("bill.x", p, persistent=True, confirm=p == first + k - 1)
            self.sent.append(p)
        self.log.append(f"published {first}..{first + k - 1} on {LETTERS[i]}")

    def attach(self, i: int, credit: int, pause_us: int) -> None:
        got = Slow(pause_us / 1e6)
        sub = self.client(i).subscribe("bill.>", got, durable=NAME, shared=True, credit=credit)
        self.consumers.append(got)
        self.attached.append(sub)
        self.log.append(f"attached #{len(self.consumers) - 1} on {LETTERS[i]} credit {credit}")

    def leave(self, which: int) -> None:
        if self.attached:
            self.attached.pop(which % len(self.attached)).unsubscribe()
            self.log.append("left")

    def holders(self) -> list[str]:
        return [b.broker_id for b in self.brokers if any(d["name"] == NAME for d in durables(b))]

    def received(self) -> list[Message]:
        return [m for c in self.consumers for m in c.snapshot()]

    def report(self, *found: Any) -> str:
        """What a failure shows (in full: pytest cuts a long repr, not a string): what was
        found wrong, the scenario and steps taken, each node's durable counters and rows."""
        nodes = {}
        for b in self.brokers:
            counters = b.status()["counters"]
            nodes[b.broker_id] = {
                "counters": {k: v for k, v in counters.items() if k.startswith("durable")},
                "row": queue_row(b, NAME),
                "durables": durables(b),
            }
        per_consumer = [len(c) for c in self.consumers]
        seen = {"scenario": self.scenario, "log": self.log, "nodes": nodes, "per": per_consumer}
        return pprint.pformat((*found, seen), width=100)

    def close(self) -> None:
        for c in reversed(self.clients):
            c.close()
        for b in reversed(self.brokers):
            b.stop()


def durables(b: Broker) -> list[dict[str, Any]]:
    return list(b.status()["durables"])


def known_everywhere(run: Run, wait_until: WaitUntil, home: int) -> None:
    """Wait until every other node routes the durable's key and pattern to ``home``."""
    origin = LETTERS[home]
    clients = [run.client(i) for i in range(len(run.brokers)) if i != home]
    want = {"$ZB.DURABLE." + NAME, "bill.>"}

    def known(c: Client) -> bool:
        return want <= {r["pattern"] for r in c.routes() if r["origin"] == origin}

    assert wait_until(lambda: all(known(c) for c in clients), SETTLE), run.report()


def play(run: Run, sc: dict[str, Any], wait_until: WaitUntil) -> None:
    home = sc["home"]
    run.client(home).subscribe(
        "bill.>", Collector(), durable=NAME, shared=True
    ).unsubscribe()  # created, no consumer
    known_everywhere(run, wait_until, home)
    for i, k in sc["backlog"]:
        run.publish(i, k)
    for step in sc["steps"]:
        kind, *args = step
        if kind == "attach":
            run.attach(*args)
        elif kind == "leave":
            run.leave(*args)
        elif kind == "publish":
            run.publish(*args)
        else:
            time.sleep(args[0] / 10)
            run.log.append(f"slept; home {run.holders()}")
    if not run.attached:
        run.attach(*sc["last"][1:])


def check(run: Run, wait_until: WaitUntil) -> None:
    sent = set(run.sent)
    assert wait_until(lambda: sent <= {m.payload for m in run.received()}, COLLECT), run.report(
        "missing", sorted(sent - {m.payload for m in run.received()})
    )
    time.sleep(GRACE)
    got = run.received()
    copies = Counter(m.payload for m in got)
    unflagged = Counter(m.payload for m in got if not m.redelivered)
    assert set(copies) == sent, run.report("invented", sorted(set(copies) - sent))
    twice = {p: (copies[p], unflagged[p]) for p in copies if unflagged[p] > 1}
    assert not twice, run.report("twice unflagged (copies, unflagged)", twice)
    assert wait_until(
        lambda: len(run.holders()) == 1 and all(d["stored"] == 0 for d in holding(run)),
        SETTLE,
    ), run.report("holders", run.holders())


def holding(run: Run) -> list[dict[str, Any]]:
    return [d for b in run.brokers for d in durables(b) if d["name"] == NAME]


#: found by this property (a defect in zbroker/features/durables/moves.py, not fixed here):
#: the home moves A -> B (B's consumer), and B's consumer leaves within A's handover grace
#: (HANDOVER_GRACE, 2 s) while A still holds and advertises the durable. B, the higher ID
#: with no consumer anywhere, takes A for a second home and moves into it ("the higher
#: moves into the lower"); A accepts although it is moving to B. Both moves finish, each
#: node deletes its durable: the message published on B and the durable itself are lost.
#: It fails every run (12 of 12 on a loaded 2-core machine) until moves.py is fixed.
CROSSED_MOVES = {
    "nodes": 2,
    "shape": "line",
    "redistribution_delay": 0.3,
    "max_moves": 1,
    "home": 0,
    "backlog": [],
    "steps": [("attach", 1, 1, 0), ("sleep", 6), ("sleep", 6), ("leave", 0), ("publish", 1, 1)],
    "last": ("attach", 1, 1, 0),
}


@pytest.mark.timeout(600)  # a failing example waits COLLECT, and is replayed once to report
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    # no shrinking: each example runs real nodes for seconds, and timing decides its fate
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@example(sc=CROSSED_MOVES)
@given(sc=scenarios())
def test_every_message_reaches_one_member_while_homes_move(
    sc: dict[str, Any],
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
) -> None:
    """Random topology, settings, home, backlog, consumers churning and publishing on
    random nodes: each persistent message is consumed, at most once unflagged, none
    invented, and the durable ends on exactly one node with nothing stored. The
    fixtures are per test, not per example: each example stops its own nodes and clients
    (stop and close are idempotent, the fixtures' teardown repeats them harmlessly)."""
    run = Run(broker_factory, client_factory)
    try:
        run.start(sc)
        play(run, sc, wait_until)
        check(run, wait_until)
    finally:
        run.close()
