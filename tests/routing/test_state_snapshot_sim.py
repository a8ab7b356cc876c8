"""The snapshot rule of topics with state on the simulator (many routing engines, random
frame delays): an owner reads its snapshot for a subscriber only once it routes the
subscription's pattern toward the subscriber's node; from then on every update it
publishes reaches the subscriber, so the snapshot joined with the live updates by version
(:class:`zbroker.stateful.SnapshotGate`) has no gap and no duplicate, whatever the
topology, the delays and when the writer writes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.sim import Network
from zbroker.stateful import SnapshotGate


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 6))
    edges = [(i, draw(st.integers(0, i - 1))) for i in range(1, n)]  # a random tree
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3))
    for a, b in extra:
        if a != b and (a, b) not in edges and (b, a) not in edges:
            edges.append((a, b))
    owner, sub = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    # virtual times (ms) of the writes, relative to the subscription (some before)
    writes = sorted(draw(st.lists(st.integers(-20, 60), min_size=1, max_size=25)))
    query_delay = draw(st.integers(0, 10))  # the query reaches the owner this much later
    answer_at = draw(st.floats(0, 1))  # where the answer falls among the live arrivals
    return {
        "n": n,
        "edges": edges,
        "owner": owner,
        "sub": sub,
        "writes": writes,
        "query_delay": query_delay,
        "answer_at": answer_at,
        "seed": draw(st.integers(0, 2**16)),
    }


@given(scenarios())
@settings(max_examples=200, deadline=None)
def test_snapshot_after_the_route_then_live_has_no_gap_and_no_duplicate(s: dict[str, Any]) -> None:
    net = Network(seed=s["seed"])
    names = [f"N{i}" for i in range(s["n"])]
    for name in names:
        net.add_node(name)
    for a, b in s["edges"]:
        net.add_link(names[a], names[b])
    net.run()
    owner, sub = names[s["owner"]], names[s["sub"]]
    t0 = net.now + 0.030
    version = 0
    published: list[tuple[Any, int]] = []  # (msg id, version) in publish order
    snapshot: int | None = None

    def write_until(t: float) -> None:
        nonlocal version
        while s["writes"] and t0 + s["writes"][0] / 1000 <= t:
            at = t0 + s["writes"].pop(0) / 1000
            net.run(until=at)
            version += 1
            published.append((net.publish(owner, "S.x"), version))

    write_until(t0)
    net.run(until=t0)
    net.subscribe(sub, "S.>")
    # the query leaves after the subscription; the owner reads once it routes toward sub
    net.run(until=net.now + s["query_delay"] / 1000)
    engine = net.nodes[owner].engine
    while not engine.has_route("S.>", sub):
        step = net.now + 0.0005
        write_until(step)
        net.run(until=step)
    write_until(net.now)
    snapshot = version  # the value the owner holds when it reads (0: none yet)
    write_until(t0 + 1.0)
    net.run()
    by_id = dict(published)
    arrived = [by_id[d.msg_id] for d in net.deliveries if d.node == sub]
    seen: list[tuple[str, int]] = []
    gate = SnapshotGate(
        lambda v: seen.append(("live", v)),
        lambda v: seen.append(("initial", v[4])),
        lambda: None,
        lambda v: ("S.x", v, owner, 0),
    )
    # the answer reaches the subscriber anywhere among the live arrivals (it travels
    # another way than they do)
    cut = round(s["answer_at"] * len(arrived))
    for v in arrived[:cut]:
        gate.live(v)
    gate.snapshot([["S.x", b"", 0, None, snapshot, owner, 0.0, None]] if snapshot else [], [])
    for v in arrived[cut:]:
        gate.live(v)
    want = ([("initial", snapshot)] if snapshot else []) + [
        ("live", v) for v in range(snapshot + 1, version + 1)
    ]
    assert seen == want
