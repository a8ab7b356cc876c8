"""A queue group's interest travels under a hidden ``$ZB.Q.`` key; link filters and local
branches judge it by the group's pattern (``routing/keys.py``), as they judge plain
interest: a filtered link carries a group's members where it would carry a plain
subscriber of the same pattern, and nowhere else."""

from __future__ import annotations

import pytest

from tests.routing.test_sim_properties import settle
from zbroker.routing import LinkOptions
from zbroker.routing.keys import group_key, judged_pattern, split_key
from zbroker.simqueues import QueueNetwork


def test_judged_pattern() -> None:
    assert judged_pattern(group_key("workers", "ORDERS.>")) == "ORDERS.>"
    assert judged_pattern(group_key("a.b", "X.*")) == "X.*"
    assert split_key(group_key("a.b", "X.*")) == ("a.b", "X.*")
    assert judged_pattern("$ZB.HOST.ORDERS.>") == "ORDERS.>"
    assert judged_pattern("ORDERS.>") == "ORDERS.>"
    assert judged_pattern("$ZB.ADVISORY.>") == "$ZB.ADVISORY.>"


def _pair(options: LinkOptions, local: tuple[str, ...] = ()) -> QueueNetwork:
    """A (publisher's node) linked to B (the members' node, with ``local`` branches)."""
    net = QueueNetwork(seed=1)
    net.add_node("A")
    net.add_node("B", local)
    net.add_link("B", "A", options=options)
    net.join("B", "workers", "ORDERS.>")
    settle(net)
    return net


@pytest.mark.parametrize(
    ("options", "reaches"),
    [
        (LinkOptions(include=("ORDERS.>",)), True),  # was refused: its key is a $ZB name
        (LinkOptions(include=("OTHER.>",)), False),
        (LinkOptions(exclude=("ORDERS.>",)), False),  # was let through
        (LinkOptions(exclude=(">",)), False),
        (LinkOptions(), True),
    ],
)
def test_a_link_filter_judges_a_group_by_its_pattern(options: LinkOptions, reaches: bool) -> None:
    net = _pair(options)
    for i in range(10):
        net.publish("A", f"ORDERS.{i}")
    settle(net)
    got = [d for d in net.group_deliveries if d.node == "B"]
    assert len(got) == (10 if reaches else 0)
    # where the filter refuses the pattern, A never learns of the members: nothing picked
    assert bool(net.nodes["A"].engine.groups.pick("ORDERS.x")) is reaches


def test_a_local_branch_keeps_its_groups_interest_home() -> None:
    net = _pair(LinkOptions(), local=("ORDERS.>",))
    assert not any(r for r in net.nodes["A"].engine.route("ORDERS.x", (), None))
    assert net.nodes["A"].engine.groups.pick("ORDERS.x") == []
