"""Queue group parts without nodes: the loop rule of a message sent back along its path,
what a node may spill to each other node, the outboxes of a link that went, and the
group's ``lost`` count in its status row."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from zbroker.features.queues.frames import send_outboxes
from zbroker.features.queues.members import LocalGroup
from zbroker.features.queues.report import queue_status
from zbroker.features.queues.spill import room
from zbroker.routing.groups import group_key, revisit_refused

G = group_key("w", "jobs.>")


def test_a_node_takes_a_message_again_only_on_its_way_back_and_once() -> None:
    assert not revisit_refused(("A",), "B", "B")  # (not on the path: not a revisit)
    assert revisit_refused(("A", "B"), "C", "A")  # a loop: its target is not on the path
    assert not revisit_refused(("A", "B"), "A", "A")  # back to A, where it entered
    assert not revisit_refused(("A", "C", "B"), "A", "C")  # ... through C, again
    assert revisit_refused(("A", "C", "B", "C"), "A", "C")  # but not a third time


def test_spill_room_is_the_free_credit_advertised_less_what_was_sent_since() -> None:
    groups: Any = SimpleNamespace(
        origins={G: {"A", "B", "C", "D"}},
        capacity={(G, "B"): (7, 2, 10), (G, "C"): (3, 1, 0)},
    )
    local = LocalGroup(G, "w", "jobs.>", 100)
    # B: 10 free; C: none; D: no capacity heard (one, as for any pick); A: this node
    assert room(groups, local, "A") == {"B": 10, "D": 1}
    local.spent["B"] = (7, 4)  # 4 sent to B since its stamp 7
    local.spent["E"] = (1, 1)  # (a node gone: forgotten)
    assert room(groups, local, "A") == {"B": 6, "D": 1}
    assert "E" not in local.spent
    groups.capacity[(G, "B")] = (8, 2, 10)  # B advertised again: its count starts over
    assert room(groups, local, "A") == {"B": 10, "D": 1}


def test_the_outbox_of_a_link_that_went_down_is_dropped_for_its_groups() -> None:
    dropped: list[tuple[int, str]] = []
    links: Any = SimpleNamespace(by_engine_id={})
    entries = [["t", b"", 0, None, "A", 1, i, 0.0, ("A",), ("B", G)] for i in range(3)]
    assert send_outboxes(links, {"l1": entries}, lambda e, r: dropped.append((len(e), r))) == 0
    assert dropped == [(3, "link_down")]


def test_a_groups_lost_counts_what_this_node_lost_besides_dead_members() -> None:
    groups: Any = SimpleNamespace(origins={G: {"A"}}, capacity={}, policies={})
    local = LocalGroup(G, "w", "jobs.>", 100)
    local.lost = 2
    (row,) = queue_status(groups, {G: local}, "B", {G: 5})
    assert row["lost"] == 7 and row["members"] == {"A": 1, "B": 0}
    (row,) = queue_status(groups, {}, "B", {G: 5})  # (no member here: the count stays)
    assert row["lost"] == 5
