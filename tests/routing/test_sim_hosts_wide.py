"""Topic-host routing (rule 8) with interest of every shape beside the hosted branches:
inside a branch, apart from it, and wider than it or overlapping it (``>`` or ``*.b``
beside a hosted ``a.>``), with selectors, on random meshes whose hosts fail and return.

The defect these tests keep away: a subscriber on a pattern wider than a hosted branch
was served by the host along the host's shortest path to it, which could cross the
publisher's way to the host; the loop rule refused that copy and the message was lost
(:mod:`zbroker.routing.hostward` says how the wider pattern's hosted part now goes toward
the hosts)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import TYPE_CHECKING, Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from zbroker.routing.filters import pattern_covers
from zbroker.routing.hostward import intersect
from zbroker.sim import Network
from zbroker.topics import match, patterns_overlap

from .test_sim_properties import Topology, draw_topic, name, patterns, settle, topologies
from .test_sim_selectors import SELECTORS, headers

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.format import format_routes
else:
    from zbroker.cli.format import format_routes

MsgId = tuple[str, int, int]
# hosted branches over the segments the patterns draw from (a, b)
BRANCHES = ["a.>", "a.*", "*.b", "a.b.>", "b", ">"]
# a local branch on every node, or none: its topics never leave the publisher's node
LOCALS = [None, "b.a.>", "a.b"]
topics = st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=4).map(".".join)


def line(nodes: str, hosts: str, branch: str = "ORDERS.>") -> Network:
    net = Network(seed=5)
    for n in nodes:
        net.add_node(n, host_branches=(branch,) if n in hosts else ())
    for a, b in itertools.pairwise(nodes):
        net.add_link(a, b)
    return net


def got(net: Network, msg: MsgId) -> Counter[tuple[str, tuple[str, ...]]]:
    return Counter((d.node, d.path) for d in net.deliveries if d.msg_id == msg)


def kind(pattern: str, branches: tuple[str, ...]) -> str:
    """How a subscription's pattern stands to the hosted branches (for coverage)."""
    if any(pattern_covers(b, pattern) for b in branches):
        return "inside"
    if any(patterns_overlap(b, pattern) for b in branches):
        return "wider/overlapping"
    return "apart"


# -- the failing example, kept ---------------------------------------------------------------


def test_a_wide_subscriber_behind_the_publisher_gets_hosted_topics() -> None:
    """W - P - R - H: the host's way to W crosses P and R, the publisher's way to it.
    Before: W's ``>`` was served by H, whose copy toward R (on the path) was refused; W
    got nothing. Now W's hosted part ``ORDERS.>`` went toward H through P, so P claims
    W: one copy each, over each link once."""
    net = line("WPRH", "H")
    net.subscribe("W", ">")
    settle(net)
    # the part held for W's ">" went toward the host only; ">" itself everywhere
    for n in "PRH":
        held = {e["pattern"] for e in net.nodes[n].engine.interest() if e["origin"] == "W"}
        assert held == {">", "ORDERS.>"}, n
    (part,) = [e for e in net.nodes["W"].engine.interest() if e["pattern"] == "ORDERS.>"]
    assert part["link"] is None and part["hosted_part_of"] == [">"]
    msg = net.publish("P", "ORDERS.EU")
    other = net.publish("P", "PRICE.X")  # outside the branch: direct, as ever
    settle(net)
    assert got(net, msg) == Counter({("W", ("P",)): 1})
    assert got(net, other) == Counter({("W", ("P",)): 1})
    assert net.stats.duplicates_dropped == net.stats.loops_dropped == 0


def test_a_wide_subscriber_beyond_the_host_and_one_off_the_way() -> None:
    """A mesh: X - P - R - H - Y with a chord X - R. Subscribers on ``>`` at X, Y and R,
    on ``*.EU`` at H, and inside the branch at X: each gets each message once."""
    net = line("XPRHY", "H")
    net.add_link("X", "R")
    subs = {net.subscribe(n, ">"): n for n in "XYR"}
    subs[net.subscribe("H", "*.EU")] = "H"
    subs[net.subscribe("X", "ORDERS.EU")] = "X"
    settle(net)
    for src in "XPRHY":
        msg = net.publish(src, "ORDERS.EU")
        settle(net)
        per = Counter(d.subscriber for d in net.deliveries if d.msg_id == msg)
        assert per == Counter(dict.fromkeys(subs, 1)), src
    assert net.stats.duplicates_dropped == net.stats.loops_dropped == 0


def test_the_part_follows_the_hosts_and_the_subscription() -> None:
    """The part exists while the branch has a live host and the wide subscription lasts;
    selectors and stickiness of the wide pattern go with it."""
    net = line("WPH", "H")
    sid = net.subscribe("W", ">", "r = 'a'")
    settle(net)
    (part,) = [e for e in net.nodes["H"].engine.interest() if e["pattern"] == "ORDERS.>"]
    assert part["origin"] == "W" and part["selectors"] == ["(r = 'a')"]
    # a plain subscription on the part's own pattern: one key, wanting everything
    plain = net.subscribe("W", "ORDERS.>")
    settle(net)
    (part,) = [e for e in net.nodes["H"].engine.interest() if e["pattern"] == "ORDERS.>"]
    assert "selectors" not in part
    net.unsubscribe("W", plain)
    settle(net)
    (part,) = [e for e in net.nodes["H"].engine.interest() if e["pattern"] == "ORDERS.>"]
    assert part["selectors"] == ["(r = 'a')"]
    # the host goes: the part is withdrawn, ">" stays
    net.remove_node("H")
    settle(net)
    assert {e["pattern"] for e in net.nodes["P"].engine.interest()} == {">"}
    net.add_node("H", host_branches=("ORDERS.>",))
    settle(net)
    assert {e["pattern"] for e in net.nodes["P"].engine.interest() if e["origin"] == "W"} == {
        ">",
        "ORDERS.>",
    }
    net.unsubscribe("W", sid)
    settle(net)
    assert all(e["origin"] != "W" for e in net.nodes["H"].engine.interest())


@given(a=st.sampled_from(BRANCHES) | patterns(), b=patterns(), t=topics)
def test_intersect_matches_exactly_what_both_match(a: str, b: str, t: str) -> None:
    part = intersect(a, b)
    assert (part is not None) == patterns_overlap(a, b)
    both = match(a, t) and match(b, t)
    assert (part is not None and match(part, t)) == both
    if part is not None:
        assert pattern_covers(a, part) and pattern_covers(b, part)


# -- the property ---------------------------------------------------------------------------


def build(
    topo: Topology, seed: int, hosts: dict[int, tuple[str, ...]], local: str | None
) -> Network:
    net = Network(seed=seed)
    locals_ = (local,) if local else ()
    for i in range(topo.n):
        net.add_node(name(i), local_branches=locals_, host_branches=hosts.get(i, ()))
    for d, a in topo.edges:
        net.add_link(name(d), name(a))
    return net


def expected(net: Network, src: str, topic: str, h: dict[str, Any], local: str | None) -> set[Any]:
    if local is not None and match(local, topic):
        # a local branch: only the publisher's own subscribers
        return {(n, s) for n, s in net.expected_deliveries(src, topic, h) if n == src}
    return net.expected_deliveries(src, topic, h)


def check_round(
    net: Network, data: st.DataObject, branches: tuple[str, ...], local: str | None
) -> None:
    """Publish a few messages from random live nodes, each with random headers: every
    subscriber whose pattern matches and whose selector accepts gets it exactly once, no
    copy is dropped as a duplicate or a loop, and a local branch's topic crosses no link."""
    settle(net)
    live = sorted(n for n, node in net.nodes.items() if node.alive)
    sent = []
    for _ in range(data.draw(st.integers(1, 5), label="messages")):
        src = data.draw(st.sampled_from(live), label="publisher")
        topic = draw_topic(data, net)
        h = data.draw(headers, label="headers")
        want = expected(net, src, topic, h, local)
        sent.append((src, topic, h, net.publish(src, topic, h), want))
    dup0, loops0 = net.stats.duplicates_dropped, net.stats.loops_dropped
    settle(net)
    assert net.stats.loops_dropped == loops0
    assert net.stats.duplicates_dropped == dup0
    for src, topic, h, msg_id, want in sent:
        deliveries = Counter((d.node, d.subscriber) for d in net.deliveries if d.msg_id == msg_id)
        assert deliveries == Counter(dict.fromkeys(want, 1)), (src, topic, h)
        if local is not None and match(local, topic):
            assert not any(c[0] == msg_id for c in net.stats.crossings), (src, topic)
        hosted = any(match(b, topic) for b in branches)
        for n, sid in want:
            shape = kind(net.nodes[n].subs[sid], branches)
            event(f"{'hosted' if hosted else 'direct'} topic, {shape} subscriber")


@settings(max_examples=100, deadline=None)
@given(topo=topologies(max_nodes=12), data=st.data(), seed=st.integers(0, 10_000))
def test_every_shape_of_interest_exactly_once_while_hosts_fail_and_return(
    topo: Topology, data: st.DataObject, seed: int
) -> None:
    branches = tuple(
        data.draw(st.lists(st.sampled_from(BRANCHES), min_size=1, max_size=2, unique=True))
    )
    host_ids = data.draw(st.sets(st.integers(0, topo.n - 1), min_size=1, max_size=3), label="hosts")
    hosts = {
        i: tuple(data.draw(st.lists(st.sampled_from(branches), min_size=1, unique=True)))
        for i in host_ids
    }
    local = data.draw(st.sampled_from(LOCALS), label="local branch")
    net = build(topo, seed, hosts, local)
    subs = data.draw(
        st.lists(
            st.tuples(st.integers(0, topo.n - 1), patterns(), st.sampled_from(SELECTORS)),
            min_size=1,
            max_size=14,
        ),
        label="subs",
    )
    for i, p, sel in subs:
        net.subscribe(name(i), p, sel)
    check_round(net, data, branches, local)
    for _ in range(data.draw(st.integers(1, 3), label="churn")):
        live_hosts = sorted(name(i) for i in hosts if net.nodes[name(i)].alive)
        dead = sorted(n for n, node in net.nodes.items() if not node.alive)
        alive = len(net.nodes) - len(dead)
        step = data.draw(st.sampled_from(["host", "subs"]), label="step")
        if step == "subs":
            # wide subscriptions come and go: their hosted parts follow
            node = name(data.draw(st.integers(0, topo.n - 1)))
            if net.nodes[node].alive:
                held = sorted(net.nodes[node].subs)
                if held and bool(data.draw(st.booleans(), label="unsubscribe")):
                    net.unsubscribe(node, data.draw(st.sampled_from(held)))
                else:
                    net.subscribe(
                        node, data.draw(patterns()), data.draw(st.sampled_from(SELECTORS))
                    )
        elif dead and (not live_hosts or alive == 1 or data.draw(st.booleans(), label="return")):
            back = data.draw(st.sampled_from(dead), label="back")
            idx = int(back[1:])
            net.add_node(
                back, local_branches=(local,) if local else (), host_branches=hosts.get(idx, ())
            )
            for i, p, sel in subs:
                if name(i) == back and data.draw(st.booleans(), label="resubscribe"):
                    net.subscribe(back, p, sel)
        elif live_hosts:
            net.remove_node(data.draw(st.sampled_from(live_hosts), label="down"))
        check_round(net, data, branches, local)


def test_routes_table_marks_a_hosted_part() -> None:
    net = line("WPH", "H")
    net.subscribe("W", ">")
    settle(net)
    text = format_routes(net.nodes["W"].engine.interest())
    assert "ORDERS.> (hosted part of >)" in text
